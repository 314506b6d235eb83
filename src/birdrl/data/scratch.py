"""Trial runs for task synthesis on a private copy of the user's database, and the state test
that Management tasks carry.

Synthesis runs every original and every mutant before it validates anything with the
evaluator; these runs are cheap filters, so they go straight to `sqlite3` on one scratch
copy rather than through replicas. DML runs inside a savepoint that is rolled back, so the
copy never changes. The state test recomputes `table_digest` after the prediction, which is
why both live here.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from birdrl.db.sandbox import ErrorKind
from birdrl.dialects.sqlite.helpers import (
    MAX_ROWS,
    ex_base,
    remove_comments,
    remove_distinct,
    remove_round,
)

__all__ = ["Run", "Scratch", "state_test", "table_digest"]


@dataclass(frozen=True)
class Run:
    """The outcome of one statement on the scratch copy."""

    rows: int = 0
    """Rows returned (SELECT, cut at the evaluator's limit) or changed (DML)."""
    state: tuple[int, str] | None = None
    """DML: the target table's row count and digest afterwards."""
    error: str | None = None
    """What went wrong, in words; None when the statement ran."""
    error_kind: ErrorKind | None = None
    """`ErrorKind.TIMEOUT` when the time limit stopped it, else `ErrorKind.SQL`."""

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class Scratch:
    """A private copy of the database for trial runs, each statement under the evaluator's
    per-statement time limit."""

    def __init__(self, db_path: Path, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._dir = tempfile.mkdtemp(prefix="birdrl-synth-")
        self.path = Path(self._dir) / db_path.name
        try:
            source = sqlite3.connect(f"file:{quote(str(db_path.resolve()))}?mode=ro", uri=True)
            target = sqlite3.connect(self.path)
            try:
                source.backup(target)
            finally:
                source.close()
                target.close()
            self.conn = sqlite3.connect(self.path, isolation_level=None)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self._deadline = float("inf")
        self._timed_out = False
        self.conn.set_progress_handler(self._tick, 1000)

    def _tick(self) -> int:
        """SQLite's progress handler: a non-zero return interrupts the statement; remembering
        that we did is how a timeout is told from an SQL error."""
        if time.monotonic() > self._deadline:
            self._timed_out = True
            return 1
        return 0

    @contextlib.contextmanager
    def _limit(self, statements: int = 1) -> Iterator[None]:
        self._deadline = time.monotonic() + self.timeout_s * statements
        self._timed_out = False
        try:
            yield
        finally:
            self._deadline = float("inf")

    def _failed(self, exc: BaseException) -> Run:
        if self._timed_out:
            return Run(error="timed out", error_kind=ErrorKind.TIMEOUT)
        return Run(error=f"{type(exc).__name__}: {exc}", error_kind=ErrorKind.SQL)

    def run(self, sql: str, table: str | None) -> Run:
        """Run `sql` as a query when `table` is None, else as DML that changes `table`."""
        return self.select(sql) if table is None else self.dml(sql, table)

    def select(self, sql: str) -> Run:
        try:
            with self._limit():
                rows = self.conn.execute(sql).fetchmany(MAX_ROWS)
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            return self._failed(exc)
        return Run(rows=len(rows))

    def dml(self, sql: str, table: str) -> Run:
        self.conn.execute("SAVEPOINT birdrl_synth")
        try:
            with self._limit(2):
                changed = self.conn.execute(sql).rowcount
                rows = self.conn.execute(_select_all(table)).fetchall()
            return Run(rows=changed, state=(len(rows), table_digest(rows)))
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            return self._failed(exc)
        finally:
            self.conn.execute("ROLLBACK TO birdrl_synth")
            self.conn.execute("RELEASE birdrl_synth")

    def passes_default_test(self, pred: str, sol: str, order: bool) -> bool:
        """The default test, as the evaluator runs it (comments, DISTINCT, ROUND stripped)."""

        def strip(sql: str) -> list[str]:
            return remove_round(remove_distinct(remove_comments([sql])))

        with self._limit(2):
            return ex_base(strip(pred), strip(sol), self.path, self.conn, {"order": order}) == 1

    def close(self) -> None:
        self.conn.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _select_all(table: str) -> str:
    return 'SELECT * FROM "' + table.replace('"', '""') + '"'


def table_digest(rows: Sequence[Sequence[Any]]) -> str:
    """An order-free digest of a table's rows (floats rounded to 6 places); the state test
    case computes the same expression."""
    lines = sorted(repr(tuple(round(v, 6) if isinstance(v, float) else v for v in r)) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


_STATE_TEST = '''\
def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):
    """{label} must hold exactly the rows the correct statement leaves."""
    import hashlib

    rows = conn.execute({select!r}).fetchall()
    assert len(rows) == {count}, f"expected {count} rows in {label} afterwards, found {{len(rows)}}"
    lines = sorted(
        repr(tuple(round(v, 6) if isinstance(v, float) else v for v in r)) for r in rows
    )
    digest = hashlib.sha256("\\n".join(lines).encode()).hexdigest()
    assert digest == {digest!r}, "the rows of {label} differ from what the correct statement leaves"
'''


def state_test(table: str, state: tuple[int, str]) -> str:
    """The test case of a Management task: `table` must hold `state` (row count, digest)."""
    label = table.replace('"', "").replace("{", "").replace("}", "").replace("\\", "")
    return _STATE_TEST.format(
        label=label, select=_select_all(table), count=state[0], digest=state[1]
    )
