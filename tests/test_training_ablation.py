"""The stage ablation: variant parsing, reuse of the base evaluation, stage data and shared
stage histories between variants, and the table. The curriculum itself is replaced by a
recorder that writes what a run writes (records, data, a model directory), so this runs in
milliseconds; the real curriculum's resume semantics are what the reuse relies on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from birdrl.training.ablation import VARIANTS, parse_variants, run_ablation
from birdrl.training.config import ConfigError
from birdrl.training.report import StageRecord


@dataclass
class _Result:
    records: list[StageRecord]


class FakeCurriculum:
    """Writes what `run_curriculum` writes; remembers which stages it trained and which
    datasets it built."""

    def __init__(self) -> None:
        self.trained: list[tuple[str, int, str]] = []  # (variant, stage, started from)
        self.built: list[tuple[str, int]] = []
        self.base_evals = 0

    def __call__(self, config: Any, run_dir: Path, *, stages, resume, progress) -> _Result:
        assert resume
        records = []
        base = run_dir / "stage0" / "record.json"
        if not base.is_file():
            self.base_evals += 1
            self._write(run_dir, 0, "base", "embedded", {"success_rate": 0.0, "mean_reward": 0.0})
        records.append(self._read(base))
        model = "embedded"
        for stage in range(1, 5):
            path = run_dir / f"stage{stage}" / "record.json"
            if path.is_file():
                record = self._read(path)
                records.append(record)
                model = record.model_dir
                continue
            if stage not in stages:
                continue
            data = run_dir / f"stage{stage}" / "data" / "data.jsonl"
            if not data.is_file():
                self.built.append((run_dir.name, stage))
                data.parent.mkdir(parents=True)
                data.write_text("{}\n")
            self.trained.append((run_dir.name, stage, Path(model).parent.name or model))
            model_dir = run_dir / f"stage{stage}" / "model"
            model_dir.mkdir(parents=True)
            ev = {"success_rate": 0.1 * stage, "mean_reward": 0.05 * stage, "n": 12}
            records.append(self._write(run_dir, stage, "sft", str(model_dir), ev))
            model = str(model_dir)
        return _Result(records)

    @staticmethod
    def _write(run_dir: Path, stage: int, kind: str, model: str, ev: dict) -> StageRecord:
        record = StageRecord(stage, f"s{stage}", kind, model, 1.0, [], ev, [])
        path = run_dir / f"stage{stage}" / "record.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record.to_dict()))
        return record

    @staticmethod
    def _read(path: Path) -> StageRecord:
        return StageRecord.from_dict(json.loads(path.read_text()))


def test_parse_variants() -> None:
    assert parse_variants("full, no-s3") == {"full": (1, 2, 3, 4), "no-s3": (1, 2, 4)}
    assert parse_variants("s1-s2") == {"s1-s2": (1, 2)}
    with pytest.raises(ConfigError, match="unknown ablation variant"):
        parse_variants("full,no-s9")
    with pytest.raises(ConfigError, match="must increase"):
        parse_variants("s3-s1")
    with pytest.raises(ConfigError, match="no ablation variant"):
        parse_variants(" , ")


def test_variants_reuse_what_earlier_variants_computed(tmp_path: Path) -> None:
    fake = FakeCurriculum()
    result = run_ablation(object(), tmp_path, dict(VARIANTS), run=fake)
    assert fake.base_evals == 1  # the base model is evaluated once for all variants
    # full trains 4 stages; no-s1 trains 2, 3, 4 from the base; no-s2 only 3 and 4 (its
    # stage 1 is full's); no-s3 only 4 (stages 1-2 are full's); s4-only trains stage 4
    assert [(v, s) for v, s, _ in fake.trained] == [
        ("full", 1),
        ("full", 2),
        ("full", 3),
        ("full", 4),
        ("no-s1", 2),
        ("no-s1", 3),
        ("no-s1", 4),
        ("no-s2", 3),
        ("no-s2", 4),
        ("no-s3", 4),
        ("s4-only", 4),
    ]
    starts = {(v, s): start for v, s, start in fake.trained}
    assert starts[("no-s3", 4)] == "stage2"  # from full's stage-2 model
    assert starts[("no-s2", 3)] == "stage1"
    assert starts[("s4-only", 4)] == "embedded"
    assert fake.built == [("full", 1), ("full", 2), ("full", 3), ("full", 4)]  # data once
    by_name = {v.name: v for v in result.variants}
    assert by_name["no-s3"].reused == (0, 1, 2)
    assert by_name["full"].reused == ()
    table = result.table.read_text()
    assert "| full | s1-s2-s3-s4 | 40.0 | 0.200 |" in table
    assert "| no-s3 | s1-s2-s4 | 40.0 |" in table and "44.4" in table
    assert "| base model |" in table
    saved = json.loads((tmp_path / "ablation.json").read_text())
    assert [row["variant"] for row in saved] == list(VARIANTS)


def test_an_interrupted_ablation_resumes(tmp_path: Path) -> None:
    first = FakeCurriculum()
    run_ablation(object(), tmp_path, parse_variants("full"), run=first)
    again = FakeCurriculum()
    run_ablation(object(), tmp_path, parse_variants("full,no-s3"), run=again)
    assert [(v, s) for v, s, _ in again.trained] == [("no-s3", 4)]


def test_cli_ablation_reuses_a_real_stage(tmp_path: Path) -> None:
    """Through the CLI with the real curriculum (smoke preset): variant s1-s2 takes stage 1,
    model and data, from variant s1 instead of training it again."""
    pytest.importorskip("trl", reason="the train extra is not installed")
    from typer.testing import CliRunner

    from birdrl.cli import app

    out = tmp_path / "abl"
    args = ["curriculum", "--preset", "smoke", "--out", str(out), "--ablation", "s1,s1-s2"]
    result = CliRunner().invoke(app, [*args, "--set", "evaluation.base_model=false"])
    assert result.exit_code == 0, result.output
    first = json.loads((out / "s1" / "stage1" / "record.json").read_text())
    reused = json.loads((out / "s1-s2" / "stage1" / "record.json").read_text())
    assert reused["model_dir"] == first["model_dir"]  # not trained twice
    assert not (out / "s1-s2" / "stage1" / "model").exists()
    assert (out / "s1-s2" / "stage2" / "record.json").is_file()
    table = (out / "ablation.md").read_text()
    assert "| s1 | s1 |" in table and "| s1-s2 | s1-s2 |" in table and "35.2" in table
