"""Reward integrity on both engines: for every exploration behaviour and every task of the
bundled test split, the environment's reward and success equal those of the same final SQL
scored fresh (what `birdrl eval --predictions` gives); a meta-test shows the suite catches
a regression to scoring on the exploration replica; and on tasks without tests, official
PostgreSQL/MySQL semantics reward a no-op submission while strict semantics do not.

Add a behaviour with `birdrl.env.integrity.behaviour` and it is checked here on both
engines."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from birdrl.env.integrity import BEHAVIOURS, IntegrityCase, check_reward_integrity
from birdrl.env.sqlact import EnvConfig, SQLActEnv
from birdrl.evaluation.dialects import DialectRun
from birdrl.evaluation.evaluator import EvalConfig, Evaluator
from birdrl.evaluation.runner import run_phase
from birdrl.evaluation.semantics import Semantics
from birdrl.evaluation.session import scoring_session
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.model import Task

if TYPE_CHECKING:
    from birdrl.evaluation.evaluator import TestReport

THREADS = 2


@dataclasses.dataclass
class Engine:
    dialect: str
    tasks: list[Task]
    evaluator: Evaluator
    make_env: Callable[[EnvConfig], SQLActEnv]
    pool: Any

    def check(self, behaviours: list[str], **kw: Any) -> list[IntegrityCase]:
        return check_reward_integrity(
            self.tasks,
            self.evaluator,
            kw.pop("make_env", self.make_env),
            behaviours,
            dialect=self.dialect,
            threads=THREADS,
            **kw,
        )


def _engine(
    dialect: str, tasks: list[Task], databases: Any, config: EvalConfig
) -> Iterator[Engine]:
    with scoring_session(databases, replicas_per_db=THREADS, eval_config=config) as (pool, ev):
        yield Engine(dialect, tasks, ev, lambda cfg: SQLActEnv(pool, ev, cfg), pool)
        assert pool.active_leases() == [], "an integrity episode leaked its lease"


@pytest.fixture(scope="module")
def sqlite_engine() -> Iterator[Engine]:
    bench = open_benchmark("bundled:test")
    yield from _engine("sqlite", bench.debugging_tasks(), bench.databases, EvalConfig(workers=2))


@pytest.fixture(scope="module")
def pg_engine(pg_bundled_test: DialectRun) -> Iterator[Engine]:
    run = pg_bundled_test
    yield from _engine("postgresql", run.tasks, run.databases, run.config)


@pytest.fixture(scope="module")
def my_engine(my_bundled_test: DialectRun) -> Iterator[Engine]:
    run = my_bundled_test
    yield from _engine("mysql", run.tasks, run.databases, run.config)


_ENGINES = {"sqlite": "sqlite_engine", "postgresql": "pg_engine", "mysql": "my_engine"}


@pytest.fixture(params=list(_ENGINES))
def engine(request: pytest.FixtureRequest) -> Engine:
    return request.getfixturevalue(_ENGINES[request.param])


def _disagreements(cases: list[IntegrityCase]) -> list[str]:
    return [
        f"{c.instance_id}: env {c.env_reward:.2f}/{c.env_success} vs fresh "
        f"{c.fresh_reward:.2f}/{c.fresh_success} {c.env_error or ''}"
        for c in cases
        if not c.agrees
    ]


@pytest.mark.parametrize("name", list(BEHAVIOURS))
def test_episode_reward_equals_the_fresh_score_of_its_final_sql(engine: Engine, name: str) -> None:
    cases = engine.check([name])
    assert len(cases) >= len(engine.tasks) // 2, "the behaviour applies to too few tasks"
    assert _disagreements(cases) == []
    fresh_successes = sum(c.fresh_success for c in cases)
    if name in {"apply_then_noop", "answer_table"}:  # no fix is submitted: no reward
        assert fresh_successes == 0
    else:  # the reference fix is submitted: it passes wherever the task is valid
        assert fresh_successes == len(cases)


_IN_PROCESS = threading.Lock()


class InPlaceEnv(SQLActEnv):
    """The regression the suite guards against: scoring on the explored replica."""

    def _score(self, ep: Any, statements: list[str]) -> TestReport:
        ep.lease.reset_connection()
        job = self.evaluator._phase_job(ep.task, tuple(statements), ep.lease.locator)
        with _IN_PROCESS:  # test cases redirect the process's stdout while they run
            result = run_phase(dataclasses.replace(job, preprocess_sql=()))
        ep.report = self.evaluator._report(ep.task, result, issue_passed=False)
        self.close()
        return ep.report


def test_the_suite_catches_scoring_on_the_exploration_replica(engine: Engine) -> None:
    def in_place(cfg: EnvConfig) -> SQLActEnv:
        return InPlaceEnv(engine.pool, engine.evaluator, cfg)

    management = [t for t in engine.tasks if t.category.value == "Management"][:6]
    assert management
    probe = dataclasses.replace(engine, tasks=management)
    cases = probe.check(["apply_then_noop", "test_then_submit"], make_env=in_place)
    assert _disagreements(cases), "scoring in place went unnoticed"
    assert _disagreements(probe.check(["apply_then_noop", "test_then_submit"])) == []


@pytest.mark.parametrize("semantics", list(Semantics))
def test_official_semantics_rewards_any_sql_that_runs_on_a_task_without_tests(
    engine: Engine, semantics: Semantics
) -> None:
    """The hole `strict` closes: with no test cases, the official PostgreSQL and MySQL
    evaluators count any prediction that executes as solved, so an episode that submits
    ``SELECT 1`` earns the full reward; strict runs its default test there (and SQLite's
    official evaluator does too)."""
    untested = [dataclasses.replace(t, test_cases=()) for t in engine.tasks[:4]]
    config = dataclasses.replace(engine.evaluator.config, semantics=semantics)
    with Evaluator(engine.pool, config, worker_id=engine.evaluator.worker_id) as evaluator:
        probe = dataclasses.replace(
            engine,
            tasks=untested,
            evaluator=evaluator,
            make_env=lambda cfg: SQLActEnv(engine.pool, evaluator, cfg),
        )
        cases = probe.check(["apply_then_noop"])
    assert len(cases) == len(untested) and _disagreements(cases) == []
    hole = semantics is Semantics.OFFICIAL and engine.dialect != "sqlite"
    assert [c.env_reward for c in cases] == [1.0 if hole else 0.0] * len(cases)
    assert all(c.env_success is hole for c in cases)


def test_unknown_behaviour_is_a_clear_error(sqlite_engine: Engine) -> None:
    with pytest.raises(ValueError, match="unknown reward-integrity behaviour"):
        sqlite_engine.check(["teleport"])
