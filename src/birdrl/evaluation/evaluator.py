"""The one scorer: benchmark success rate and the RL reward both come from `Evaluator`.

For each task it leases a fresh replica from a `ReplicaPool` (instead of copying the
database), hands its path to a long-lived worker process that runs the phase (preprocess,
SQL under test, test cases, clean-up), and releases the lease; the pool restores only
replicas that really changed. Like the official SQLite evaluator (and under ``strict``
semantics on every engine) it first runs the tests against the task's issue SQL on another
fresh state: if the issue SQL passes them all, the task cannot tell right from wrong and
counts as failed for every prediction. `EvalConfig.semantics` picks the rules
(`birdrl.evaluation.semantics`).
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from birdrl.db.errors import PoolError
from birdrl.db.lease import trusted_locator
from birdrl.db.pool import ReplicaPool
from birdrl.dialects import Engine, get_dialect
from birdrl.dialects.sqlite import SQLiteFiles
from birdrl.errors import BirdrlError
from birdrl.evaluation.runner import ExJob, ExResult, PhaseJob, PhaseResult, run_job
from birdrl.evaluation.semantics import EVAL_SEMANTICS, Semantics, scoring_rules
from birdrl.evaluation.workers import JobTimeout, Worker, WorkerError
from birdrl.tasks.fields import split_sql_field
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "EvalConfig",
    "EvalConfigError",
    "Evaluator",
    "ExReport",
    "TaskNotScorableError",
    "TestReport",
]


_FAILED = PhaseResult(passed=0, tests_run=0)


def _all_passed(result: PhaseResult) -> bool:
    """Phase 1's verdict on the issue SQL (run only where a task has tests or a default test)."""
    return (
        not result.execution_error
        and not result.timeout_error
        and result.tests_run > 0
        and result.passed == result.tests_run
    )


class TaskNotScorableError(BirdrlError, ValueError):
    """The task has no reference solution (a public release): it can be used for inference
    only."""


class EvalConfigError(BirdrlError, ValueError):
    """An `EvalConfig` value is out of range (says which field and the value given)."""


@dataclass(frozen=True)
class EvalConfig:
    """How the evaluator runs."""

    workers: int = field(default_factory=lambda: max(1, min(os.cpu_count() or 1, 8)))
    """Worker processes (and evaluations in flight)."""
    job_timeout_s: float = 120.0
    """Wall-clock limit for one phase (preprocess + SQL + all test cases) in a worker."""
    statement_timeout_s: float = 30.0
    """Limit per SQL statement; a statement past it is a timeout error."""
    semantics: Semantics = EVAL_SEMANTICS
    """``official`` (each engine's official evaluator) or ``strict`` (birdrl's rules on
    every engine, the RL reward's): see `birdrl.evaluation.semantics`."""
    check_issue_sql: bool = True
    """Run the tests against the issue SQL first (phase 1), where the semantics has it."""
    cache_issue_check: bool = True
    """Remember phase 1's outcome per task within this evaluator (it depends only on the task)."""
    official_quirks: bool = True
    """Reproduce the official evaluator's quirks (see docs/evaluation.md)."""
    pool_root: Path | None = None
    """Where replicas live; None: a temporary directory removed on close."""
    restore: str = "page"
    """SQLite restore strategy (see `PoolConfig.restore`)."""
    engine: Engine = field(default_factory=SQLiteFiles)
    """Where replicas are made (`birdrl.dialects`): SQLite files by default, or e.g. a
    PostgreSQL server (databases are then template database names)."""
    caveats: Mapping[str, str] = field(default_factory=dict, hash=False)
    """instance_id -> why this server cannot give that task the official verdict
    (`birdrl.dialects.base.Prepared.caveats`); its reports carry it (`TestReport.caveat`)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise EvalConfigError(f"workers must be >= 1, got {self.workers}")
        object.__setattr__(self, "semantics", Semantics.parse(self.semantics))


@dataclass(frozen=True)
class TestReport:
    """The outcome of scoring one prediction for one task."""

    instance_id: str
    db_id: str
    category: str
    passed: int
    """Test cases passed by the prediction."""
    tests_run: int
    """Test cases run (1 for the default test; 0 if the prediction failed to execute)."""
    total_test_cases: int
    """The official count: the task's test cases (0 when the default test ran)."""
    expected_tests: int = 1
    """Tests that must pass for success: the task's, 1 for the default test, 0 where the
    semantics has no default test (then a prediction that executes succeeds)."""
    semantics: str = EVAL_SEMANTICS.value
    """The scoring semantics of this verdict (``official`` or ``strict``)."""
    failed_tests: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    execution_error: bool = False
    timeout_error: bool = False
    issue_sql_passed: bool = False
    """Phase 1: the task's own issue SQL passed every test (an invalid task)."""
    infra_error: str | None = None
    """The evaluation itself failed (worker crash, restore failure): not the model's fault."""
    caveat: str | None = None
    """Why this verdict may differ from the official evaluator's on its own server (this
    server cannot reproduce it, e.g. MariaDB's plans have no cost); counted apart."""

    @property
    def reward(self) -> float:
        """Fraction of test cases passed: the pure execution reward. With no test to pass
        (official PostgreSQL/MySQL, a task without tests) it is the success: 1 for any SQL
        that executes, the hole `strict` semantics closes."""
        if self.expected_tests == 0:
            return float(self.success)
        return self.passed / self.expected_tests

    @property
    def success(self) -> bool:
        """All test cases passed (and the task is valid): the benchmark's success."""
        return (
            self.infra_error is None
            and not self.issue_sql_passed
            and not self.execution_error
            and not self.timeout_error
            and self.passed == self.expected_tests
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = "success" if self.success else "failed"
        out["reward"] = self.reward
        return out


@dataclass(frozen=True)
class ExReport:
    """Execution accuracy of one text-to-SQL prediction."""

    question_id: str
    db_id: str
    correct: bool
    error: str | None = None
    infra_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Evaluator:
    """Scores predictions for tasks, each phase on a fresh replica leased from partition
    `worker_id` of `pool` (None: the pool's default partition).

    It receives its pool and never closes it: the pool's owner does. `scoring_session`
    builds one pool to explore and score in; `open_evaluator` builds a pool for scoring
    only (`config.workers` replicas per database) and closes both.

    Thread-safe; use as a context manager or call `close()` (which stops its workers).
    """

    def __init__(
        self,
        pool: ReplicaPool,
        config: EvalConfig | None = None,
        *,
        worker_id: int | None = None,
    ) -> None:
        if not isinstance(pool, ReplicaPool):
            raise TypeError(
                f"Evaluator takes the ReplicaPool it scores on, not {type(pool).__name__}; "
                "to score on databases, use birdrl.evaluation.open_evaluator(databases, config)"
            )
        self.config = config or EvalConfig()
        self.pool = pool
        self.worker_id = worker_id
        self.dialect = get_dialect(pool.dialect)
        self.rules = scoring_rules(self.config.semantics, self.dialect)
        self._traj_prefix = f"eval-{uuid.uuid4().hex[:8]}"  # unique in a shared pool
        self._workers = [Worker(run_job) for _ in range(self.config.workers)]
        self._free = list(range(self.config.workers))
        self._free_cond = threading.Condition()
        self._ids = itertools.count()
        self._issue_cache: dict[tuple[str, int], PhaseResult] = {}

    # -- public API -------------------------------------------------------------------------

    def evaluate(self, task: Task, pred_sqls: Sequence[str] | str) -> TestReport:
        """Score one prediction for one task: a list of statements, or one string that is
        cut at ``[split]`` markers as the official evaluators do."""
        if not task.has_reference:
            raise TaskNotScorableError(
                f"task {task.instance_id!r} has no sol_sql (public release?): it can be used "
                "for inference, not scored"
            )
        pred = split_sql_field(pred_sqls)
        issue_passed = False
        if self.config.check_issue_sql and self.rules.issue_sql_check and task.issue_sql:
            try:
                issue = self._issue_phase(task)
            except JobTimeout as exc:  # the issue SQL hangs: it certainly fails the tests
                issue = PhaseResult(0, 0, errors=(str(exc),), timeout_error=True)
            except (WorkerError, PoolError) as exc:
                return self._report(task, _FAILED, False, infra_error=f"issue-SQL check: {exc}")
            issue_passed = _all_passed(issue)
        try:
            result = self._phase(task, pred)
        except JobTimeout as exc:
            result = PhaseResult(0, 0, errors=(str(exc),), timeout_error=True)
        except (WorkerError, PoolError) as exc:
            return self._report(task, _FAILED, issue_passed, infra_error=str(exc))
        return self._report(task, result, issue_passed)

    def evaluate_many(
        self,
        items: Iterable[tuple[Task, Sequence[str] | str]],
        progress: Callable[[TestReport], None] | None = None,
    ) -> list[TestReport]:
        """Score many (task, prediction) pairs in parallel; reports in input order."""
        items = list(items)
        with ThreadPoolExecutor(max_workers=self.config.workers) as executor:
            futures = [executor.submit(self.evaluate, task, pred) for task, pred in items]
            reports = []
            for future in futures:
                report = future.result()
                if progress is not None:
                    progress(report)
                reports.append(report)
        return reports

    def execution_accuracy(self, task: TextToSQLTask, pred_sql: str) -> ExReport:
        """EX of a text-to-SQL prediction: result multisets of prediction and gold equal."""

        def job(path: str) -> ExJob:
            return ExJob(
                path, pred_sql, task.sql, self.config.statement_timeout_s, dialect=self.dialect
            )

        try:
            out = self._run(task.db_id, job)
        except JobTimeout as exc:
            return ExReport(task.question_id, task.db_id, False, error=str(exc))
        except (WorkerError, PoolError) as exc:
            return ExReport(task.question_id, task.db_id, False, infra_error=str(exc))
        assert isinstance(out, ExResult)
        return ExReport(task.question_id, task.db_id, out.correct, out.error, out.gold_error)

    def close(self) -> None:
        for worker in self._workers:
            worker.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _issue_phase(self, task: Task) -> PhaseResult:
        key = (
            task.instance_id,
            hash((task.issue_sql, task.sol_sql, task.test_cases, task.preprocess_sql)),
        )
        if self.config.cache_issue_check and key in self._issue_cache:
            return self._issue_cache[key]
        result = self._phase(task, task.issue_sql)
        if self.config.cache_issue_check:
            self._issue_cache[key] = result
        return result

    def _phase_job(self, task: Task, sql: tuple[str, ...], path: str) -> PhaseJob:
        return PhaseJob(
            db_path=path,
            sql=sql,
            sol_sql=task.sol_sql,
            preprocess_sql=task.preprocess_sql,
            clean_up_sql=task.clean_up_sql,
            test_cases=task.test_cases,
            conditions=dict(task.conditions),
            statement_timeout_s=self.config.statement_timeout_s,
            official_quirks=self.config.official_quirks,
            dialect=self.dialect,
            efficiency=task.efficiency,
            issue_sql=task.issue_sql,
            rules=self.rules,
        )

    def _phase(self, task: Task, sql: tuple[str, ...]) -> PhaseResult:
        out = self._run(task.db_id, lambda path: self._phase_job(task, sql, path))
        assert isinstance(out, PhaseResult)
        return out

    def _on_worker(self, call: Callable[[Worker], Any]) -> Any:
        """Run `call` with a free worker process (waiting for one if all are busy)."""
        with self._free_cond:
            while not self._free:
                self._free_cond.wait()
            index = self._free.pop()
        try:
            return call(self._workers[index])
        finally:
            with self._free_cond:
                self._free.append(index)
                self._free_cond.notify()

    def _run(
        self, db_id: str, make_job: Callable[[str], PhaseJob | ExJob]
    ) -> PhaseResult | ExResult:
        """Lease a fresh replica, run the job on a free worker, release the lease."""
        traj_id = f"{self._traj_prefix}-{next(self._ids)}"
        wait_s = self.config.job_timeout_s * 2 + 60

        def call(worker: Worker) -> Any:
            with (
                self.pool.lease(traj_id, db_id, worker_id=self.worker_id, timeout=wait_s) as lease,
                trusted_locator(lease) as locator,  # no TTL can end it while the job writes
            ):
                return worker.run(make_job(locator), self.config.job_timeout_s)

        return self._on_worker(call)

    def _report(
        self, task: Task, result: PhaseResult, issue_passed: bool, infra_error: str | None = None
    ) -> TestReport:
        return TestReport(
            instance_id=task.instance_id,
            db_id=task.db_id,
            category=task.category.value,
            passed=result.passed,
            tests_run=result.tests_run,
            total_test_cases=len(task.test_cases),
            expected_tests=len(task.test_cases) or int(self.rules.default_test),
            semantics=self.config.semantics.value,
            failed_tests=result.failed_tests,
            errors=result.errors,
            execution_error=result.execution_error,
            timeout_error=result.timeout_error,
            issue_sql_passed=issue_passed,
            infra_error=infra_error,
            caveat=self.config.caveats.get(task.instance_id),
        )
