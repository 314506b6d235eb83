"""The bundled benchmark scored on PostgreSQL end to end: the acceptance path of
`birdrl eval --dialect postgresql --agent gold`, the environment on PostgreSQL replicas,
and the multi-dialect table of the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.registry import make_agent
from birdrl.cli import app
from birdrl.dialects.postgres.cluster import LocalCluster
from birdrl.evaluation.dialects import DialectRun
from birdrl.evaluation.suite import evaluate_suite, scripted_predictions

pytest.importorskip("psycopg")


@pytest.fixture(scope="module")
def run(pg_bundled_test: DialectRun) -> DialectRun:
    return pg_bundled_test


def test_transpiled_test_set_validates_and_drops_are_counted(run: DialectRun) -> None:
    assert run.dialect == "postgresql"
    assert run.source_tasks == 48
    assert len(run.tasks) + len(run.dropped) == 48
    assert len(run.tasks) >= 40, run.dropped
    assert all(reason for reason in run.dropped.values())
    assert all(t.extra["dialect"] == "postgresql" for t in run.tasks)
    assert all(name.startswith("birdrl_tpl_") for name in run.databases.values())


def test_gold_scores_100_and_issue_0_on_postgresql(run: DialectRun) -> None:
    gold = evaluate_suite(
        run.tasks, run.databases, scripted_predictions(run.tasks, "gold"), run.config
    )
    issue = evaluate_suite(
        run.tasks, run.databases, scripted_predictions(run.tasks, "issue"), run.config
    )
    assert gold.summary.overall.rate == 100.0
    assert gold.summary.infra_errors == 0
    assert issue.summary.overall.success == 0


def test_explorer_acts_in_the_environment_on_postgresql(run: DialectRun) -> None:
    tasks = run.tasks[:6]
    outcome = evaluate_agent(tasks, run.databases, make_agent("explorer"), None, run.config)
    assert outcome.summary.overall.rate == 100.0
    first = outcome.trajectories[0]
    system, user = first.messages[0]["content"], first.messages[1]["content"]
    assert "PostgreSQL" in system and "SQLite" not in system
    assert "CREATE TABLE" in user  # the schema, rendered from the template database
    calls = [m for t in outcome.trajectories for m in t.messages if m["role"] == "tool"]
    assert calls, "the explorer ran SQL on its replicas"


def test_cli_prints_one_row_per_dialect(pg_cluster: LocalCluster) -> None:
    result = CliRunner().invoke(
        app,
        ["eval", "--dialects", "sqlite,postgresql", "--agent", "gold", "--pg-dsn", pg_cluster.dsn],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "success rate by dialect" in result.output
    rows = [line for line in result.output.splitlines() if "postgresql" in line and "100.0" in line]
    assert rows, result.output


def test_unknown_dialect_is_a_clear_error() -> None:
    result = CliRunner().invoke(app, ["eval", "--dialect", "oracle", "--agent", "gold"])
    assert result.exit_code != 0
    assert "unknown SQL dialect 'oracle'" in result.output


def test_native_postgresql_task_file_scores_on_server_templates(
    pg_cluster: LocalCluster, tmp_path: Path
) -> None:
    """An official-style PostgreSQL task file (no SQLite files): its databases are
    ``{db_id}_template`` on the server, test cases use the PostgreSQL helper API."""
    import psycopg

    with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
        if not admin.execute(b"SELECT 1 FROM pg_roles WHERE rolname = 'birdrl_sandbox'").fetchone():
            admin.execute(b"CREATE ROLE birdrl_sandbox LOGIN")
        admin.execute(b"DROP DATABASE IF EXISTS mini_template WITH (FORCE)")
        admin.execute(b"CREATE DATABASE mini_template")
    with psycopg.connect(
        pg_cluster.dsn.replace("dbname=postgres", "dbname=mini_template"), autocommit=True
    ) as conn:
        conn.execute(b"CREATE TABLE item (id int PRIMARY KEY, name text, v int)")
        conn.execute(b"INSERT INTO item SELECT g, 'n' || g, g FROM generate_series(1, 20) g")
        conn.execute(b"ALTER TABLE item OWNER TO birdrl_sandbox")
    check = (
        "def test_case(pred_sqls, sol_sqls, db_name, conn):\n"
        "    pred, _ = perform_query_on_postgresql_databases(pred_sqls[0], db_name, conn)\n"
        "    sol, _ = perform_query_on_postgresql_databases(sol_sqls[0], db_name, conn)\n"
        "    assert sorted(pred) == sorted(sol)\n"
    )
    state = (
        "def test_case(pred_sqls, sol_sqls, db_name, conn):\n"
        "    rows, _ = perform_query_on_postgresql_databases(\n"
        "        'SELECT count(*) FROM item WHERE v = 0', db_name, conn)\n"
        "    assert rows == [(5,)], rows\n"
    )
    tasks = [
        {
            "instance_id": "mini_1",
            "db_id": "mini",
            "query": "Items with v of at least 10?",
            "issue_sql": ["SELECT name FROM item WHERE v > 10"],
            "sol_sql": ["SELECT name FROM item WHERE v >= 10"],
            "test_cases": [check],
            "category": "Query",
        },
        {
            "instance_id": "mini_2",
            "db_id": "mini",
            "query": "Reset v of the first five items",
            "issue_sql": ["UPDATE item SET v = 0 WHERE id < 5"],
            "sol_sql": ["UPDATE item SET v = 0 WHERE id <= 5"],
            "test_cases": [state],
            "category": "Management",
        },
    ]
    path = tmp_path / "pg_tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    try:
        for agent, expected in (("gold", "100.0"), ("issue", "0.0")):
            result = CliRunner().invoke(
                app,
                ["eval", "--tasks", str(path), "--dialect", "postgresql", "--pg-dsn",
                 pg_cluster.dsn, "--agent", agent, "--json", str(tmp_path / f"{agent}.json")],
            )  # fmt: skip
            assert result.exit_code == 0, result.output
            report = json.loads((tmp_path / f"{agent}.json").read_text())
            assert f"{report['summary']['overall']['rate']:.1f}" == expected, report
    finally:
        with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
            admin.execute(b"DROP DATABASE IF EXISTS mini_template WITH (FORCE)")
