"""The paper's stage ablation from one config: which stages a run needs, measured.

Each variant is the curriculum with some stages left out (``full``: 1-2-3-4, ``no-s1``:
2-3-4, ``no-s2``: 1-3-4, ``no-s3``: 1-2-4, ``s4-only``: 4; a custom variant is written as
its stages, e.g. ``s1-s2``). Variants run one after another in ``{out}/{variant}``, and
nothing is computed twice: the base model's evaluation, every stage dataset (a function of
the config alone) and every stage whose whole history is the same (``no-s3`` reuses
``full``'s stages 1 and 2, ``no-s2`` its stage 1) are taken from the variant that already
has them, by copying their records, which point at the trained models. The result is one
table (``ablation.md``): each variant's final held-out metrics, with the published 7B
ladder beside it for reference.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from birdrl.training.config import ConfigError, CurriculumConfig
from birdrl.training.diagnostics import finite_number
from birdrl.training.report import DASH, StageRecord, markdown_table, number_cell

__all__ = [
    "PAPER_7B",
    "VARIANTS",
    "AblationResult",
    "VariantResult",
    "parse_variants",
    "run_ablation",
    "write_ablation_table",
]

VARIANTS: dict[str, tuple[int, ...]] = {
    "full": (1, 2, 3, 4),
    "no-s1": (2, 3, 4),
    "no-s2": (1, 3, 4),
    "no-s3": (1, 2, 4),
    "s4-only": (4,),
}
PAPER_7B: dict[str, float] = {
    "base": 26.2,
    "s1": 35.2,
    "s1-s2": 39.2,
    "s1-s2-s3": 40.6,
    "full": 44.4,
}
"""Published success rates (%) of the 7B model after each stage of the full curriculum
(BIRD-CRITIC; base, then S1 → S4). Only these are known; other variants show a dash."""
_CUSTOM = re.compile(r"^s[1-4](?:-s[1-4])*$")


def parse_variants(spec: str) -> dict[str, tuple[int, ...]]:
    """``"full,no-s3,s1-s2"`` -> variant name -> stages, in the order given."""
    out: dict[str, tuple[int, ...]] = {}
    for name in (part.strip() for part in spec.split(",")):
        if not name:
            continue
        if name in VARIANTS:
            out[name] = VARIANTS[name]
        elif _CUSTOM.match(name):
            stages = tuple(int(s[1]) for s in name.split("-"))
            if list(stages) != sorted(set(stages)):
                raise ConfigError(f"ablation variant {name!r}: stages must increase")
            out[name] = stages
        else:
            known = ", ".join(VARIANTS)
            raise ConfigError(
                f"unknown ablation variant {name!r}: use {known}, or stages such as s1-s2-s4"
            )
    if not out:
        raise ConfigError("no ablation variant given")
    return out


@dataclass(frozen=True)
class VariantResult:
    name: str
    stages: tuple[int, ...]
    run_dir: Path
    records: list[StageRecord]
    seconds: float
    """Wall time this variant added (reused stages cost nothing)."""
    reused: tuple[int, ...]
    """Stages taken from an earlier variant (0: the base model's evaluation)."""

    @property
    def final(self) -> StageRecord | None:
        return self.records[-1] if self.records else None


@dataclass(frozen=True)
class AblationResult:
    variants: list[VariantResult]
    table: Path
    seconds: float


def _histories(stages: Sequence[int]) -> list[tuple[int, ...]]:
    """The history that produced each stage's model: stage k of (1, 3, 4) is (1, 3)[:k]."""
    return [tuple(stages[: i + 1]) for i in range(len(stages))]


def _copy_stage(src: Path, dst: Path, *, with_record: bool) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    if (src / "data").is_dir() and not (dst / "data").exists():
        shutil.copytree(src / "data", dst / "data")
    if with_record:
        for name in ("record.json", "eval_trajectories.jsonl"):
            if (src / name).is_file():
                shutil.copy2(src / name, dst / name)


def run_ablation(
    config: CurriculumConfig,
    out_dir: str | Path,
    variants: dict[str, tuple[int, ...]],
    *,
    progress: Callable[[str], None] | None = None,
    run: Callable[..., Any] | None = None,
) -> AblationResult:
    """Run every variant (see the module docstring); resumable: a variant directory that
    holds finished stages continues from them. `run` is `run_curriculum` (injectable)."""
    if run is None:
        from birdrl.training.curriculum import run_curriculum

        run = run_curriculum
    say = progress or (lambda _msg: None)
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[int, ...], Path] = {}
    """A stage history -> the directory of the stage trained with it."""
    data: dict[int, Path] = {}
    """Stage -> a directory holding its built dataset."""
    base: Path | None = None
    results: list[VariantResult] = []
    t_all = time.monotonic()
    for name, stages in variants.items():
        vdir = out / name
        reused: list[int] = []
        if base is not None:
            _copy_stage(base, vdir / "stage0", with_record=True)
            reused.append(0)
        for stage, history in zip(stages, _histories(stages), strict=True):
            if history in done:
                _copy_stage(done[history], vdir / f"stage{stage}", with_record=True)
                reused.append(stage)
            elif stage in data:
                _copy_stage(data[stage], vdir / f"stage{stage}", with_record=False)
        say(f"ablation {name} (stages {'-'.join(map(str, stages))}): running in {vdir}")
        t0 = time.monotonic()
        result = run(config, vdir, stages=stages, resume=True, progress=progress)
        seconds = time.monotonic() - t0
        records = [r for r in result.records if r.stage == 0 or r.stage in stages]
        for stage, history in zip(stages, _histories(stages), strict=True):
            done.setdefault(history, vdir / f"stage{stage}")
            if (vdir / f"stage{stage}" / "data" / "data.jsonl").is_file():
                data.setdefault(stage, vdir / f"stage{stage}")
        if base is None and (vdir / "stage0" / "record.json").is_file():
            base = vdir / "stage0"
        results.append(VariantResult(name, stages, vdir, records, seconds, tuple(reused)))
    table = write_ablation_table(out, results)
    return AblationResult(results, table, time.monotonic() - t_all)


def _pct(value: Any) -> str:
    rate = finite_number(value)
    return DASH if rate is None else f"{100 * rate:.1f}"


def _paper(name: str, stages: tuple[int, ...]) -> str:
    key = "full" if stages == (1, 2, 3, 4) else "-".join(f"s{s}" for s in stages)
    value = PAPER_7B.get(key)
    return DASH if value is None else f"{value:.1f}"


def write_ablation_table(out_dir: Path, results: Sequence[VariantResult]) -> Path:
    """``ablation.md`` (and ``ablation.json``) in `out_dir`: one row per variant, its final
    stage's held-out metrics and wall time."""
    header = [
        "variant",
        "stages",
        "SR %",
        "mean reward",
        "tool-call validity %",
        "submission rate %",
        "minutes (reused)",
        "paper 7B SR %",
    ]
    rows: list[list[str]] = []
    base = next((r for v in results for r in v.records if r.stage == 0), None)
    if base is not None and base.evaluation:
        ev = base.evaluation
        rows.append(
            [
                "base model",
                "—",
                _pct(ev.get("success_rate")),
                number_cell(ev.get("mean_reward"), ".3f"),
                _pct(ev.get("tool_call_validity")),
                _pct(ev.get("submission_rate")),
                DASH,
                f"{PAPER_7B['base']:.1f}",
            ]
        )
    payload = []
    for v in results:
        ev = (v.final.evaluation if v.final is not None else None) or {}
        reused = ", ".join("base" if s == 0 else f"s{s}" for s in v.reused) or "none"
        rows.append(
            [
                v.name,
                "-".join(f"s{s}" for s in v.stages),
                _pct(ev.get("success_rate")),
                number_cell(ev.get("mean_reward"), ".3f"),
                _pct(ev.get("tool_call_validity")),
                _pct(ev.get("submission_rate")),
                f"{v.seconds / 60:.1f} ({reused})",
                _paper(v.name, v.stages),
            ]
        )
        payload.append(
            {
                "variant": v.name,
                "stages": list(v.stages),
                "seconds": round(v.seconds, 1),
                "reused": list(v.reused),
                "evaluation": ev,
            }
        )
    lines = ["# Stage ablation", "", *markdown_table(header, rows)]
    lines += [
        "",
        "Metrics are the final stage's evaluation on the held-out tasks (SR: all tests pass; "
        "mean reward: mean pass rate). The paper column is the published 7B ladder "
        "(base 26.2 → S1 35.2 → S1-S2 39.2 → S1-S2-S3 40.6 → full 44.4), for reference only: "
        "a dash where the paper reports no such run.",
    ]
    path = out_dir / "ablation.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out_dir / "ablation.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return path
