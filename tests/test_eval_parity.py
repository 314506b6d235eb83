"""``birdrl eval --agent hf:RUN/stageN/model`` evaluates a saved stage model exactly as the
curriculum did: the run writes ``birdrl_eval.json`` (prompt, tool descriptions, limits,
decoding) beside the model, evaluates from the same settings, and the CLI reads them back.

The stage is the smoke preset's stage 1 on the random tiny model (seconds); its episodes are
replayed by the CLI on the same tasks and must match message for message, with the same
success rate. Without the file the CLI's own defaults show another prompt, and says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from birdrl.agents.eval_settings import (
    EVAL_SETTINGS_FILE,
    AgentEvalSettings,
    EvalSettingsError,
    choose_eval_settings,
    read_eval_settings,
)
from birdrl.agents.registry import ModelSettings
from birdrl.cli import app
from birdrl.env.tools import TOOLS
from birdrl.tasks.benchmark import bundled_task_file
from birdrl.tasks.bundled import default_db_root, ensure_databases

# -- the settings file, no model ------------------------------------------------------------


def test_settings_round_trip_and_refuse_what_they_cannot_read(tmp_path: Path) -> None:
    settings = AgentEvalSettings(schema_budget_chars=300, sample_rows=0, token_count="approx")
    path = settings.write(tmp_path)
    assert path.name == EVAL_SETTINGS_FILE and json.loads(path.read_text())["version"] == 1
    assert read_eval_settings(tmp_path) == settings
    assert read_eval_settings(tmp_path / "elsewhere") is None

    def refused(data: dict[str, Any]) -> str:
        path.write_text(json.dumps(data))
        with pytest.raises(EvalSettingsError) as caught:
            read_eval_settings(tmp_path)
        return str(caught.value)

    good = settings.to_dict()
    assert "version 2; this birdrl reads versions 1 to 1" in refused({**good, "version": 2})
    assert "unknown settings schema_budget" in refused({**good, "schema_budget": 10})
    assert "sample_rows must be int, not '3'" in refused({**good, "sample_rows": "3"})
    assert "max_tool_calls must be >= 1, got 0" in refused({**good, "max_tool_calls": 0})
    assert str(path) in refused({**good, "max_tool_calls": 0})


def test_options_override_a_preset_and_the_preset_is_the_curriculums() -> None:
    pytest.importorskip("trl", reason="presets' tool schemas come from the training side")
    from birdrl.training.environment import tool_schemas
    from birdrl.training.eval_settings import preset_eval_settings

    chosen = choose_eval_settings("gold", preset_eval_settings("tiny"), sample_rows=2)
    s = chosen.settings
    # tiny: 300 characters of schema, 2 tool calls, 160 new tokens, the training tools
    assert (s.schema_budget_chars, s.sample_rows, s.max_tool_calls) == (300, 2, 2)
    assert s.max_new_tokens == 160 and s.tools == tuple(tool_schemas()) != TOOLS
    assert chosen.overridden == ("sample_rows",) and chosen.recorded
    assert chosen.describe().startswith("episode settings from preset 'tiny'; set by options")
    default = choose_eval_settings("gold")
    assert not default.recorded and default.settings == AgentEvalSettings()
    assert default.describe().startswith("episode settings from birdrl eval's defaults")


def test_a_recorded_context_sizes_a_vllm_engine(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    AgentEvalSettings(max_context_tokens=4096, dtype="float32").write(tmp_path)
    chosen = choose_eval_settings(f"vllm:{tmp_path}")
    assert chosen.recorded and str(tmp_path / EVAL_SETTINGS_FILE) in chosen.origin
    loaded = chosen.model_settings(ModelSettings(), "vllm")
    assert (loaded.max_model_len, loaded.dtype) == (4096, "float32")
    given = chosen.model_settings(ModelSettings(max_model_len=1024), "vllm")
    assert given.max_model_len == 1024  # an option the user gave wins


# -- a saved stage model, evaluated by the run and by the CLI ------------------------------


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Stage 1 of the smoke preset, evaluated on 4 held-out tasks in 2-turn episodes."""
    pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
    from birdrl.training.config import apply_overrides, load_preset
    from birdrl.training.curriculum import run_curriculum

    overrides = [
        "evaluation.base_model=false",
        "evaluation.limit=4",
        "evaluation.max_tool_calls=2",
        "evaluation.max_new_tokens=24",
    ]
    run_dir = tmp_path_factory.mktemp("parity") / "run"
    run_curriculum(apply_overrides(load_preset("smoke"), overrides), run_dir, stages=[1])
    stage_dir = run_dir / "stage1"
    episodes = [
        json.loads(line)
        for line in (stage_dir / "eval_trajectories.jsonl").read_text().splitlines()
    ]
    # the held-out tasks, in the order the run evaluated them, as a task file
    records = {
        r["instance_id"]: r
        for r in map(json.loads, bundled_task_file("test").read_text().splitlines())
    }
    tasks = run_dir.parent / "held_out.jsonl"
    tasks.write_text("".join(json.dumps(records[e["instance_id"]]) + "\n" for e in episodes))
    ensure_databases()
    return {
        "model": stage_dir / "model",
        "record": json.loads((stage_dir / "record.json").read_text()),
        "episodes": episodes,
        "tasks": tasks,
    }


def run_cli(
    stage: dict[str, Any], model: Path, out: Path, *options: str, status: int = 0
) -> tuple[Result, Any]:
    """``birdrl eval --agent hf:MODEL`` on the stage's tasks, ending with exit `status`;
    the output and the episodes."""
    episodes = out / "episodes.jsonl"
    args = ["eval", "--agent", f"hf:{model}", "--tasks", str(stage["tasks"])]
    args += ["--db-root", str(default_db_root()), "--workers", "1"]
    args += ["--json", str(out / "report.json"), "--trajectories", str(episodes), *options]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == status, result.output
    return result, [json.loads(line) for line in episodes.read_text().splitlines()]


def test_the_cli_reproduces_a_stage_evaluation(stage: dict[str, Any], tmp_path: Path) -> None:
    from birdrl.training.environment import tool_schemas

    recorded = read_eval_settings(stage["model"])
    assert recorded is not None and recorded.written_by.endswith("preset 'smoke', stage 1")
    assert (recorded.schema_budget_chars, recorded.sample_rows) == (600, 0)  # smoke's [prompt]
    assert (recorded.max_tool_calls, recorded.max_new_tokens) == (2, 24)
    assert recorded.tools == tuple(tool_schemas()) and recorded.token_count == "approx"

    result, episodes = run_cli(stage, stage["model"], tmp_path)
    where = stage["model"] / EVAL_SETTINGS_FILE
    assert f"episode settings from {where}, written by" in " ".join(result.output.split())
    report = json.loads((tmp_path / "report.json").read_text())
    evaluation = stage["record"]["evaluation"]
    assert report["summary"]["overall"]["rate"] / 100 == evaluation["success_rate"]
    assert len(episodes) == len(stage["episodes"]) == evaluation["n"] == 4
    for mine, theirs in zip(episodes, stage["episodes"], strict=True):
        assert mine["instance_id"] == theirs["instance_id"]
        assert mine["messages"] == theirs["messages"]  # prompt, model turns, observations
        same = ("stop_reason", "reward", "success", "turns", "tool_calls", "submission")
        assert {k: mine[k] for k in same} == {k: theirs[k] for k in same}


def test_without_the_file_the_cli_shows_its_own_prompt(
    stage: dict[str, Any], tmp_path: Path
) -> None:
    bare = tmp_path / "model"
    shutil.copytree(stage["model"], bare)
    (bare / EVAL_SETTINGS_FILE).unlink()
    theirs = stage["episodes"][0]["messages"][1]["content"]  # the run's first user prompt
    short = ("--max-tool-calls", "1", "--max-new-tokens", "2")
    # 8,000 characters of schema do not fit the tiny model's 4,096-token context: every
    # episode is an infrastructure failure (exit status 3), where the run's prompt fitted
    result, episodes = run_cli(stage, bare, tmp_path / "default", *short, status=3)
    said = " ".join(result.output.split())
    assert "fills hf:model's context of 4096 tokens" in said
    assert f"episode settings from birdrl eval's defaults ({bare} has no {EVAL_SETTINGS_FILE})" in (
        said
    )
    assert "schema 8000 chars, 3 sample rows" in said
    mine = episodes[0]["messages"][1]["content"]
    assert mine != theirs and len(mine) > len(theirs)  # more schema, and sample rows
    # the run's prompt settings, given as options, give the run's prompt back
    prompt = ("--schema-budget", "600", "--sample-rows", "0")
    result, episodes = run_cli(stage, bare, tmp_path / "options", *short, *prompt)
    said = " ".join(result.output.split())
    assert (
        "set by options: max_tool_calls, schema_budget_chars, sample_rows, max_new_tokens" in said
    )
    assert episodes[0]["messages"][1]["content"] == theirs


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--predictions", "preds.jsonl", "--preset", "tiny"), "--preset needs --agent"),
        (("--agent", "gold", "--preset", "no-such-preset"), "no-such-preset"),
        (("--agent", "gold", "--schema-budget", "-1"), "schema_budget_chars must be >= 0"),
        (
            ("--agent", "hf:/no/such/model", "--sample-rows", "1"),
            "no model directory at /no/such/model",
        ),
    ],
)
def test_episode_options_are_refused_in_one_line(options: tuple[str, ...], message: str) -> None:
    result = CliRunner().invoke(app, ["eval", "--tasks", "absent.jsonl", *options])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    (line,) = result.output.splitlines()
    assert line.startswith("error: ") and message in line


def test_a_hub_models_settings_are_read_from_the_cache_without_downloading(
    offline_cache: Path,
) -> None:
    """``vllm:ORG/NAME``: the settings file is taken from the hub cache when the model's
    snapshot holds one; a model not cached gets the defaults, and nothing is fetched for
    the settings (the agent fetches the model itself)."""
    from birdrl.agents.eval_settings import recorded_settings

    found, where = recorded_settings("vllm:org/absent")
    assert found is None and "org/absent has no birdrl_eval.json in the hub cache" in where
    repo = offline_cache / "models--org--trained"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    AgentEvalSettings(schema_budget_chars=600, sample_rows=0).write(snapshot)
    found, where = recorded_settings("vllm:org/trained")
    assert found is not None and (found.schema_budget_chars, found.sample_rows) == (600, 0)
    assert where.startswith(str(snapshot / EVAL_SETTINGS_FILE))
