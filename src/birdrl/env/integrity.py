"""Reward integrity: an episode's reward is the score of its final SQL on a fresh database.

The trajectory's replica is the agent's scratch space; the official benchmark (and so
birdrl) judges a submission on a fresh database in the task's initial state. If scoring
ever leaked exploration state, an agent could earn reward without a fix (apply the fix with
``execute_sql``, submit a no-op; store the answer in a table, submit ``SELECT *`` from it)
or lose it for careful work (test a fix, then submit it: the index already exists, the row
is inserted twice). `check_reward_integrity` plays scripted *behaviours* like these in the
real environment and compares each episode's reward and success with
``evaluator.evaluate(task, final_sql)``, the score ``birdrl eval --predictions`` gives.

A behaviour is a function ``(task, dialect) -> Script | None`` (None: it does not apply to
the task) registered by name in `BEHAVIOURS`; `behaviour` adds one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from threading import Lock

from birdrl.dialects import get_dialect
from birdrl.env.sqlact import EnvConfig, SQLActEnv
from birdrl.env.tools import render_tool_call
from birdrl.evaluation.evaluator import Evaluator, TestReport
from birdrl.tasks.model import Task

__all__ = [
    "BEHAVIOURS",
    "Behaviour",
    "IntegrityCase",
    "Script",
    "behaviour",
    "check_reward_integrity",
    "episode_config",
]


@dataclass(frozen=True)
class Script:
    """What a scripted agent does in one episode: ``execute_sql`` calls, then one submission."""

    explore: tuple[str, ...]
    submission: tuple[str, ...]


Behaviour = Callable[[Task, str], Script | None]
BEHAVIOURS: dict[str, Behaviour] = {}


def behaviour(name: str) -> Callable[[Behaviour], Behaviour]:
    """Register an exploration behaviour under `name` (the decorator form)."""

    def register(fn: Behaviour) -> Behaviour:
        if name in BEHAVIOURS:
            raise ValueError(f"a reward-integrity behaviour named {name!r} exists already")
        BEHAVIOURS[name] = fn
        return fn

    return register


def _bare(sql: str) -> str:
    return sql.strip().rstrip(";").strip()


def _single_select(task: Task) -> str | None:
    if len(task.sol_sql) != 1:
        return None
    sql = _bare(task.sol_sql[0])
    return sql if sql.split(None, 1)[0].upper() in {"SELECT", "WITH"} else None


_ROUTINE = re.compile(
    r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\w*\s+)?(?:TRIGGER|FUNCTION|PROCEDURE)\b", re.I
)


def used_tables(task: Task, dialect: str) -> list[str]:
    """Tables the reference solution reads or writes (CTE names left out), rendered for
    `dialect`; [] when sqlglot cannot parse it."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    read = get_dialect(dialect).sqlglot
    names: list[str] = []
    for sql in task.sol_sql:
        if _ROUTINE.match(sql):  # trigger/function bodies: sqlglot falls back to a Command
            continue
        try:
            trees = sqlglot.parse(sql, read=read)
        except SqlglotError:
            continue
        for tree in trees:
            if tree is None:
                continue
            ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
            for table in tree.find_all(exp.Table):
                if not table.name or table.name.lower() in ctes:
                    continue
                name = exp.table_(table.name, db=table.db or None, quoted=True).sql(read)
                if name not in names:
                    names.append(name)
    return names


@behaviour("apply_then_noop")
def _apply_then_noop(task: Task, dialect: str) -> Script:
    """Apply the reference fix with execute_sql, then submit a statement that does nothing."""
    return Script(tuple(task.sol_sql), ("SELECT 1",))


@behaviour("answer_table")
def _answer_table(task: Task, dialect: str) -> Script | None:
    """Store the correct answer in a table, then submit a SELECT of that table."""
    select = _single_select(task)
    if select is None:
        return None
    return Script((f"CREATE TABLE zz_answer AS {select}",), ("SELECT * FROM zz_answer",))


@behaviour("test_then_submit")
def _test_then_submit(task: Task, dialect: str) -> Script:
    """Try the fix first (it writes, creates an index...), then submit the same fix."""
    return Script(tuple(task.sol_sql), tuple(task.sol_sql))


@behaviour("reproduce_then_submit")
def _reproduce_then_submit(task: Task, dialect: str) -> Script:
    """Run the user's buggy SQL to see the problem, then submit the fix."""
    return Script(tuple(task.issue_sql), tuple(task.sol_sql))


@behaviour("drop_used_table")
def _drop_used_table(task: Task, dialect: str) -> Script | None:
    """Drop a table the fix uses, then submit the fix."""
    tables = used_tables(task, dialect)
    if not tables:
        return None
    cascade = get_dialect(dialect).drop_cascade
    return Script((f"DROP TABLE {tables[0]}{cascade}",), tuple(task.sol_sql))


@behaviour("scratch_objects")
def _scratch_objects(task: Task, dialect: str) -> Script:
    """Create scratch tables and views (a name the tests might look up), then submit."""
    return Script(
        (
            "CREATE TABLE zz_scratch (x INTEGER)",
            "INSERT INTO zz_scratch VALUES (1), (2)",
            "CREATE VIEW zz_view AS SELECT x FROM zz_scratch",
        ),
        tuple(task.sol_sql),
    )


@behaviour("open_transaction")
def _open_transaction(task: Task, dialect: str) -> Script:
    """Begin a transaction, apply the fix inside it, never commit, then submit the fix."""
    return Script(("BEGIN", *task.sol_sql), tuple(task.sol_sql))


@behaviour("temp_objects")
def _temp_objects(task: Task, dialect: str) -> Script:
    """TEMP objects, one of them an empty copy that shadows a table the fix uses."""
    explore = [
        "CREATE TEMP TABLE zz_tmp AS SELECT 1 AS x",
        "CREATE TEMP VIEW zz_tmpv AS SELECT x FROM zz_tmp",
    ]
    tables = used_tables(task, dialect)
    if tables and "." not in tables[0]:
        explore.append(f"CREATE TEMP TABLE {tables[0]} AS SELECT * FROM {tables[0]} WHERE 1 = 0")
    return Script(tuple(explore), tuple(task.sol_sql))


@behaviour("session_settings")
def _session_settings(task: Task, dialect: str) -> Script:
    """Connection settings that change what SQL means (PRAGMAs / SET), then submit the fix."""
    return Script(get_dialect(dialect).probe_settings, tuple(task.sol_sql))


@dataclass(frozen=True)
class IntegrityCase:
    """One task under one behaviour: what the environment gave, what a fresh score gives."""

    behaviour: str
    instance_id: str
    env_reward: float
    env_success: bool
    fresh_reward: float
    fresh_success: bool
    env_error: str | None = None
    """The episode's infrastructure error, if any (a case that ran into one never agrees)."""

    @property
    def agrees(self) -> bool:
        return (
            self.env_error is None
            and self.env_reward == self.fresh_reward
            and self.env_success == self.fresh_success
        )


def episode_config(script: Script) -> EnvConfig:
    """An environment config that lets a script play to its submission."""
    return EnvConfig(max_tool_calls=len(script.explore) + 1, max_context_tokens=None)


def _play(env: SQLActEnv, task: Task, script: Script) -> tuple[float, bool, str | None]:
    env.reset(task)
    try:
        for sql in script.explore:
            step = env.step(render_tool_call("execute_sql", {"sql": sql}))
            if step.done:
                return step.reward, bool(step.info.get("success")), step.info.get("infra_error")
        final = env.step(render_tool_call("submit_solution", {"sql": list(script.submission)}))
        return final.reward, bool(final.info.get("success")), final.info.get("infra_error")
    finally:
        env.close()


def check_reward_integrity(
    tasks: Sequence[Task],
    evaluator: Evaluator,
    make_env: Callable[[EnvConfig], SQLActEnv],
    behaviours: Iterable[str] | None = None,
    *,
    dialect: str = "sqlite",
    threads: int = 2,
) -> list[IntegrityCase]:
    """Play every applicable (behaviour, task) pair in an environment from `make_env` and
    score its final SQL fresh with `evaluator`; one `IntegrityCase` per pair, in order.
    `threads` episodes run at once (the pool behind `make_env` needs that many replicas of
    each database)."""
    names = list(BEHAVIOURS) if behaviours is None else list(behaviours)
    unknown = [n for n in names if n not in BEHAVIOURS]
    if unknown:
        raise ValueError(f"unknown reward-integrity behaviour(s): {', '.join(unknown)}")
    jobs = [
        (name, task, script)
        for name in names
        for task in tasks
        if (script := BEHAVIOURS[name](task, dialect)) is not None
    ]
    fresh: dict[tuple[str, tuple[str, ...]], TestReport] = {}
    fresh_lock = Lock()

    def fresh_score(task: Task, submission: tuple[str, ...]) -> TestReport:
        key = (task.instance_id, submission)
        with fresh_lock:
            known = fresh.get(key)
        if known is None:
            known = evaluator.evaluate(task, list(submission))
            with fresh_lock:
                fresh[key] = known
        return known

    def run(job: tuple[str, Task, Script]) -> IntegrityCase:
        name, task, script = job
        reward, success, error = _play(make_env(episode_config(script)), task, script)
        report = fresh_score(task, script.submission)
        return IntegrityCase(
            name, task.instance_id, reward, success, report.reward, report.success, error
        )

    with ThreadPoolExecutor(max_workers=max(1, threads)) as executor:
        return list(executor.map(run, jobs))
