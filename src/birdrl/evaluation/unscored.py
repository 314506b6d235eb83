"""Tasks that could not be scored: an infrastructure failure (a database server refusing
the replica user, a pool that cannot lend a replica) is not a wrong answer. `birdrl eval`
says how many tasks it could not score, shows the first error with a hint where the cause
is recognised, and exits with `UNSCORED_EXIT`, so a misconfigured server never passes as a
benchmark number. The same holds for episodes a predictions-only run could not finish: they
are named, and left out of the predictions file so that a second run does them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from birdrl.evaluation.metrics import Summary

__all__ = ["UNSCORED_EXIT", "cause_hint", "unscored_message", "unwritten_message"]

UNSCORED_EXIT = 3
"""`birdrl eval`'s exit status when some tasks could not be scored (or, for predictions,
run)."""

_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Access denied for user ''@|Access denied for user '[^']*'@'localhost'", re.I),
        "a MySQL-family server matched the replica user to another account, usually the "
        "anonymous ''@'localhost' that mariadb-install-db creates: remove it "
        "(DROP USER ''@'localhost'; DROP USER ''@'<hostname>'; or mysql_secure_installation), "
        "or let birdrl start a throwaway server (no --mysql-dsn)",
    ),
    (
        re.compile(r"connection refused|could not connect|can't connect|Lost connection", re.I),
        "the database server is not reachable: check that it runs and the DSN's host and port",
    ),
    (
        re.compile(r"password authentication failed|authentication failed", re.I),
        "the server refused the DSN's credentials",
    ),
    (
        re.compile(r"permission denied|command denied", re.I),
        "the DSN's account lacks a privilege birdrl needs to create replicas "
        "(docs/postgresql.md, docs/mysql.md)",
    ),
    (
        re.compile(r"No space left on device|disk full", re.I),
        "the disk holding the replica pool is full",
    ),
)


def cause_hint(error: str) -> str | None:
    """The likely cause of an infrastructure error and its fix, when recognised."""
    for pattern, hint in _CAUSES:
        if pattern.search(error):
            return hint
    return None


def unscored_message(summary: Summary) -> str | None:
    """What to tell the user when tasks of `summary` could not be scored (None if all
    were): how many, that the success rate counts them as failures, the first error and,
    where recognised, its cause."""
    if not summary.infra_errors:
        return None
    first = summary.first_infra_error or "(no message)"
    lines = [
        f"{summary.infra_errors} of {summary.overall.total} task(s) could not be scored "
        "(infrastructure errors): the success rate above counts them as failures and is "
        "not a benchmark result.",
        f"first error: {first}",
    ]
    hint = cause_hint(first)
    lines.append(
        f"likely cause: {hint}"
        if hint
        else "hint: fix the database setup and run again; --json records every task's error"
    )
    return "\n".join(lines)


def unwritten_message(failed: Sequence[str], first_error: str | None, path: Path) -> str | None:
    """What to tell the user when episodes of a resumable run (`birdrl eval --agent
    --export-predictions`) ended in an infrastructure failure (None if none did): they are
    not in the predictions file at `path`, so running the same command again does them."""
    if not failed:
        return None
    shown = ", ".join(repr(i) for i in failed[:5]) + (", ..." if len(failed) > 5 else "")
    first = first_error or "(no message)"
    hint = cause_hint(first)
    return "\n".join(
        [
            f"{len(failed)} episode(s) ended in an infrastructure failure and are not in "
            f"{path} ({shown}): run the same command again to do them.",
            f"first error: {first}",
            *([f"likely cause: {hint}"] if hint else []),
        ]
    )
