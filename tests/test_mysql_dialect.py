"""The bundled benchmark scored on MySQL (MariaDB) end to end: the acceptance path of
`birdrl eval --dialect mysql --agent gold`, the environment on MySQL replicas, and the
three-row dialect table of the CLI."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.registry import make_agent
from birdrl.cli import app
from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.postgres.cluster import LocalCluster
from birdrl.evaluation.dialects import DialectRun
from birdrl.evaluation.suite import evaluate_suite, scripted_predictions

pytest.importorskip("pymysql")

DROPPED = {  # instance_id -> why it cannot be scored on MySQL (docs/mysql.md)
    "chinook_020": "EXPLAIN QUERY PLAN",
    "hr_017": "PRAGMA",
    "hr_028": "writes its own table",
    "university_012": "the issue SQL passes every test",
}


@pytest.fixture(scope="module")
def run(my_bundled_test: DialectRun) -> DialectRun:
    return my_bundled_test


def test_transpiled_test_set_keeps_44_of_48_and_says_why_for_the_rest(run: DialectRun) -> None:
    assert run.dialect == "mysql"
    assert run.source_tasks == 48
    assert len(run.tasks) == 44
    assert set(run.dropped) == set(DROPPED)
    for instance_id, why in DROPPED.items():
        assert why in run.dropped[instance_id], run.dropped[instance_id]
    assert all(t.extra["dialect"] == "mysql" for t in run.tasks)
    assert all(name.startswith("birdrl_tpl_") for name in run.databases.values())


def test_gold_scores_100_and_issue_0_on_mysql(run: DialectRun) -> None:
    gold = evaluate_suite(
        run.tasks, run.databases, scripted_predictions(run.tasks, "gold"), run.config
    )
    issue = evaluate_suite(
        run.tasks, run.databases, scripted_predictions(run.tasks, "issue"), run.config
    )
    assert gold.summary.overall.rate == 100.0
    assert gold.summary.infra_errors == 0
    assert issue.summary.overall.success == 0


def test_explorer_solves_every_kept_task_through_the_environment(run: DialectRun) -> None:
    outcome = evaluate_agent(run.tasks, run.databases, make_agent("explorer"), None, run.config)
    assert outcome.summary.overall.rate == 100.0
    first = outcome.trajectories[0]
    system, user = first.messages[0]["content"], first.messages[1]["content"]
    assert "MySQL" in system and "SQLite" not in system
    assert "CREATE TABLE" in user  # the schema, rendered from the template database
    calls = [m for t in outcome.trajectories for m in t.messages if m["role"] == "tool"]
    assert calls, "the explorer ran SQL on its replicas"


def test_cli_prints_one_row_per_dialect(pg_cluster: LocalCluster, mariadb: LocalMariaDB) -> None:
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--dialects",
            "sqlite,postgresql,mysql",
            "--agent",
            "gold",
            "--pg-dsn",
            pg_cluster.dsn,
            "--mysql-dsn",
            mariadb.dsn,
        ],  # fmt: skip
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    table = result.output[result.output.index("success rate by dialect") :]
    rows = {
        name: line
        for line in table.splitlines()
        for name in ("sqlite", "postgresql", "mysql")
        if line.strip("│┃ ").startswith(name)
    }
    assert set(rows) == {"sqlite", "postgresql", "mysql"}, table
    assert all("100.0" in line for line in rows.values()), table
