"""A conformance checker for SQL-Act environments (in the spirit of Gymnasium's
``check_env``): runs a short scripted episode and raises `EnvCheckError` naming the first
broken contract."""

from __future__ import annotations

from birdrl.env.sqlact import EnvError, SQLActEnv
from birdrl.env.tools import render_tool_call
from birdrl.env.types import StopReason
from birdrl.errors import BirdrlError
from birdrl.tasks.model import Task

__all__ = ["EnvCheckError", "check_env"]


class EnvCheckError(BirdrlError, AssertionError):
    """The environment broke one of its contracts."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise EnvCheckError(message)


def check_env(env: SQLActEnv, task: Task) -> None:
    """Reset, an unreadable turn, a query, a submission of the reference solution, then the
    end-of-episode contracts (no step after the end, idempotent close, lease released)."""
    messages = env.reset(task)
    _require(
        [m["role"] for m in messages] == ["system", "user"],
        "reset must return system + user messages",
    )
    _require(
        task.query.strip()[:40] in messages[1]["content"], "the user prompt must hold the issue"
    )
    traj = env.traj_id
    _require(traj in env.pool.active_leases(), "reset must lease a replica for the trajectory")
    bad = env.step("")
    _require(
        not bad.done and bad.stop_reason is None, "an unreadable turn must not end the episode"
    )
    _require(bool(bad.observation), "an unreadable turn must produce an observation")
    probe = env.step(render_tool_call("execute_sql", {"sql": "SELECT 41 + 1 AS answer"}))
    _require("42" in probe.observation and not probe.done, "execute_sql must show the result")
    final = env.step(render_tool_call("submit_solution", {"sql": list(task.sol_sql)}))
    _require(final.terminated and not final.truncated, "submit must terminate the episode")
    _require(
        final.stop_reason is StopReason.SUBMITTED, f"stop reason {final.stop_reason}, not SUBMITTED"
    )
    _require(0.0 <= final.reward <= 1.0, f"reward {final.reward} outside [0, 1]")
    _require(
        traj not in env.pool.active_leases(), "the lease must be released when the episode ends"
    )
    try:
        env.step("more")
    except EnvError:
        pass
    else:
        raise EnvCheckError("step after the end must raise EnvError")
    env.close()
    env.close()
