"""One error path for the CLI: a bad option or input is one line (``error: ...``) and exit
status 1, never a traceback; what is scored but odd (predictions for no task, skipped
tasks) is reported, not hidden; and docs/cli.md documents every option and preset."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from birdrl.cli import app
from birdrl.tasks.benchmark import bundled_task_file
from birdrl.tasks.bundled import default_db_root, ensure_databases
from birdrl.training.config import list_presets

ROOT = Path(__file__).resolve().parent.parent


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_line_error(result: Result) -> str:
    """The single ``error: ...`` line of a refused command (exit status 1, no traceback)."""
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture(scope="module")
def db_root() -> Path:
    ensure_databases()
    return default_db_root()


def bundled_records(n: int) -> list[dict[str, Any]]:
    """The first `n` records of bundled:test, as written in its task file."""
    lines = bundled_task_file("test").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()][:n]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
        encoding="utf-8",
    )
    return path


def normalized(text: str) -> str:
    return " ".join(text.split())


# 1. worker counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("eval", "--agent", "gold", "--workers", "0"),
        ("tasks", "validate", "bundled:test", "--workers", "0"),
    ],
)
def test_workers_below_one_is_a_one_line_error(args: tuple[str, ...]) -> None:
    assert "workers must be >= 1, got 0" in one_line_error(invoke(*args))


# 2. tool-call budget ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("eval", "--agent", "gold", "--max-tool-calls", "0"),
        ("eval", "--agent", "gold", "--max-tool-calls", "-1"),
        ("demo", "--agent", "gold", "--max-tool-calls", "0"),
    ],
)
def test_max_tool_calls_below_one_is_refused(args: tuple[str, ...]) -> None:
    assert "max_tool_calls must be >= 1" in one_line_error(invoke(*args))


# 3. episodes in flight ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("eval", "--agent", "gold", "--concurrency", "0"),
        ("data", "build", "--stage", "2", "--concurrency", "0", "--out"),
    ],
)
def test_concurrency_below_one_is_refused_before_anything_runs(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    out = () if args[0] == "eval" else (str(tmp_path / "data"),)
    # one line and status 1: no progress display, pool or episode was started first
    assert "concurrency must be >= 1" in one_line_error(invoke(*args, *out))


# 3b. how a model agent loads its model -------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--agent", "vllm:m", "--dtype", "float16"), "dtype must be one of auto, float32"),
        (("--agent", "vllm:m", "--gpu-memory-utilization", "1.5"), "must be in (0, 1], not 1.5"),
        (("--agent", "vllm:m", "--gpu-memory-utilization", "0"), "must be in (0, 1], not 0.0"),
        (("--agent", "vllm:m", "--tensor-parallel-size", "0"), "at least 1, not 0"),
        (("--agent", "vllm:m", "--max-model-len", "0"), "max_model_len must be at least 1"),
        (("--agent", "hf:m", "--tensor-parallel-size", "2"), "only vllm: agents use them"),
        (("--agent", "gold", "--enforce-eager"), "enforce_eager set for 'gold'"),
        (("--agent", "no-such-agent"), "unknown agent 'no-such-agent'"),
    ],
)
def test_model_settings_are_refused_before_anything_runs(
    options: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    # the task file does not exist: the settings are judged before it is looked for
    absent = str(tmp_path / "absent.jsonl")
    assert message in one_line_error(invoke("eval", "--tasks", absent, *options))


# 4. predictions that match no task ----------------------------------------------------------


def test_predictions_for_no_task_are_counted_and_named(db_root: Path, tmp_path: Path) -> None:
    first, second = bundled_records(2)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [first, second])
    preds = write_jsonl(
        tmp_path / "preds.jsonl",
        [
            {"instance_id": first["instance_id"], "pred_sqls": first["sol_sql"]},
            {"instance_id": "ghost-1", "pred_sqls": ["SELECT 1"]},
            {"instance_id": "ghost-2", "pred_sqls": ["SELECT 2"]},
        ],
    )
    report = tmp_path / "report.json"
    result = invoke(
        "eval", "--tasks", str(tasks), "--db-root", str(db_root), "--predictions", str(preds),
        "--workers", "1", "--json", str(report),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = normalized(result.output)
    assert "warning: 2 of 3 predictions match no task" in text
    assert "'ghost-1', 'ghost-2'" in text
    summary = json.loads(report.read_text())["summary"]
    assert summary["unmatched_predictions"] == 2
    # scoring is unchanged: the task without a prediction is scored as an empty prediction
    assert summary["missing_predictions"] == 1
    assert (summary["overall"]["total"], summary["overall"]["success"]) == (2, 1)


def test_an_infrastructure_failure_is_not_reported_as_a_score(
    db_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that refuses the replica user scores nothing: the run says how many tasks
    could not be scored, names the likely cause and exits non-zero (before: SR 0.0%, exit 0)."""
    from birdrl.db.errors import PoolError
    from birdrl.evaluation.evaluator import Evaluator
    from birdrl.evaluation.unscored import UNSCORED_EXIT

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PoolError(
            "(1045, \"Access denied for user 'birdrl_u1'@'localhost' (using password: YES)\")"
        )

    monkeypatch.setattr(Evaluator, "_phase", refused)
    first, second = bundled_records(2)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [first, second])
    preds = write_jsonl(
        tmp_path / "preds.jsonl",
        [{"instance_id": r["instance_id"], "pred_sqls": r["sol_sql"]} for r in (first, second)],
    )
    report = tmp_path / "report.json"
    result = invoke(
        "eval", "--tasks", str(tasks), "--db-root", str(db_root), "--predictions", str(preds),
        "--workers", "1", "--json", str(report),
    )  # fmt: skip
    assert result.exit_code == UNSCORED_EXIT, result.output
    text = normalized(result.output)
    assert "2 of 2 task(s) could not be scored" in text and "not a benchmark result" in text
    assert "first error:" in text and "Access denied for user 'birdrl_u1'" in text
    assert "anonymous ''@'localhost'" in text
    summary = json.loads(report.read_text())["summary"]  # the report is still written
    assert summary["infra_errors"] == 2 and "Access denied" in summary["first_infra_error"]


# 5. tasks without a reference solution ------------------------------------------------------


def test_tasks_without_sol_sql_are_refused_by_agent_and_predictions_alike(
    db_root: Path, tmp_path: Path
) -> None:
    (record,) = bundled_records(1)
    public = {k: v for k, v in record.items() if k != "sol_sql"}
    tasks = write_jsonl(tmp_path / "public.jsonl", [public])
    preds = write_jsonl(
        tmp_path / "preds.jsonl", [{"instance_id": record["instance_id"], "pred_sqls": []}]
    )
    common = ("eval", "--tasks", str(tasks), "--db-root", str(db_root), "--workers", "1")
    by_agent = one_line_error(invoke(*common, "--agent", "gold"))
    by_predictions = one_line_error(invoke(*common, "--predictions", str(preds)))
    # the same refusal; an agent could still run them for predictions, and is told how
    assert by_agent == f"{by_predictions}; to run them and write their predictions (the " + (
        "official evaluator's input), add --export-predictions FILE"
    )
    assert f"task {record['instance_id']!r} has no sol_sql" in by_agent


# 6. a missing task file ---------------------------------------------------------------------


@pytest.mark.parametrize("command", [("eval", "--agent", "gold", "--tasks"), ("tasks", "validate")])
def test_a_missing_task_file_is_reported_as_such(command: tuple[str, ...], tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    line = one_line_error(invoke(*command, str(missing)))
    assert "task file not found" in line and str(missing) in line
    assert "database root" not in line


# 7. JSON syntax errors keep their column ----------------------------------------------------


def test_json_errors_in_task_files_give_line_and_column(db_root: Path, tmp_path: Path) -> None:
    (record,) = bundled_records(1)
    bad = '{"instance_id": "x",, "db_id": "chinook"}'
    column = _json_column(bad)
    jsonl = write_jsonl(tmp_path / "tasks.jsonl", [record, bad])
    line = one_line_error(invoke("tasks", "validate", str(jsonl), "--db-root", str(db_root)))
    assert f"{jsonl}, line 2: invalid JSON at column {column}:" in line

    listing = tmp_path / "tasks.json"
    listing.write_text("[\n" + json.dumps(record) + ",\n  " + bad + "\n]\n", encoding="utf-8")
    line = one_line_error(invoke("tasks", "validate", str(listing), "--db-root", str(db_root)))
    assert f"{listing}, line 3: invalid JSON at column {column + 2}:" in line


def _json_column(text: str) -> int:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.colno
    raise AssertionError(f"{text!r} is valid JSON")


# 8. tasks skipped as malformed are counted --------------------------------------------------


def test_skipped_tasks_are_counted_in_the_summary(db_root: Path, tmp_path: Path) -> None:
    first, second = bundled_records(2)
    malformed = {k: v for k, v in second.items() if k != "db_id"} | {"instance_id": "no-db"}
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [first, malformed, second])
    result = invoke(
        "eval", "--tasks", str(tasks), "--db-root", str(db_root), "--agent", "gold",
        "--workers", "1", "--skip-invalid",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = normalized(result.output)
    assert "skipped:" in text and "line 2" in text
    assert "invalid tasks 1 (1 malformed, skipped)" in text


# 9. docs/cli.md documents every option of every command and every preset ------------------


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    """(name, click command) of every leaf command; ``commands`` marks a group."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        return [(" ".join(path), command)]
    return [pair for name, sub in subcommands.items() for pair in _commands(sub, (*path, name))]


def _long_options(command: Any) -> list[str]:
    """The long name of each option (``--workers``; a flag's ``--no-...`` twin is implied)."""
    out = []
    for param in command.params:
        names = [o for o in param.opts if o.startswith("--")]
        if param.param_type_name == "option" and names:
            out.append(names[0])
    return out


def test_docs_document_every_option_of_every_command() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## `birdrl ([^`]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    root = typer.main.get_command(app)
    for option in _long_options(root):
        assert f"`birdrl {option}`" in text, f"docs/cli.md does not mention `birdrl {option}`"
    commands = _commands(root)
    assert "tasks validate" in dict(commands)
    for name, command in commands:
        assert name in sections, f"docs/cli.md has no section for `birdrl {name}`"
        missing = [o for o in _long_options(command) if o not in sections[name]]
        assert not missing, f"docs/cli.md, `birdrl {name}`: options not documented: {missing}"


def test_docs_and_help_list_every_shipped_preset() -> None:
    presets = sorted(
        p.stem for p in (ROOT / "src" / "birdrl" / "training" / "presets").glob("*.toml")
    )
    assert presets == list_presets() and len(presets) >= 6
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    help_text = normalized(invoke("curriculum", "--help").output)
    for name in presets:
        assert re.search(rf"[\s|\[]{re.escape(name)}[|\]]", text), f"docs/cli.md: no {name}"
        assert re.search(rf"[ (]{re.escape(name)}[,)]", help_text), f"--preset help: no {name}"
