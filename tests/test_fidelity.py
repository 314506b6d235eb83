"""The fidelity suite: `birdrl eval` under ``official`` semantics gives the official
BIRD-CRITIC verdict on every case of `fidelity_cases` (SQLite, PostgreSQL, MySQL), and
under ``strict`` the documented differences only.

Each case becomes a task of its own (the case's task record under a new instance id) in an
official-format JSONL file, with its prediction in an official-format predictions file
(a string stays a string: the loader must cut it at ``[split]``); the run goes through the
CLI, as a user's would, and its ``--json`` report is compared case by case."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fidelity_cases import CASES, DB_ID, SCHEMAS, Case
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.evaluation.semantics import Semantics


def _write_inputs(dialect: str, root: Path) -> tuple[Path, Path]:
    tasks, preds = [], []
    for case in CASES[dialect]:
        iid = f"{case.task['instance_id']}__{case.name}"
        tasks.append({**case.task, "instance_id": iid})
        preds.append({"instance_id": iid, "pred_sqls": case.prediction})
    assert len({t["instance_id"] for t in tasks}) == len(tasks), "case names must be unique"
    task_file, pred_file = root / f"{dialect}_tasks.jsonl", root / f"{dialect}_preds.jsonl"
    task_file.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    pred_file.write_text("".join(json.dumps(p) + "\n" for p in preds), encoding="utf-8")
    return task_file, pred_file


def _expected(case: Case, semantics: Semantics) -> tuple[bool, int | None]:
    if semantics is Semantics.STRICT and case.strict is not None:
        return case.strict
    return case.official


def _mismatches(dialect: str, report: dict[str, Any], semantics: Semantics) -> list[str]:
    got = {r["instance_id"]: r for r in report["reports"]}
    out = []
    for case in CASES[dialect]:
        iid = f"{case.task['instance_id']}__{case.name}"
        success, passed = _expected(case, semantics)
        r = got.get(iid)
        if r is None:
            out.append(f"{iid}: not scored")
            continue
        caveat = r.get("caveat") or ""
        if (case.label not in caveat) if case.label else caveat:
            out.append(f"{iid} [{case.cls}]: caveat {caveat!r}, expected {case.label!r}")
        if r["status"] != ("success" if success else "failed") or (
            passed is not None and r["passed"] != passed
        ):
            why = case.strict_why if semantics is Semantics.STRICT and case.strict else case.why
            out.append(
                f"{iid} [{case.cls}]: expected {'success' if success else 'failed'}"
                f"/{passed}, got {r['status']}/{r['passed']} (errors {r['errors']}, "
                f"failed {r['failed_tests']}, execution_error {r['execution_error']}); "
                f"why: {why}"
            )
    return out


Runner = Callable[[Semantics], dict[str, Any]]


def _runner(dialect: str, root: Path, extra: list[str]) -> Runner:
    task_file, pred_file = _write_inputs(dialect, root)

    def run(semantics: Semantics) -> dict[str, Any]:
        out = root / f"{dialect}_{semantics}.json"
        result = CliRunner().invoke(
            app,
            ["eval", "--tasks", str(task_file), "--predictions", str(pred_file),
             "--dialect", dialect, "--semantics", semantics.value, "--json", str(out),
             *extra],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert f"{dialect}: scored with {semantics} semantics" in result.output, result.output
        labelled = sum(bool(c.label) for c in CASES[dialect])
        if labelled:  # said where a person reads it, not only in --json
            said = f"{labelled} task(s) scored, but not as the official evaluator"
            assert said in " ".join(result.output.split()), result.output
        report = json.loads(out.read_text(encoding="utf-8"))
        assert report["semantics"] == semantics.value
        return report

    return run


@pytest.fixture(scope="module")
def sqlite_run(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    root = tmp_path_factory.mktemp("fidelity-sqlite")
    (root / "dbs" / DB_ID).mkdir(parents=True)
    conn = sqlite3.connect(root / "dbs" / DB_ID / f"{DB_ID}.sqlite")
    for statement in SCHEMAS["sqlite"]:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return _runner("sqlite", root, ["--db-root", str(root / "dbs")])


@pytest.fixture(scope="module")
def postgresql_run(pg_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    import psycopg

    template = f"{DB_ID}_template"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
        if not admin.execute(b"SELECT 1 FROM pg_roles WHERE rolname = 'birdrl_sandbox'").fetchone():
            admin.execute(b"CREATE ROLE birdrl_sandbox LOGIN")
        admin.execute(f"DROP DATABASE IF EXISTS {template} WITH (FORCE)".encode())
        admin.execute(f"CREATE DATABASE {template}".encode())
    dsn = pg_cluster.dsn.replace("dbname=postgres", f"dbname={template}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SCHEMAS["postgresql"]:
            conn.execute(statement.encode())
        # the official evaluator connects as a superuser; the sandbox role owns what a
        # task may change and may create in public
        for table in ("accounts", "audit", "events", "big"):
            conn.execute(f"ALTER TABLE {table} OWNER TO birdrl_sandbox".encode())
        conn.execute(b"GRANT CREATE ON SCHEMA public TO birdrl_sandbox")
    try:
        yield _runner(
            "postgresql", tmp_path_factory.mktemp("fidelity-pg"), ["--pg-dsn", pg_cluster.dsn]
        )
    finally:
        with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {template} WITH (FORCE)".encode())


@pytest.fixture(scope="module")
def mysql_run(mariadb: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    from birdrl.dialects.mysql.dsn import connect

    template = f"{DB_ID}_template"
    with connect(mariadb.dsn) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{template}`")
        cur.execute(f"CREATE DATABASE `{template}`")
        cur.execute(f"USE `{template}`")
        for statement in SCHEMAS["mysql"]:
            cur.execute(statement)
            cur.fetchall()
        # as a dump loaded into a database of other defaults: the tables keep theirs (F12)
        cur.execute(f"ALTER DATABASE `{template}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        conn.commit()
    try:
        yield _runner("mysql", tmp_path_factory.mktemp("fidelity-my"), ["--mysql-dsn", mariadb.dsn])
    finally:
        with connect(mariadb.dsn) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{template}`")


_RUNS = {"sqlite": "sqlite_run", "postgresql": "postgresql_run", "mysql": "mysql_run"}


@pytest.mark.parametrize("semantics", list(Semantics))
@pytest.mark.parametrize("dialect", list(_RUNS))
def test_every_case_gets_its_expected_verdict(
    dialect: str, semantics: Semantics, request: pytest.FixtureRequest
) -> None:
    run: Runner = request.getfixturevalue(_RUNS[dialect])
    report = run(semantics)
    mismatches = _mismatches(dialect, report, semantics)
    assert not mismatches, "\n".join(mismatches)


def test_the_suite_covers_every_class_on_every_dialect() -> None:
    classes = {d: {c.cls for c in cases} for d, cases in CASES.items()}
    shared = {"split", "issue phase", "no default test", "conditions", "sets",
              "helpers invisible"}  # fmt: skip
    assert all(shared <= found for found in classes.values()), classes
    assert {"commit", "errors do not stop the list", "qualified names", "reset defaults",
            "lock tables", "efficiency"} <= classes["mysql"]  # fmt: skip
    assert {"psycopg2 tests", "jsonb", "DISTINCT ON", "time zone", "efficiency", "commit",
            "errors do not stop the list", "qualified names"} <= classes["postgresql"]  # fmt: skip
    # strict differs only where the official evaluator of a server dialect does less
    for dialect, cases in CASES.items():
        differing = {c.cls for c in cases if c.strict is not None and c.strict != c.official}
        assert differing <= {"issue phase", "no default test", "conditions"}, differing
        assert not differing if dialect == "sqlite" else differing, dialect
