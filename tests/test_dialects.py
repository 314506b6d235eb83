"""The dialect seam: the registry, and a third engine added as one class + one
registration, reaching the evaluator's workers, the environment's prompts and the pool
without any other module knowing its name."""

from __future__ import annotations

import ast
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.registry import make_agent
from birdrl.db.backend import SQLiteBackend
from birdrl.dialects import DialectError, Prepared, dialect_names, get_dialect, register_dialect
from birdrl.dialects import base as dialect_base
from birdrl.dialects import registry as dialect_registry
from birdrl.dialects.sqlite import SQLiteDialect
from birdrl.dialects.sqlite.testing import SQLiteTestSession
from birdrl.env.prompts import build_messages
from birdrl.evaluation.dialects import open_dialect
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.suite import evaluate_suite, scripted_predictions
from birdrl.tasks.benchmark import Benchmark, open_benchmark

SRC = Path(__file__).resolve().parents[1] / "src" / "birdrl"
ENGINE_NAMES = {"sqlite", "postgresql", "postgres", "mysql", "mariadb"}


class MarkedSession(SQLiteTestSession):
    """SQLite's session, leaving a mark so the test sees the worker went through it."""

    def __init__(self, db_path: str, statement_timeout_s: float) -> None:
        super().__init__(db_path, statement_timeout_s)
        marks = os.environ.get("BIRDRL_TOY_MARKS")
        if marks:
            with open(marks, "a", encoding="utf-8") as f:
                f.write("session\n")


class ToyBackend(SQLiteBackend):
    dialect = "toysql"


@dataclass(frozen=True)
class ToyEngine:
    @property
    def dialect(self) -> str:
        return "toysql"

    def backend(self, *, restore: str = "page", ephemeral: bool = False) -> ToyBackend:
        return ToyBackend(restore)

    def prepare(self, bench: Benchmark) -> Prepared:
        return Prepared(bench.debugging_tasks()[:6], dict(bench.databases))


class ToyDialect(SQLiteDialect):
    """A "third engine": SQLite underneath, under its own name and title."""

    name = "toysql"
    title = "ToySQL"

    def open_test_session(
        self, locator: str, statement_timeout_s: float
    ) -> dialect_base.TestSession:
        return MarkedSession(locator, statement_timeout_s)

    @contextlib.contextmanager
    def open_engine(self, dsn: str | None = None) -> Iterator[ToyEngine]:  # type: ignore[override]
        yield ToyEngine()


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(dialect_registry, "_REGISTERED", {})
    register_dialect(ToyDialect())
    marks = tmp_path / "marks.txt"
    monkeypatch.setenv("BIRDRL_TOY_MARKS", str(marks))  # spawned workers inherit it
    return marks


def test_shipped_dialects_are_listed_once_and_unknown_names_are_refused() -> None:
    assert dialect_names()[:2] == ("sqlite", "postgresql")
    assert get_dialect("sqlite").title == "SQLite"
    assert get_dialect("postgresql").sqlglot == "postgres"
    with pytest.raises(DialectError, match="unknown SQL dialect 'mysqll'.*sqlite, postgresql"):
        get_dialect("mysqll")
    with pytest.raises(DialectError, match="already registered"):
        register_dialect(SQLiteDialect())


def test_statement_splitters_differ_per_engine() -> None:
    body = "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql; SELECT 2"
    assert len(get_dialect("postgresql").split_statements(body)) == 2
    assert len(get_dialect("sqlite").split_statements(body)) == 3  # SQLite has no $$ quoting


def test_a_registered_engine_is_scored_prompted_and_pooled(toy: Path) -> None:
    bench = open_benchmark("bundled:test")
    with open_dialect(bench, "toysql", EvalConfig(workers=1)) as run:
        assert run.dialect == "toysql" and len(run.tasks) == 6
        gold = evaluate_suite(
            run.tasks, run.databases, scripted_predictions(run.tasks, "gold"), run.config
        )
        assert gold.summary.overall.rate == 100.0
        assert toy.read_text().count("session") >= 6  # every phase ran in its test session
        episodes = evaluate_agent(
            run.tasks[:2], run.databases, make_agent("gold"), eval_config=run.config
        )
        assert episodes.summary.overall.rate == 100.0
        first = episodes.trajectories[0]
        assert "ToySQL" in first.messages[0]["content"]
        assert "SQLite" not in first.messages[0]["content"]
    template = next(iter(bench.databases.values()))
    system = build_messages(run.tasks[0], template, dialect="toysql")[0]["content"]
    assert system.startswith("You are an expert ToySQL engineer")


def _engine_name_branches(path: Path, root: Path = SRC) -> list[str]:
    """Comparisons with an engine's name (``d == "postgresql"``, ``d in ("sqlite", ...)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(v, ast.Constant) and v.value in ENGINE_NAMES for v in values):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_outside_dialects_branches_on_an_engine_name() -> None:
    problems = [
        problem
        for path in sorted(SRC.rglob("*.py"))
        if "dialects" not in path.relative_to(SRC).parts
        for problem in _engine_name_branches(path)
    ]
    assert problems == []


def test_the_branch_check_catches_a_branch(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        'def f(d):\n    return 1 if d == "postgresql" else d in ("sqlite", "x")\n',
        encoding="utf-8",
    )
    assert len(_engine_name_branches(probe, tmp_path)) == 2
