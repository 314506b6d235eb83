"""Task synthesis: each bug family on its own, then the whole pipeline on a real SQLite file
(validated tasks only, counted rejections, determinism, the CLI)."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.data.mutations import FAMILIES, MUTATIONS, parse_sql, render_sql
from birdrl.data.scratch import Scratch
from birdrl.data.synthesize import (
    SQLExample,
    SynthesisError,
    SynthesisResult,
    load_sql_examples,
    rejection_labels,
    synthesize_tasks,
)
from birdrl.db.sandbox import ErrorKind
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.suite import ValidationResult, evaluate_suite, validate_tasks
from birdrl.tasks import Category, Task, load_tasks

CONFIG = EvalConfig(workers=2)

# -- mutations, one by one -------------------------------------------------------------------

APPLIES = [
    ("join_key_swap",
     "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id WHERE o.status_id = 1",
     "SELECT c.name FROM customers AS c JOIN orders AS o ON o.status_id = c.id WHERE o.status_id = 1"),
    ("inner_to_left_join",
     "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id",
     "SELECT c.name FROM customers AS c LEFT JOIN orders AS o ON o.customer_id = c.id"),
    ("left_to_inner_join",
     "SELECT c.name, COUNT(o.id) FROM customers AS c LEFT JOIN orders AS o ON o.customer_id = c.id GROUP BY c.name",
     "SELECT c.name, COUNT(o.id) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id GROUP BY c.name"),
    ("sum_to_avg",
     "SELECT status, SUM(amount) FROM orders GROUP BY status",
     "SELECT status, AVG(amount) FROM orders GROUP BY status"),
    ("avg_to_sum", "SELECT AVG(amount) FROM orders", "SELECT SUM(amount) FROM orders"),
    ("count_column_to_star",
     "SELECT c.id, COUNT(o.id) FROM customers AS c LEFT JOIN orders AS o ON o.customer_id = c.id GROUP BY c.id",
     "SELECT c.id, COUNT(*) FROM customers AS c LEFT JOIN orders AS o ON o.customer_id = c.id GROUP BY c.id"),
    ("count_star_to_column",
     "SELECT COUNT(*) FROM orders WHERE amount > 10",
     "SELECT COUNT(amount) FROM orders WHERE amount > 10"),
    ("count_distinct_to_count",
     "SELECT COUNT(DISTINCT customer_id) FROM orders",
     "SELECT COUNT(customer_id) FROM orders"),
    ("drop_group_by_column",
     "SELECT status, strftime('%Y', ordered_at) AS y, COUNT(*) FROM orders GROUP BY status, y",
     "SELECT status, STRFTIME('%Y', ordered_at) AS y, COUNT(*) FROM orders GROUP BY status"),
    ("drop_group_by_column",
     "SELECT status, COUNT(*) FROM orders GROUP BY 1",
     "SELECT status, COUNT(*) FROM orders"),
    ("is_null_to_equals_null",
     "SELECT COUNT(*) FROM customers WHERE city IS NULL",
     "SELECT COUNT(*) FROM customers WHERE city = NULL"),
    ("is_null_to_equals_null",
     "SELECT name FROM customers WHERE city IS NOT NULL",
     "SELECT name FROM customers WHERE city <> NULL"),
    ("drop_coalesce", "SELECT IFNULL(city, 'unknown') FROM customers", "SELECT city FROM customers"),
    ("strftime_format_swap",
     "SELECT strftime('%Y', ordered_at) AS y FROM orders",
     "SELECT STRFTIME('%m', ordered_at) AS y FROM orders"),
    ("strftime_format_swap",
     "SELECT strftime('%Y-%m', ordered_at) AS ym FROM orders",
     "SELECT STRFTIME('%m-%Y', ordered_at) AS ym FROM orders"),
    ("julianday_sign_flip",
     "SELECT julianday(o.ordered_at) - julianday(c.joined) FROM orders AS o JOIN customers AS c ON c.id = o.customer_id",
     "SELECT JULIANDAY(c.joined) - JULIANDAY(o.ordered_at) FROM orders AS o JOIN customers AS c ON c.id = o.customer_id"),
    ("date_modifier_sign_flip",
     "SELECT id FROM orders WHERE ordered_at >= date('2024-06-30', '-30 days')",
     "SELECT id FROM orders WHERE ordered_at >= DATE('2024-06-30', '+30 days')"),
    ("date_modifier_sign_flip",
     "SELECT date(joined, '+1 month') FROM customers",
     "SELECT DATE(joined, '-1 month') FROM customers"),
    ("drop_real_cast",
     "SELECT CAST(SUM(qty) AS REAL) / COUNT(*) FROM orders",
     "SELECT SUM(qty) / COUNT(*) FROM orders"),
    ("drop_float_factor",
     "SELECT SUM(qty) * 1.0 / COUNT(*) FROM orders",
     "SELECT SUM(qty) / COUNT(*) FROM orders"),
    ("drop_float_factor",
     "SELECT 100.0 * SUM(qty) / COUNT(*) FROM orders",
     "SELECT 100 * SUM(qty) / COUNT(*) FROM orders"),
    ("limit_plus_one",
     "SELECT id FROM orders ORDER BY amount DESC LIMIT 3",
     "SELECT id FROM orders ORDER BY amount DESC LIMIT 4"),
    ("limit_minus_one",
     "SELECT id FROM orders ORDER BY amount DESC LIMIT 3",
     "SELECT id FROM orders ORDER BY amount DESC LIMIT 2"),
    ("offset_off_by_one",
     "SELECT id FROM orders ORDER BY amount DESC LIMIT 1 OFFSET 0",
     "SELECT id FROM orders ORDER BY amount DESC LIMIT 1 OFFSET 1"),
    ("comparison_boundary", "SELECT id FROM orders WHERE qty >= 3", "SELECT id FROM orders WHERE qty > 3"),
    ("comparison_boundary", "SELECT id FROM orders WHERE amount < 50", "SELECT id FROM orders WHERE amount <= 50"),
    ("flip_order_direction",
     "SELECT id FROM orders ORDER BY amount DESC LIMIT 3",
     "SELECT id FROM orders ORDER BY amount ASC LIMIT 3"),
    ("flip_order_direction",
     "SELECT id FROM orders WHERE id IN (SELECT id FROM orders ORDER BY qty LIMIT 2)",
     "SELECT id FROM orders WHERE id IN (SELECT id FROM orders ORDER BY qty DESC LIMIT 2)"),
    ("drop_where_conjunct",
     "UPDATE orders SET status = 'archived' WHERE status = 'new' AND qty > 2",
     "UPDATE orders SET status = 'archived' WHERE qty > 2"),
    ("drop_where_conjunct", "DELETE FROM orders WHERE amount IS NULL", "DELETE FROM orders"),
]  # fmt: skip

NOT_APPLICABLE = [
    ("join_key_swap", "SELECT name FROM customers"),
    ("inner_to_left_join", "SELECT c.name FROM customers AS c LEFT JOIN orders AS o ON o.customer_id = c.id"),
    ("left_to_inner_join", "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"),
    ("sum_to_avg", "SELECT AVG(amount) FROM orders"),
    ("avg_to_sum", "SELECT SUM(amount) FROM orders"),
    ("count_column_to_star", "SELECT COUNT(*) FROM orders"),
    ("count_star_to_column", "SELECT COUNT(amount) FROM orders"),
    ("count_distinct_to_count", "SELECT COUNT(customer_id) FROM orders"),
    ("drop_group_by_column", "SELECT COUNT(*) FROM orders GROUP BY status"),
    ("is_null_to_equals_null", "SELECT name FROM customers WHERE city = 'Oslo'"),
    ("drop_coalesce", "SELECT city FROM customers"),
    ("strftime_format_swap", "SELECT strftime('%d', ordered_at) FROM orders"),
    ("julianday_sign_flip", "SELECT julianday(ordered_at) FROM orders"),
    ("date_modifier_sign_flip", "SELECT date(ordered_at, 'start of month') FROM orders"),
    ("drop_real_cast", "SELECT CAST(qty AS REAL) FROM orders"),
    ("drop_float_factor", "SELECT qty * 1.0 FROM orders"),
    ("limit_plus_one", "SELECT id FROM orders"),
    ("limit_minus_one", "SELECT id FROM orders LIMIT 1"),
    ("offset_off_by_one", "SELECT id FROM orders LIMIT 3"),
    ("comparison_boundary", "SELECT id FROM orders WHERE qty = 3"),
    ("flip_order_direction", "SELECT id FROM orders WHERE id IN (SELECT id FROM orders ORDER BY qty)"),
    ("drop_where_conjunct", "SELECT id FROM orders WHERE qty > 1 AND id < 5"),
    ("drop_where_conjunct", "UPDATE orders SET qty = 0"),
]  # fmt: skip

BY_NAME = {m.name: m for m in MUTATIONS}


@pytest.mark.parametrize(("name", "sql", "expected"), APPLIES)
def test_mutation_transforms_a_representative_query(name: str, sql: str, expected: str) -> None:
    tree = parse_sql(sql)
    before = render_sql(tree)
    mutant = BY_NAME[name].apply(tree, random.Random(0))
    assert mutant is not None
    assert render_sql(mutant) == expected
    assert render_sql(tree) == before  # the input tree is left alone


@pytest.mark.parametrize(("name", "sql"), NOT_APPLICABLE)
def test_mutation_returns_none_when_not_applicable(name: str, sql: str) -> None:
    assert BY_NAME[name].apply(parse_sql(sql), random.Random(0)) is None


def test_every_mutation_is_tested_both_ways() -> None:
    assert {n for n, _, _ in APPLIES} == set(BY_NAME)
    assert {n for n, _ in NOT_APPLICABLE} == set(BY_NAME)
    assert len(FAMILIES) == 10


def test_mutation_site_depends_on_the_seed_only() -> None:
    sql = "SELECT id FROM orders WHERE qty > 1 AND amount < 5 AND id >= 3 AND qty <= 9"
    fn = BY_NAME["comparison_boundary"].apply
    runs = {render_sql(fn(parse_sql(sql), random.Random(s))) for s in range(20)}  # type: ignore[arg-type]
    assert len(runs) > 1  # several sites get picked
    again = [render_sql(fn(parse_sql(sql), random.Random(3))) for _ in range(3)]  # type: ignore[arg-type]
    assert len(set(again)) == 1


# -- the pipeline on a real database ---------------------------------------------------------


def build_shop(path: Path) -> Path:
    """Customers (some without a city, some without orders) and orders (some without an
    amount, some for customers that do not exist), dates as text."""
    rnd = random.Random(7)
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, joined TEXT);
        CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL,
                            qty INTEGER, status TEXT, ordered_at TEXT);
        """
    )
    cities = ["Lisbon", "Oslo", None, "Lima"]
    conn.executemany(
        "INSERT INTO customers VALUES (?, ?, ?, ?)",
        [
            (i, f"c{i:02d}", rnd.choice(cities), f"2023-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}")
            for i in range(1, 41)
        ],
    )  # fmt: skip
    conn.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)",
        [
            (
                i,
                rnd.randint(1, 30) if i % 25 else 99,  # customers 31-40 order nothing
                None if i % 13 == 0 else round(rnd.uniform(1, 500), 2),
                rnd.randint(1, 6),
                rnd.choice(["new", "paid", "shipped"]),
                f"{rnd.choice([2023, 2024])}-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}",
            )
            for i in range(1, 201)
        ],
    )
    conn.commit()
    conn.close()
    return path


QUESTION = "How many orders did each customer place, including customers with none?"
EXAMPLES = [
    SQLExample(
        "SELECT c.name, SUM(o.amount) AS total FROM customers AS c JOIN orders AS o "
        "ON o.customer_id = c.id GROUP BY c.id, c.name ORDER BY total DESC LIMIT 5"
    ),
    SQLExample(
        "SELECT c.id, COUNT(o.id) AS n FROM customers AS c LEFT JOIN orders AS o "
        "ON o.customer_id = c.id GROUP BY c.id",
        question=QUESTION,
        evidence="a customer with no orders counts 0",
    ),
    SQLExample("SELECT COUNT(*) FROM customers WHERE city IS NULL"),
    SQLExample("SELECT id, COALESCE(city, 'unknown') AS city FROM customers"),
    SQLExample("SELECT strftime('%Y', ordered_at) AS y, COUNT(*) AS n FROM orders GROUP BY y"),
    SQLExample("SELECT status, SUM(qty) * 1.0 / COUNT(*) AS avg_qty FROM orders GROUP BY status"),
    SQLExample("SELECT COUNT(*) FROM orders WHERE qty >= 3"),
    SQLExample("SELECT COUNT(DISTINCT customer_id) FROM orders"),
    SQLExample(
        "UPDATE orders SET status = 'archived' WHERE status = 'new' AND ordered_at < '2024-03-01'"
    ),
    SQLExample("DELETE FROM orders WHERE amount IS NULL AND qty > 2"),
    # rejected, each for its own reason:
    SQLExample("SELECT 1"),  # no mutation applies
    SQLExample("SELECT name FROM customers WHERE id > 0"),  # `id >= 0`: same result
    SQLExample("SELECT name FROM customers WHERE id < 0"),  # no rows: the default test fails
    SQLExample("SELECT nope FROM customers"),  # does not run
    SQLExample("CREATE TABLE t(x)"),  # not a query or DML
    SQLExample("SELECT 1; SELECT 2"),  # two statements
    SQLExample("SELECT id FROM orders", db_id="elsewhere"),  # another database
]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shop(tmp_path_factory.mktemp("synth") / "shop.sqlite")


@pytest.fixture(scope="module")
def result(shop: Path) -> SynthesisResult:
    return synthesize_tasks(shop, EXAMPLES, config=CONFIG)


def test_synthesis_keeps_only_valid_tasks(result: SynthesisResult, shop: Path) -> None:
    assert len(result.tasks) >= 14
    checks = validate_tasks(result.tasks, {"shop": shop}, CONFIG)
    assert all(c.valid for c in checks), [c.reason for c in checks if not c.valid]
    assert [t.instance_id for t in result.tasks] == [
        f"synth_shop_{n:04d}" for n in range(1, len(result.tasks) + 1)
    ]
    assert sum(result.by_family.values()) == len(result.tasks)
    assert result.by_family == Counter(t.extra["bug_family"] for t in result.tasks)
    assert len(result.by_family) >= 7  # the inputs exercise most families
    per_source = Counter(t.extra["source"] for t in result.tasks)
    assert max(per_source.values()) <= 2  # per_sql


def _outcome(db: Path, task: Task, sql: str, scratch: Path) -> Any:
    copy = scratch / "copy.sqlite"
    shutil.copyfile(db, copy)
    conn = sqlite3.connect(copy)
    try:
        if task.category is Category.QUERY:
            rows = conn.execute(sql).fetchall()
            return rows if task.conditions.get("order") else sorted(map(repr, rows))
        conn.execute(sql)
        return sorted(map(repr, conn.execute("SELECT * FROM orders").fetchall()))
    finally:
        conn.close()


def test_every_issue_sql_really_gives_a_different_result(
    result: SynthesisResult, shop: Path, tmp_path: Path
) -> None:
    for task in result.tasks:
        (issue,), (sol,) = task.issue_sql, task.sol_sql
        assert render_sql(parse_sql(issue)) != render_sql(parse_sql(sol))
        assert _outcome(shop, task, issue, tmp_path) != _outcome(shop, task, sol, tmp_path), (
            task.instance_id
        )


def test_task_shape(result: SynthesisResult) -> None:
    sources = {e.sql: e for e in EXAMPLES}
    for task in result.tasks:
        assert task.sol_sql[0] in sources  # the original, verbatim
        dml = task.sol_sql[0].startswith(("UPDATE", "DELETE"))
        assert task.category is (Category.MANAGEMENT if dml else Category.QUERY)
        assert len(task.test_cases) == (1 if dml else 0)
        assert task.extra["mutation"] in BY_NAME
        assert task.query.endswith("?") and len(task.query) > 60
    management = [t for t in result.tasks if t.category is Category.MANAGEMENT]
    assert {t.extra["bug_family"] for t in management} >= {"update_scope"}
    with_question = [t for t in result.tasks if t.sol_sql[0] == EXAMPLES[1].sql]
    assert with_question and all(QUESTION in t.query for t in with_question)


def test_rejections_are_counted(result: SynthesisResult) -> None:
    rejected = result.rejected
    assert rejected["no mutation applicable"] == 1
    assert rejected["bugged SQL gives the original's result"] >= 1
    assert rejected["original returns no rows (the default test needs rows)"] == 1
    assert rejected["original fails to execute"] == 1
    assert rejected["original is not a SELECT, UPDATE, DELETE or INSERT"] == 1
    assert rejected["not exactly one SQL statement"] == 1
    assert rejected["statement is for another database"] == 1
    assert result.examples == len(EXAMPLES)


def test_state_test_accepts_an_equivalent_statement(result: SynthesisResult, shop: Path) -> None:
    task = next(t for t in result.tasks if t.sol_sql[0].startswith("UPDATE"))
    rewritten = (
        "UPDATE orders SET status = 'archived' WHERE ordered_at < '2024-03-01' AND status = 'new'"
    )
    preds = {task.instance_id: [rewritten]}
    outcome = evaluate_suite([task], {"shop": shop}, preds, CONFIG)
    assert outcome.reports[0].success, outcome.reports[0].errors
    wrong = {task.instance_id: ["UPDATE orders SET status = 'archived' WHERE status = 'new'"]}
    assert not evaluate_suite([task], {"shop": shop}, wrong, CONFIG).reports[0].success


def test_same_seed_same_tasks(result: SynthesisResult, shop: Path) -> None:
    again = synthesize_tasks(shop, EXAMPLES, config=CONFIG)
    assert [t.to_record() for t in again.tasks] == [t.to_record() for t in result.tasks]
    assert again.rejected == result.rejected


def test_families_filter_and_unknown_family(shop: Path) -> None:
    only = synthesize_tasks(shop, EXAMPLES[:8], families=["aggregation"], per_sql=1, config=CONFIG)
    assert only.tasks and set(only.by_family) == {"aggregation"}
    with pytest.raises(SynthesisError, match="unknown bug family nope.*known: wrong_join"):
        synthesize_tasks(shop, EXAMPLES, families=["nope"], config=CONFIG)
    with pytest.raises(SynthesisError, match="database not found"):
        synthesize_tasks(shop.parent / "missing.sqlite", EXAMPLES, config=CONFIG)


def test_write_dataset_and_card(result: SynthesisResult, tmp_path: Path) -> None:
    path = result.write(tmp_path / "out")
    loaded = load_tasks(path)
    assert [t.to_record() for t in loaded] == [t.to_record() for t in result.tasks]
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"{len(result.tasks)} tasks" in card
    assert "| no mutation applicable | 1 |" in card
    assert "| update_scope |" in card


def test_validation_verdicts(result: SynthesisResult, shop: Path) -> None:
    task = next(t for t in result.tasks if t.category is Category.QUERY)
    tasks = [
        task,
        dataclasses.replace(task, instance_id="passes", issue_sql=task.sol_sql),
        dataclasses.replace(task, instance_id="fails", sol_sql=("SELECT nope FROM orders",)),
        dataclasses.replace(task, instance_id="public", sol_sql=()),
    ]
    checks = validate_tasks(tasks, {"shop": shop}, CONFIG)
    assert [c.verdict for c in checks] == [
        "valid",
        "issue_passes",
        "solution_fails",
        "no_reference",
    ]
    assert [c.valid for c in checks] == [True, False, False, False]
    assert checks[0].reason == "" and all(c.reason for c in checks[1:])


def test_rejections_go_by_verdict_not_by_wording() -> None:
    reworded = [
        ValidationResult("a", "valid"),
        ValidationResult("b", "issue_passes", "reworded: the bug slips through"),
        ValidationResult("c", "solution_fails", "evaluation failed? no: the fix is wrong"),
        ValidationResult("d", "no_reference", "nothing to compare with"),
    ]
    assert rejection_labels(reworded, "shop") == [
        None,
        "bugged SQL passes the tests (evaluator)",
        "original fails its own tests (evaluator)",
        "invalid: nothing to compare with",
    ]
    crashed = ValidationResult("e", "evaluation_failed", "the worker went away")
    with pytest.raises(SynthesisError, match="1 of 2 candidate tasks on shop failed: the worker"):
        rejection_labels([reworded[1], crashed], "shop")


def test_scratch_tells_a_timeout_from_an_sql_error(shop: Path) -> None:
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    with Scratch(shop, timeout_s=0.2) as scratch:
        timed_out = scratch.run(endless, None)
        assert (timed_out.ok, timed_out.error_kind) == (False, ErrorKind.TIMEOUT)
        bad = scratch.run("UPDATE orders SET nope = 1", "orders")
        assert (bad.ok, bad.error_kind) == (False, ErrorKind.SQL)
        assert bad.error is not None and "nope" in bad.error
        ok = scratch.run("SELECT id FROM orders", None)
        assert ok.ok and ok.rows > 0 and ok.error is None


# -- loading correct SQL ---------------------------------------------------------------------


def test_load_sql_file_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "q.sql"
    path.write_text(
        "-- revenue\nSELECT 1;\n\nSELECT ';' AS semi\nFROM t;\nUPDATE t SET x = 1 -- all\n"
    )
    examples = load_sql_examples(path)
    assert [e.sql for e in examples] == [
        "-- revenue\nSELECT 1",
        "SELECT ';' AS semi\nFROM t",
        "UPDATE t SET x = 1 -- all",
    ]
    assert [e.source.rsplit(", ", 1)[1] for e in examples] == ["line 1", "line 4", "line 6"]


def test_load_bird_records(tmp_path: Path) -> None:
    record = {"question": "How many?", "SQL": "SELECT 1;", "evidence": "", "db_id": "shop"}
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text(json.dumps(record) + "\n\n" + json.dumps({**record, "question": "Q2"}) + "\n")
    first, second = load_sql_examples(jsonl)
    assert (first.sql, first.question, first.evidence, first.db_id) == (
        "SELECT 1", "How many?", None, "shop",
    )  # fmt: skip
    assert second.source.endswith("dev.jsonl, line 3")
    as_json = tmp_path / "dev.json"
    as_json.write_text(json.dumps([record]))
    assert load_sql_examples(as_json)[0].source.endswith("dev.json, record 1")


def test_load_plain_lines(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_text("SELECT 1;\n\n-- skipped\nSELECT 2\n")
    assert [(e.sql, e.source[-6:]) for e in load_sql_examples(path)] == [
        ("SELECT 1", "line 1"),
        ("SELECT 2", "line 4"),
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.jsonl", '{"SQL": "SELECT 1"}\n{oops\n', r"bad\.jsonl, line 2: invalid JSON"),
        ("bad.jsonl", '{"question": "q"}\n', r"bad\.jsonl, line 1: field 'SQL': missing"),
        ("bad.json", '{"SQL": "SELECT 1"}', r"bad\.json: a \.json file must hold a list"),
        ("bad.json", '[{"SQL": "SELECT 1", "question": 3}]', r"record 1: field 'question'"),
        ("empty.sql", "-- nothing\n", r"empty\.sql: no SQL statements found"),
    ],
)
def test_load_errors_name_file_and_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SynthesisError, match=message):
        load_sql_examples(path)
    with pytest.raises(SynthesisError, match="SQL file not found"):
        load_sql_examples(tmp_path / "missing.sql")


# -- the command line ------------------------------------------------------------------------


def test_cli_synthesize_end_to_end(shop: Path, tmp_path: Path) -> None:
    sql_file = tmp_path / "dev.jsonl"
    sql_file.write_text(
        "\n".join(json.dumps({"question": f"q{i}", "SQL": e.sql}) for i, e in enumerate(EXAMPLES[:10]))
    )  # fmt: skip
    out = tmp_path / "out"
    args = ["tasks", "synthesize", "--db", str(shop), "--sql-file", str(sql_file)]
    run = CliRunner().invoke(app, [*args, "--out", str(out), "--per-sql", "1", "--workers", "2"])
    assert run.exit_code == 0, run.output
    assert "tasks synthesized on shop" in run.output and "total" in run.output
    loaded = load_tasks(out / "tasks.jsonl")
    assert 8 <= len(loaded) <= 10
    assert all(isinstance(t, Task) and t.db_id == "shop" for t in loaded)
    assert (out / "README.md").is_file()

    bad = CliRunner().invoke(app, [*args, "--out", str(out), "--families", "aggregation,nope"])
    assert bad.exit_code == 1 and "unknown bug family nope" in bad.output
