"""Scoring, the SQL-Act environment and TRL's stage-4 tool environment on MySQL replicas,
with native MySQL tasks written for the shop template of `test_mysql_pool` (one per
category, a multi-statement management task with stored-program text, and a default-test
query): gold scores 100%, the issue SQL 0% under strict semantics (a third officially), the scripted explorer solves them through the
environment, and the stage-4 environment's reward is the evaluator's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from test_mysql_pool import MySetup, my_setup

from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.registry import make_agent
from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.mysql.server import MySQLServer
from birdrl.evaluation import EvalConfig
from birdrl.evaluation.semantics import Semantics
from birdrl.evaluation.session import open_evaluator, scoring_session
from birdrl.evaluation.suite import evaluate_suite, scripted_predictions
from birdrl.tasks.model import Category, Task
from birdrl.training.environment import ToolEnvSession

_EX_BASE = (
    "def test_case(pred_sqls, sol_sqls, db_name, conn):\n"
    "    pred, _, _, _ = execute_queries(pred_sqls, db_name, conn)\n"
    "    sol, _, _, _ = execute_queries(sol_sqls, db_name, conn)\n"
    "    assert ex_base(pred_sqls, sol_sqls, db_name, conn) == 1, (pred, sol)\n"
)
_AFTER = (
    "def test_case(pred_sqls, sol_sqls, db_name, conn):\n"
    "    rows, _ = perform_query_on_mysql_databases(\n"
    "        \"SELECT note FROM audit WHERE note LIKE 'vip%' ORDER BY id\", db_name, conn)\n"
    "    assert [r[0] for r in rows] == ['vip c0', 'vip c1'], rows\n"
)

TASKS = [
    Task(
        instance_id="my_query_case",
        db_id="shop",
        query="Count customers in 'Oslo' exactly (the city column is case-sensitive here).",
        issue_sql=("SELECT COUNT(*) FROM customer WHERE LOWER(city) = 'oslo'",),
        sol_sql=("SELECT COUNT(*) FROM customer WHERE city = 'Oslo'",),
        category=Category.QUERY,
    ),
    Task(
        instance_id="my_query_tests",
        db_id="shop",
        query="Total order amount per customer, only customers with orders.",
        issue_sql=(
            "SELECT c.id, SUM(o.amount) FROM customer c LEFT JOIN orders o"
            " ON o.customer_id = c.id GROUP BY c.id",
        ),
        sol_sql=(
            "SELECT c.id, SUM(o.amount) FROM customer c JOIN orders o"
            " ON o.customer_id = c.id GROUP BY c.id",
        ),
        test_cases=(_EX_BASE,),
        category=Category.QUERY,
    ),
    Task(
        instance_id="my_management",
        db_id="shop",
        query="Log a 'vip <name>' audit note for the two first customers, in one procedure call.",
        issue_sql=(
            "CREATE PROCEDURE log_vips() BEGIN INSERT INTO audit (note) SELECT CONCAT('vip', name)"
            " FROM customer WHERE id <= 2 ORDER BY id; END",
            "CALL log_vips()",
        ),
        sol_sql=(
            "CREATE PROCEDURE log_vips() BEGIN INSERT INTO audit (note) SELECT"
            " CONCAT('vip ', name) FROM customer WHERE id <= 2 ORDER BY id; END",
            "CALL log_vips()",
        ),
        test_cases=(_AFTER,),
        category=Category.MANAGEMENT,
    ),
]


@pytest.fixture(scope="module")
def my(mariadb: LocalMariaDB) -> Iterator[MySetup]:
    with my_setup(mariadb, {"shop": (160, 5)}) as setup:
        yield setup


@pytest.fixture(scope="module")
def config(my: MySetup) -> EvalConfig:
    return EvalConfig(workers=2, engine=MySQLServer(my.admin_dsn, prefix="tmyeval"))


def test_gold_scores_everything_and_the_issue_sql_nothing(my: MySetup, config: EvalConfig) -> None:
    strict = replace(config, semantics=Semantics.STRICT)
    # officially a task without tests is solved by any SQL that executes: the issue SQL of
    # my_query_case scores; strict runs its default test there and it does not
    for cfg, agent, rate in (
        (strict, "gold", 100.0),
        (strict, "issue", 0.0),
        (config, "gold", 100.0),
        (config, "issue", 100 / 3),
    ):
        result = evaluate_suite(TASKS, my.templates, scripted_predictions(TASKS, agent), cfg)
        assert result.summary.overall.rate == pytest.approx(rate), [
            r.to_dict() for r in result.reports
        ]
    with open_evaluator(my.templates, config) as evaluator:  # the split the model submits
        script = "CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2; END; CALL p()"
        report = evaluator.evaluate(replace(TASKS[0], sol_sql=("SELECT 1",)), [script])
        assert report.reward == 0.0  # scored, not a crash: one prediction, two statements


def test_the_explorer_solves_them_through_the_environment(my: MySetup, config: EvalConfig) -> None:
    episodes = evaluate_agent(TASKS, my.templates, make_agent("explorer"), eval_config=config)
    assert episodes.summary.overall.rate == 100.0
    first = episodes.trajectories[0]
    assert "MySQL" in first.messages[0]["content"]
    assert "SQLite" not in first.messages[0]["content"]


def test_the_stage4_environment_rewards_what_the_evaluator_scores(
    my: MySetup, config: EvalConfig
) -> None:
    tasks = {t.instance_id: t for t in TASKS}
    strict = replace(config, semantics=Semantics.STRICT)  # the RL reward's semantics
    with scoring_session(my.templates, replicas_per_db=2, eval_config=strict) as (pool, evaluator):
        session = ToolEnvSession(tasks, pool, evaluator)
        env = session.factory()
        for task in TASKS:
            row = {"prompt": [], "instance_id": task.instance_id, "db_id": "shop", "kind": "debug"}
            env.reset(**row)
            env.execute_sql("DELETE FROM audit")  # scratch space: the grading replica is fresh
            env.submit_solution(";\n".join(task.sol_sql))
            assert env.get_reward() == 1.0, task.instance_id
            env.reset(**row)
            env.submit_solution(";\n".join(task.issue_sql))
            assert env.get_reward() == evaluator.evaluate(task, list(task.issue_sql)).reward < 1.0
        assert session.stats.solved == len(TASKS)
        assert all("@" not in replica for _, replica in session.stats.leases)  # no password
        session.close()
