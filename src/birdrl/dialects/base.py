"""What differs between SQL engines, behind one object.

A `Dialect` is a registered, stateless description of one engine: its name, how prompts
call it, how its SQL splits into statements, the official test-case API its test cases
see (`TestSession`), and how to open it for a run (`open_engine`). An `Engine` is the
dialect opened for one run (SQLite files, or a PostgreSQL server): a plain, picklable
value that makes the replica backend of every pool and says which tasks and template
databases the run scores (`Engine.prepare`). Code outside `birdrl.dialects` receives
these objects and never branches on an engine's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from birdrl.errors import BirdrlError

if TYPE_CHECKING:
    from birdrl.db.backend import ReplicaBackend
    from birdrl.tasks.benchmark import Benchmark
    from birdrl.tasks.model import Task

__all__ = [
    "PRELUDE",
    "Dialect",
    "DialectError",
    "Engine",
    "OfficialCall",
    "STRICT_RULES",
    "PhaseLike",
    "Prepared",
    "ScoringRules",
    "TestSession",
]

PRELUDE = "import datetime\nfrom datetime import date\n"
"""What the official SQLite evaluator imports before a test case's source."""


@dataclass(frozen=True)
class ScoringRules:
    """The three rules on which birdrl's strict scoring and the official evaluators can
    differ (docs/evaluation.md, "Scoring semantics"). A dialect's `Dialect.official_rules`
    says what its official evaluator does; `STRICT_RULES` turns all three on."""

    issue_sql_check: bool
    """Phase 1: tests run against the issue SQL first; if it passes them all, the task
    fails for every prediction."""
    default_test: bool
    """A task without test cases runs the dialect's default test (result equality with the
    solution). Off: no test runs, and any prediction that executes succeeds."""
    conditions: bool
    """Tests that accept ``conditions`` get the task's, ``ex_base`` takes a fifth argument
    ``conditions``, and the namespace holds ``remove_comments`` and ``remove_round``. Off:
    tests are called with exactly four arguments, and ``ex_base`` takes exactly four."""


STRICT_RULES = ScoringRules(issue_sql_check=True, default_test=True, conditions=True)
"""birdrl's strict scoring, the same on every dialect (the official SQLite rules)."""


@dataclass(frozen=True)
class OfficialCall:
    """How a dialect's official evaluator calls a task's ``test_case``, so that a test
    written for another engine is named before it is scored (`birdrl.dialects.foreign`)."""

    shown: str
    """The call as error messages show it."""
    positional: int = 4
    """Arguments passed by position."""
    keywords: tuple[str, ...] = ()
    """Arguments passed by name on every call (SQLite's ``conditions``)."""
    query_helper: str = ""
    """The query helper its test cases see (``perform_query_on_sqlite_databases``)."""


class DialectError(BirdrlError, ValueError):
    """A dialect cannot be used as asked (unknown name, no server, nothing left to score)."""


class PhaseLike(Protocol):
    """What a test session reads of an evaluation phase (`birdrl.evaluation.runner.PhaseJob`)."""

    @property
    def db_path(self) -> str: ...
    @property
    def sql(self) -> tuple[str, ...]: ...
    @property
    def sol_sql(self) -> tuple[str, ...]: ...
    @property
    def issue_sql(self) -> tuple[str, ...]: ...
    @property
    def conditions(self) -> dict[str, Any]: ...
    @property
    def efficiency(self) -> bool: ...
    @property
    def rules(self) -> ScoringRules: ...


class TestSession(Protocol):
    """One phase's connection to a replica and the engine's official test-case API."""

    conn: Any
    default_test: str
    """The test run when a task has none (the official default for this engine)."""

    def prelude(self, official_quirks: bool) -> str:
        """Source the official evaluator runs before each test case's source."""

    def execute(self, queries: Sequence[str]) -> tuple[Any, bool, bool, str]:
        """``(result_of_last, execution_error, timeout_error, message)``."""

    def namespace(self, sql_result: Any, job: PhaseLike) -> dict[str, Any]:
        """The globals a test case's source sees (``conditions`` only where `job`'s rules
        pass them)."""

    def call(self, test_case: Callable[..., Any], job: PhaseLike) -> None:
        """Call a test case with the arguments this engine's evaluator passes."""

    def same_rows(self, gold: Any, pred: Any) -> bool:
        """Equal result multisets (execution accuracy)."""

    def close(self) -> None: ...


@dataclass
class Prepared:
    """What a run scores in one engine: tasks, where their template databases are, and
    the tasks left out with the reason."""

    tasks: list[Task]
    databases: dict[str, Any]
    """db_id -> what the engine's backend opens a template from (a file, a database name)."""
    dropped: dict[str, str] = field(default_factory=dict)
    """instance_id -> why the task is not scored in this engine."""
    carried_over: bool = False
    """The tasks were rewritten from another dialect: they must be validated here."""
    caveats: dict[str, str] = field(default_factory=dict)
    """instance_id -> why this server cannot give the task the official verdict (the
    evaluator labels its reports, `birdrl.evaluation.evaluator.EvalConfig.caveats`)."""


class Engine(Protocol):
    """A dialect opened for one run. Picklable: configs and worker processes carry it."""

    @property
    def dialect(self) -> str:
        """The registered name of its `Dialect`."""

    def backend(self, *, restore: str = "page", ephemeral: bool = False) -> ReplicaBackend:
        """A replica backend for one pool (`ephemeral`: drop its replicas on close)."""

    def prepare(self, bench: Benchmark) -> Prepared:
        """The benchmark's debugging tasks as this engine scores them."""


class Dialect(Protocol):
    """One SQL engine (see the module docstring). Register new ones with
    `birdrl.dialects.register_dialect`; docs/dialects.md has the recipe."""

    name: str
    """Registry key; also `Lease.dialect` and `PhaseJob.dialect`."""
    title: str
    """How prompts name the engine ("SQLite")."""
    sqlglot: str
    """sqlglot's name for the engine, for parsing task SQL."""
    databases_on_server: bool
    """Task files of this engine may name databases that already live on a server (no
    database files to find)."""
    drop_cascade: str
    """Suffix that makes ``DROP TABLE`` also drop dependent objects ("" if none needed)."""
    probe_settings: tuple[str, ...]
    """Session settings that change what SQL means (integrity probes set them and check
    that scoring does not see them)."""
    official_rules: ScoringRules
    """What this engine's official BIRD-CRITIC evaluator does (`ScoringRules`)."""
    official_call: OfficialCall
    """How its official evaluator calls a test case (`OfficialCall`)."""

    def split_statements(self, sql: str) -> list[str]:
        """Split a script into statements as this engine reads it."""

    def open_test_session(self, locator: str, statement_timeout_s: float) -> TestSession:
        """A test session on the replica at `locator` (in an evaluator worker)."""

    def open_engine(self, dsn: str | None = None) -> AbstractContextManager[Engine]:
        """The engine for one run: `dsn` names a server where the engine has one (None:
        the engine's default, e.g. a throwaway local cluster)."""
