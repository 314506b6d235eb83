"""Public BIRD-CRITIC releases, as a researcher downloads them: no ``sol_sql``, no
``test_cases``. ``birdrl eval --agent X --export-predictions`` runs them for the official
evaluator's predictions file, written as episodes finish and resumed after a real
interruption; ``birdrl tasks merge-ground-truth`` adds the withheld fields, after which the
same predictions score. Records are written in the published shapes; the databases are the
bundled ones in the ``{db}/{db}.sqlite`` layout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from birdrl.agents.evaluate import EpisodeLogs, evaluate_agent
from birdrl.agents.rollout import RolloutConfig
from birdrl.agents.scripted import ScriptedAgent
from birdrl.cli import app
from birdrl.evaluation.resume import ResumeError, open_run_log
from birdrl.tasks.benchmark import bundled_task_file
from birdrl.tasks.bundled import default_db_root, ensure_databases
from birdrl.tasks.ground_truth import GroundTruthError, merge_ground_truth
from birdrl.tasks.load import TaskFormatError

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_FIELDS = ("db_id", "category", "query", "issue_sql", "preprocess_sql", "clean_up_sql")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def normalized(text: str) -> str:
    return " ".join(text.split())


def one_line_error(result: Result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def write_jsonl(path: Path, records: Sequence[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def db_root() -> Path:
    ensure_databases()
    return default_db_root()


def release(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`n` bundled test tasks as the public file and the withheld ground truth publish
    them: ``SQLite_0``... with ``dialect``/``version``; ``sol_sql``, ``test_cases``,
    ``conditions`` kept apart."""
    lines = bundled_task_file("test").read_text(encoding="utf-8").splitlines()
    public, truth = [], []
    for i, line in enumerate(lines[:n]):
        full = json.loads(line)
        iid = f"SQLite_{i}"
        public.append(
            {"instance_id": iid, "dialect": "SQLite", "version": "3.45.3"}
            | {k: full[k] for k in PUBLIC_FIELDS}
        )
        truth.append(
            {"instance_id": iid} | {k: full[k] for k in ("sol_sql", "test_cases", "conditions")}
        )
    return public, truth


class Spy:
    """Records the instance_ids the scripted agents are asked to act on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        act = ScriptedAgent.act

        def spying(agent: ScriptedAgent, tasks: Any, conversations: Any) -> list[str]:
            self.seen += [t.instance_id for t in tasks]
            return act(agent, tasks, conversations)

        monkeypatch.setattr(ScriptedAgent, "act", spying)


# 1. predictions for a public release --------------------------------------------------------


@pytest.mark.parametrize("mode", ["agent", "single"])
def test_public_tasks_are_run_for_official_predictions(
    db_root: Path, tmp_path: Path, mode: str
) -> None:
    public, _ = release(6)
    tasks = write_jsonl(tmp_path / "public.jsonl", public)
    preds, trajs, report = tmp_path / "preds.jsonl", tmp_path / "traj.jsonl", tmp_path / "r.json"
    result = invoke(
        "eval", "--agent", "issue", "--mode", mode, "--tasks", str(tasks), "--db-root",
        str(db_root), "--workers", "1", "--concurrency", "2", "--export-predictions",
        str(preds), "--trajectories", str(trajs), "--json", str(report),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = normalized(result.output)
    assert "6 of 6 tasks run for predictions only, not scored: they have no ground truth" in text
    assert "success rate" not in text and "scored with" not in text  # nothing was scored
    written = read_jsonl(preds)
    assert all(set(r) == {"instance_id", "pred_sqls"} for r in written)
    # the submissions: the issue SQL (a single-turn answer is split into ;-ended statements)
    assert {r["instance_id"]: [s.rstrip(";") for s in r["pred_sqls"]] for r in written} == {
        p["instance_id"]: p["issue_sql"] for p in public
    }
    episodes = read_jsonl(trajs)
    assert sorted(e["instance_id"] for e in episodes) == sorted(p["instance_id"] for p in public)
    for episode in episodes:
        assert episode["stop_reason"] == "submitted" and episode["tests"] is None
        assert episode["infra_error"] is None and not episode["success"]
    assert len(json.loads(report.read_text())["unscored"]) == 6


@pytest.mark.parametrize("mode", ["agent", "single"])
def test_submitting_on_a_task_without_ground_truth_says_it_is_not_scored(
    db_root: Path, tmp_path: Path, mode: str
) -> None:
    """The episode ends on submit as usual; the observation does not pretend to a score."""
    from birdrl.agents.base import render_tool_call
    from birdrl.env.sqlact import EnvConfig, SQLActEnv
    from birdrl.evaluation.session import scoring_session
    from birdrl.tasks.benchmark import open_benchmark

    public, _ = release(1)
    bench = open_benchmark(write_jsonl(tmp_path / "public.jsonl", public), db_root)
    (task,) = bench.debugging_tasks()
    sql = task.issue_sql[0]
    text = (
        render_tool_call("submit_solution", {"sql": [sql]})
        if mode == "agent"
        else f"<answer>\n```sql\n{sql}\n```\n</answer>"
    )
    with (
        scoring_session(bench.databases) as (pool, evaluator),
        SQLActEnv(pool, evaluator, EnvConfig(mode=mode)) as env,  # type: ignore[arg-type]
    ):
        env.reset(task)
        step = env.step(text)
        summary = env.summary()
    what = "Submitted" if mode == "agent" else "Answer recorded"
    assert step.observation == f"{what} (not scored: this task has no ground truth)."
    assert step.stop_reason is not None and step.stop_reason.value == "submitted"
    assert step.terminated and step.info["scored"] is False and step.reward == 0.0
    assert summary["submission"] == [sql] and summary["tests"] is None


def test_without_export_predictions_the_refusal_says_how_to_run_them(
    db_root: Path, tmp_path: Path
) -> None:
    public, _ = release(2)
    tasks = write_jsonl(tmp_path / "public.jsonl", public)
    line = one_line_error(
        invoke("eval", "--agent", "issue", "--tasks", str(tasks), "--db-root", str(db_root))
    )
    assert "2 tasks have no sol_sql" in line and "add --export-predictions FILE" in line
    preds = write_jsonl(tmp_path / "p.jsonl", [{"instance_id": "SQLite_0", "pred_sqls": []}])
    line = one_line_error(
        invoke(
            "eval", "--predictions", str(preds), "--tasks", str(tasks), "--db-root", str(db_root)
        )
    )
    assert "2 tasks have no sol_sql" in line and "--export-predictions" not in line


def test_a_mixed_set_scores_the_tasks_with_ground_truth_and_exports_all(
    db_root: Path, tmp_path: Path
) -> None:
    public, truth = release(6)
    records = [p | t for p, t in zip(public[:2], truth[:2], strict=True)] + public[2:]
    tasks = write_jsonl(tmp_path / "mixed.jsonl", records)
    preds, report = tmp_path / "preds.jsonl", tmp_path / "report.json"
    result = invoke(
        "eval", "--agent", "issue", "--tasks", str(tasks), "--db-root", str(db_root),
        "--workers", "1", "--export-predictions", str(preds), "--json", str(report),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = normalized(result.output)
    assert "4 of 6 tasks run for predictions only" in text
    assert "the success rate above covers the other 2" in text
    summary = json.loads(report.read_text())["summary"]
    assert (summary["overall"]["total"], summary["overall"]["success"]) == (2, 0)
    assert len(read_jsonl(preds)) == 6


# 2. resuming ----------------------------------------------------------------------------------

_KILLED_RUN = """
import json, sys, time
from pathlib import Path
from birdrl.agents.evaluate import EpisodeLogs, evaluate_agent
from birdrl.agents.rollout import RolloutConfig
from birdrl.agents.scripted import ScriptedAgent
from birdrl.tasks.benchmark import open_benchmark

tasks_file, db_root, preds, trajs, stall_after = sys.argv[1:6]


class Stalls(ScriptedAgent):
    # the issue agent, which hangs (like a stuck model) once it has acted `stall_after` times
    calls = 0

    def act(self, tasks, conversations):
        Stalls.calls += 1
        if Stalls.calls > int(stall_after):
            time.sleep(600)
        return super().act(tasks, conversations)


bench = open_benchmark(tasks_file, db_root)
tasks = bench.debugging_tasks()
logs = EpisodeLogs.open(preds, [t.instance_id for t in tasks], trajectories=trajs)
evaluate_agent(
    tasks, bench.databases, Stalls("issue"), RolloutConfig(concurrency=1), allow_unscored=True,
    logs=logs,
)
"""


def test_a_killed_run_resumes_where_it_stopped(
    db_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL a real run after 3 finished episodes; the same command then runs only the
    other tasks and the files end up with every task once."""
    public, _ = release(7)
    tasks = write_jsonl(tmp_path / "public.jsonl", public)
    preds, trajs = tmp_path / "preds.jsonl", tmp_path / "traj.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    args = [str(tasks), str(db_root), str(preds), str(trajs), "3"]
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, *args], env=env)
    try:
        deadline = time.monotonic() + 120
        while not (preds.exists() and len(preds.read_text().splitlines()) >= 3):
            assert proc.poll() is None, "the run ended before it was killed"
            assert time.monotonic() < deadline, "no 3 finished episodes in 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    done = [r["instance_id"] for r in read_jsonl(preds)]
    assert len(done) == 3 and len(read_jsonl(trajs)) == 3

    spy = Spy(monkeypatch)
    result = invoke(
        "eval", "--agent", "issue", "--tasks", str(tasks), "--db-root", str(db_root),
        "--workers", "1", "--export-predictions", str(preds), "--trajectories", str(trajs),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"resuming from {preds}: 3 of 7 tasks are already there" in normalized(result.output)
    assert not set(spy.seen) & set(done)  # finished episodes are not redone
    assert sorted(set(spy.seen)) == sorted({p["instance_id"] for p in public} - set(done))
    written = read_jsonl(preds)
    assert sorted(r["instance_id"] for r in written) == sorted(p["instance_id"] for p in public)
    assert sorted(e["instance_id"] for e in read_jsonl(trajs)) == sorted(
        p["instance_id"] for p in public
    )


def test_an_interrupted_library_run_keeps_what_finished(
    db_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (KeyboardInterrupt) in the middle of `evaluate_agent`: the episodes finished
    before it are in the file; a second call runs the rest only."""
    from birdrl.tasks.benchmark import open_benchmark

    public, _ = release(5)
    bench = open_benchmark(write_jsonl(tmp_path / "public.jsonl", public), db_root)
    tasks = bench.debugging_tasks()
    ids = [t.instance_id for t in tasks]
    preds = tmp_path / "preds.jsonl"

    class Interrupts(ScriptedAgent):
        calls = 0

        def act(self, tasks: Any, conversations: Any) -> list[str]:
            Interrupts.calls += 1
            if Interrupts.calls > 2:
                raise KeyboardInterrupt
            return super().act(tasks, conversations)

    with pytest.raises(KeyboardInterrupt):
        evaluate_agent(
            tasks, bench.databases, Interrupts("issue"), RolloutConfig(concurrency=1),
            allow_unscored=True, logs=EpisodeLogs.open(preds, ids),
        )  # fmt: skip
    assert [r["instance_id"] for r in read_jsonl(preds)] == ids[:2]
    spy = Spy(monkeypatch)
    logs = EpisodeLogs.open(preds, ids)
    assert logs.predictions.resumed == 2
    outcome = evaluate_agent(
        tasks, bench.databases, ScriptedAgent("issue"), RolloutConfig(concurrency=1),
        allow_unscored=True, logs=logs,
    )  # fmt: skip
    assert spy.seen == ids[2:] and outcome.resumed == tuple(ids[:2])
    assert [r["instance_id"] for r in read_jsonl(preds)] == ids


def test_a_line_cut_by_a_kill_is_dropped_and_its_task_redone(
    db_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    public, _ = release(3)
    tasks = write_jsonl(tmp_path / "public.jsonl", public)
    preds = tmp_path / "preds.jsonl"
    first = {"instance_id": "SQLite_0", "pred_sqls": public[0]["issue_sql"]}
    preds.write_text(json.dumps(first) + '\n{"instance_id": "SQLite_1", "pred_sq')
    spy = Spy(monkeypatch)
    result = invoke(
        "eval", "--agent", "issue", "--tasks", str(tasks), "--db-root", str(db_root),
        "--workers", "1", "--export-predictions", str(preds),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = normalized(result.output)
    assert f"{preds}, line 2: cut short by an interruption; dropped" in text
    assert "1 of 3 tasks are already there" in text
    assert sorted(spy.seen) == ["SQLite_1", "SQLite_2"]
    assert sorted(r["instance_id"] for r in read_jsonl(preds)) == [
        "SQLite_0",
        "SQLite_1",
        "SQLite_2",
    ]


def test_other_malformed_lines_and_other_runs_files_are_refused(
    db_root: Path, tmp_path: Path
) -> None:
    public, _ = release(2)
    tasks = write_jsonl(tmp_path / "public.jsonl", public)
    preds = tmp_path / "preds.jsonl"
    common = (
        "eval", "--agent", "issue", "--tasks", str(tasks), "--db-root", str(db_root),
        "--workers", "1", "--export-predictions", str(preds),
    )  # fmt: skip
    preds.write_text('{"instance_id": "SQLite_0", "pred_sqls": []}\nnot json\n')
    assert f"{preds}, line 2: invalid JSON" in one_line_error(invoke(*common))
    preds.write_text('{"instance_id": "SQLite_0", "pred_sqls": "SELECT 1"}\n{"pred_sqls": []}\n')
    assert f"{preds}, line 2: field 'instance_id': missing" in one_line_error(invoke(*common))

    write_jsonl(preds, [{"instance_id": "bird_critic_77", "pred_sqls": ["SELECT 1"]}])
    line = one_line_error(invoke(*common))
    assert "1 record(s) for tasks not in this task set ('bird_critic_77')" in line
    assert "from another run" in line and "restart" in line
    result = invoke(*common, "--restart")
    assert result.exit_code == 0, result.output
    assert sorted(r["instance_id"] for r in read_jsonl(preds)) == ["SQLite_0", "SQLite_1"]
    assert "--restart needs --agent and --export-predictions" in one_line_error(
        invoke("eval", "--agent", "issue", "--restart")
    )


def test_resumed_tasks_with_ground_truth_are_scored_from_their_saved_predictions(
    db_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scored run resumed: the success rate covers every task, the finished ones scored
    from the file exactly as --predictions would score them."""
    public, truth = release(4)
    full = [p | t for p, t in zip(public, truth, strict=True)]
    tasks = write_jsonl(tmp_path / "tasks.jsonl", full)
    preds, report = tmp_path / "preds.jsonl", tmp_path / "report.json"
    write_jsonl(
        preds, [{"instance_id": r["instance_id"], "pred_sqls": r["sol_sql"]} for r in full[:2]]
    )
    spy = Spy(monkeypatch)
    result = invoke(
        "eval", "--agent", "issue", "--tasks", str(tasks), "--db-root", str(db_root),
        "--workers", "1", "--export-predictions", str(preds), "--json", str(report),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2 resumed task(s) with ground truth scored from their saved predictions" in (
        normalized(result.output)
    )
    assert sorted(spy.seen) == ["SQLite_2", "SQLite_3"]
    summary = json.loads(report.read_text())["summary"]
    assert (summary["overall"]["total"], summary["overall"]["success"]) == (4, 2)


# 3. merging the withheld ground truth ---------------------------------------------------------


def test_merged_ground_truth_scores_the_predictions_of_the_public_run(
    db_root: Path, tmp_path: Path
) -> None:
    public, truth = release(6)
    pub, gt = (
        write_jsonl(tmp_path / "public.jsonl", public),
        write_jsonl(tmp_path / "gt.jsonl", truth),
    )
    merged = tmp_path / "merged.jsonl"
    result = invoke("tasks", "merge-ground-truth", str(pub), str(gt), "--out", str(merged))
    assert result.exit_code == 0, result.output
    assert "ground truth merged into 6 of 6 tasks (conditions 6, sol_sql 6, test_cases 6" in (
        normalized(result.output)
    )
    records = read_jsonl(merged)
    assert records[0]["dialect"] == "SQLite" and records[0]["version"] == "3.45.3"  # verbatim
    assert [r["sol_sql"] for r in records] == [t["sol_sql"] for t in truth]

    preds = tmp_path / "preds.jsonl"
    run = invoke(
        "eval", "--agent", "issue", "--tasks", str(pub), "--db-root", str(db_root),
        "--workers", "1", "--export-predictions", str(preds),
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    report = tmp_path / "report.json"
    scored = invoke(
        "eval", "--predictions", str(preds), "--tasks", str(merged), "--db-root", str(db_root),
        "--workers", "1", "--json", str(report),
    )  # fmt: skip
    assert scored.exit_code == 0, scored.output
    summary = json.loads(report.read_text())["summary"]
    assert summary["overall"]["total"] == 6 and summary["missing_predictions"] == 0
    assert summary["overall"]["success"] == 0  # the issue SQL, scored: it fails
    gold = write_jsonl(
        tmp_path / "gold.jsonl",
        [{"instance_id": t["instance_id"], "pred_sqls": t["sol_sql"]} for t in truth],
    )
    scored = invoke(
        "eval", "--predictions", str(gold), "--tasks", str(merged), "--db-root", str(db_root),
        "--workers", "1", "--json", str(report),
    )  # fmt: skip
    assert scored.exit_code == 0, scored.output
    assert json.loads(report.read_text())["summary"]["overall"]["success"] == 6


def test_merge_reports_ids_on_one_side_and_refuses_missing_ground_truth(tmp_path: Path) -> None:
    public, truth = release(4)
    extra = {"instance_id": "SQLite_99", "sol_sql": ["SELECT 1"], "test_cases": []}
    pub = write_jsonl(tmp_path / "public.jsonl", public)
    gt = write_jsonl(tmp_path / "gt.jsonl", [*truth[:3], extra])
    merged = tmp_path / "merged.jsonl"
    line = one_line_error(
        invoke("tasks", "merge-ground-truth", str(pub), str(gt), "--out", str(merged))
    )
    assert "1 of 4 public task(s) have no ground truth" in line and "'SQLite_3'" in line
    assert "--allow-missing" in line and not merged.exists()

    result = invoke(
        "tasks", "merge-ground-truth", str(pub), str(gt), "--out", str(merged), "--allow-missing"
    )
    assert result.exit_code == 0, result.output
    text = normalized(result.output)
    assert "1 public task(s) without ground truth, left unscorable: 'SQLite_3'" in text
    assert f"1 ground-truth record(s) for no task of {pub}, not merged: 'SQLite_99'" in text
    assert "merged into 3 of 4 tasks" in text
    assert "sol_sql" not in read_jsonl(merged)[3]


def test_merge_never_overwrites_a_public_field_silently(tmp_path: Path) -> None:
    public, truth = release(2)
    truth[1]["category"] = "Management" if public[1]["category"] != "Management" else "Query"
    pub, gt = write_jsonl(tmp_path / "p.jsonl", public), write_jsonl(tmp_path / "g.jsonl", truth)
    with pytest.raises(GroundTruthError, match="instance_id 'SQLite_1': field 'category' differs"):
        merge_ground_truth(pub, gt)
    # an empty placeholder in the public file is filled; an equal value is fine
    public[0]["sol_sql"], truth[1]["category"] = [], public[1]["category"]
    pub, gt = write_jsonl(tmp_path / "p.jsonl", public), write_jsonl(tmp_path / "g.jsonl", truth)
    result = merge_ground_truth(pub, gt)
    assert result.records[0]["sol_sql"] == truth[0]["sol_sql"] and result.merged == 2
    with pytest.raises(GroundTruthError, match="one of the files merged"):
        result.write(pub)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"instance_id": "SQLite_0", "test_cases": []}])
    with pytest.raises(TaskFormatError, match="line 1: field 'sol_sql': missing or empty"):
        merge_ground_truth(pub, bad)


def test_run_log_rejects_duplicates_and_keeps_only_what_it_is_told(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"instance_id": "a"}\n{"instance_id": "a"}\n')
    with pytest.raises(ResumeError, match=r"line 2: duplicate instance_id 'a'"):
        open_run_log(path, {"a", "b"})
    path.write_text('{"instance_id": "a"}\n{"instance_id": "b"}\n')
    log = open_run_log(path, {"a", "b"}, keep={"a"})
    assert list(log.done) == ["a"] and log.dropped == 1
    assert read_jsonl(path) == [{"instance_id": "a"}]  # rewritten without the dropped line
