"""Synthesize SQL-debugging tasks from a user's database and correct SQL.

Each correct statement is parsed with sqlglot, mutated with a realistic bug
(`birdrl.data.mutations`) and rendered back: the bugged SQL becomes ``issue_sql``, the
original ``sol_sql``, and an issue text in the user's voice is written from a template per
bug family. SELECTs use the default test (result equality); UPDATE / DELETE / INSERT tasks get
a test case that checks the target table holds exactly the rows the correct statement leaves
(precomputed on a scratch copy of the database).

Filters, cheapest first: the statement must parse, run and (SELECT) return rows; sqlglot's
round trip must not change its result; a mutant must differ in text, run without error and
fail the task's test on a scratch copy; finally every candidate is validated with the
evaluator (`birdrl.evaluation.suite.validate_tasks`): the bugged SQL fails, the original
passes, each on a fresh replica. Everything is seeded: same inputs, same tasks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlglot import exp
from sqlglot.errors import SqlglotError

from birdrl import __version__
from birdrl.data.mutations import FAMILIES, Mutation, mutations_for, parse_sql, render_sql
from birdrl.data.sql_examples import SQLExample, SynthesisError, load_sql_examples, strip_semicolon
from birdrl.db.statements import split_statements
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.helpers import (
    MAX_ROWS,
    ex_base,
    remove_comments,
    remove_distinct,
    remove_round,
)
from birdrl.evaluation.suite import validate_tasks
from birdrl.tasks.model import Category, Task

__all__ = [
    "SQLExample",
    "SynthesisError",
    "SynthesisResult",
    "load_sql_examples",
    "synthesize_tasks",
]

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``; stages: ``"mutating"`` (per input statement), then in
rounds ``"trying"`` (mutants on a scratch copy, per usable statement) and ``"validating"``
(per candidate task)."""


@dataclass
class SynthesisResult:
    """Synthesized tasks, what was rejected and why."""

    db_id: str
    tasks: list[Task] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    """Rejection reason -> count (per input statement or per mutant, see the card)."""
    by_family: Counter[str] = field(default_factory=Counter)
    """Bug family -> tasks kept."""
    examples: int = 0
    seed: int = 0
    per_sql: int = 2
    families: tuple[str, ...] = FAMILIES

    @property
    def by_category(self) -> Counter[str]:
        return Counter(t.category.value for t in self.tasks)

    def write(self, out_dir: str | Path) -> Path:
        """``tasks.jsonl`` (the official format, one task per line) and a ``README.md`` card
        in `out_dir`; returns the jsonl path."""
        out = Path(out_dir).expanduser()
        out.mkdir(parents=True, exist_ok=True)
        path = out / "tasks.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for task in self.tasks:
                f.write(json.dumps(task.to_record(), ensure_ascii=False) + "\n")
        (out / "README.md").write_text(self.card(), encoding="utf-8")
        return path

    def card(self) -> str:
        """The dataset card (markdown)."""
        mutations = Counter(str(t.extra.get("mutation")) for t in self.tasks)
        lines = [
            f"# Synthesized SQL-debugging tasks: `{self.db_id}`",
            "",
            f"{len(self.tasks)} tasks in the BIRD-CRITIC format, made by injecting bugs into "
            f"{self.examples} correct SQL statements on database `{self.db_id}` (seed "
            f"{self.seed}, at most {self.per_sql} per statement; families: "
            f"{', '.join(self.families)}) with birdrl {__version__}.",
            "",
            "`issue_sql` is the bugged statement, `sol_sql` the original. Extra fields: "
            "`bug_family`, `mutation`, `source` (where the original came from). Query tasks "
            "use the default test (result equality); Management tasks a test case that checks "
            "the changed table holds exactly the rows the original statement leaves.",
            "",
            'Load with `birdrl.tasks.load_tasks("tasks.jsonl")` or '
            '`datasets.load_dataset("json", data_files="tasks.jsonl", split="train")`.',
            "",
            "## Counts",
            "",
            *_md_table(("bug family", "tasks"), sorted(self.by_family.items())),
            "",
            *_md_table(("mutation", "tasks"), sorted(mutations.items())),
            "",
            *_md_table(("category", "tasks"), sorted(self.by_category.items())),
            "",
            "## Filters",
            "",
            "* the original is one SELECT / UPDATE / DELETE / INSERT statement that parses, runs "
            "and (SELECT) returns rows; sqlglot's round trip does not change its result;",
            "* a mutant differs in text from the original, runs without error and fails the "
            "task's test on a scratch copy of the database;",
            "* every task is validated with the evaluator: the bugged SQL fails its tests and "
            "the original passes them, each on a fresh replica.",
            "",
            "## Rejections",
            "",
            *(
                _md_table(("reason", "count"), sorted(self.rejected.items()))
                if self.rejected
                else ["none"]
            ),
        ]
        return "\n".join(lines) + "\n"


def _md_table(header: tuple[str, str], rows: Sequence[tuple[str, int]]) -> list[str]:
    return [
        f"| {header[0]} | {header[1]} |",
        "|---|---:|",
        *(f"| {k} | {v} |" for k, v in rows),
    ]


# -- execution on a scratch copy -------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """The outcome of one statement on the scratch copy."""

    error: str | None = None
    rows: int = 0
    """Rows returned (SELECT, cut at the evaluator's limit) or changed (DML)."""
    state: tuple[int, str] | None = None
    """DML: the target table's row count and digest afterwards."""


class _Scratch:
    """A private copy of the database for trial runs; DML runs inside a savepoint that is
    rolled back, so the copy never changes."""

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
        self.conn.set_progress_handler(self._tick, 1000)

    def _tick(self) -> int:
        return int(time.monotonic() > self._deadline)

    @contextlib.contextmanager
    def _limit(self, statements: int = 1) -> Iterator[None]:
        self._deadline = time.monotonic() + self.timeout_s * statements
        try:
            yield
        finally:
            self._deadline = float("inf")

    def select(self, sql: str) -> _Run:
        try:
            with self._limit():
                rows = self.conn.execute(sql).fetchmany(MAX_ROWS)
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            return _Run(error=_error_text(exc))
        return _Run(rows=len(rows))

    def passes_default_test(self, pred: str, sol: str, order: bool) -> bool:
        """The default test, as the evaluator runs it (comments, DISTINCT, ROUND stripped)."""

        def strip(sql: str) -> list[str]:
            return remove_round(remove_distinct(remove_comments([sql])))

        with self._limit(2):
            return ex_base(strip(pred), strip(sol), self.path, self.conn, {"order": order}) == 1

    def dml(self, sql: str, table: str) -> _Run:
        self.conn.execute("SAVEPOINT birdrl_synth")
        try:
            with self._limit(2):
                changed = self.conn.execute(sql).rowcount
                rows = self.conn.execute(_select_all(table)).fetchall()
            return _Run(rows=changed, state=(len(rows), table_digest(rows)))
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            return _Run(error=_error_text(exc))
        finally:
            self.conn.execute("ROLLBACK TO birdrl_synth")
            self.conn.execute("RELEASE birdrl_synth")

    def close(self) -> None:
        self.conn.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> _Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return "timed out" if text == "interrupted" else f"{type(exc).__name__}: {text}"


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


def _state_test(table: str, state: tuple[int, str]) -> str:
    label = table.replace('"', "").replace("{", "").replace("}", "").replace("\\", "")
    return _STATE_TEST.format(
        label=label, select=_select_all(table), count=state[0], digest=state[1]
    )


# -- the issue text --------------------------------------------------------------------------


_OPENERS = {
    "select": (
        "My query is supposed to {goal}, but the results look wrong.",
        "I wrote this query to {goal}. It runs without errors, but the output is not right.",
        "I need to {goal}. My SQL runs, but I don't trust what it returns.",
    ),
    "dml": (
        "My statement is supposed to {goal}, but it does not do the right thing.",
        "I wrote this statement to {goal}. It runs without errors, but the data afterwards "
        "is not what I expected.",
    ),
}
_HINTS = {
    "wrong_join": (
        "I suspect something in how the tables are joined.",
        "Maybe the joins are not doing what I think?",
    ),
    "aggregation": (
        "The aggregated numbers don't match what I get when I check a few rows by hand.",
        "The totals / counts look off.",
    ),
    "grouping": (
        "The rows don't seem to be grouped the way I want.",
        "I get fewer groups than I expect.",
    ),
    "null_handling": (
        "Rows with missing (NULL) values seem to be handled wrongly.",
        "I think it has to do with the NULLs in the data.",
    ),
    "date_function": (
        "Something seems off with how I handle the dates.",
        "The date calculations don't give the periods I expect.",
    ),
    "integer_division": (
        "The ratios come out as whole numbers (often 0) instead of fractions.",
        "The computed percentages / averages look truncated.",
    ),
    "limit_off_by_one": (
        "I don't get exactly the rows I asked for.",
        "It's off by one somewhere, I think.",
    ),
    "comparison_boundary": (
        "Rows right at the edge of my filter seem to be treated wrongly.",
        "The boundary values of my condition are not handled the way I want.",
    ),
    "order_direction": (
        "The ordering looks backwards.",
        "I get the rows from the wrong end of the ranking.",
    ),
    "update_scope": (
        "It touches rows it should leave alone.",
        "It changes far more rows than it should.",
    ),
}
_CLOSERS = (
    "What is wrong with my SQL, and how do I fix it?",
    "How should I fix it?",
    "Can you find the bug and correct the SQL?",
)


def _describe(tree: exp.Expression) -> str:
    """A plain-words goal for a statement without a question."""
    if isinstance(tree, exp.Update | exp.Delete | exp.Insert):
        table = _target_table(tree) or "the table"
        if isinstance(tree, exp.Update):
            columns = [e.this.name for e in tree.expressions if isinstance(e, exp.EQ)]
            scope = "on the right rows of" if tree.args.get("where") is not None else "in"
            return f"set {_listing(columns) or 'some columns'} {scope} {table}"
        if isinstance(tree, exp.Delete):
            return f"delete the right rows from {table}"
        return f"insert the right rows into {table}"
    outputs: list[str] = []
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    for proj in select.expressions if select is not None else []:
        if proj.alias:
            outputs.append(proj.alias)
        elif isinstance(proj, exp.Column | exp.Star):
            outputs.append("all columns" if proj.is_star else proj.name)
        else:
            text = render_sql(proj)
            outputs.append(text if len(text) <= 40 else "a computed value")
    ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
    tables = list(
        dict.fromkeys(t.name for t in tree.find_all(exp.Table) if t.name and t.name not in ctes)
    )
    goal = f"return {_listing(outputs) or 'rows'}"
    return goal + (f" from {_listing(tables)}" if tables else "")


def _listing(items: Sequence[str]) -> str:
    items = list(dict.fromkeys(items))
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _issue_text(
    example: SQLExample,
    tree: exp.Expression,
    family: str,
    original: _Run,
    bugged: _Run,
    rng: random.Random,
) -> str:
    dml = isinstance(tree, exp.Update | exp.Delete | exp.Insert)
    if example.question:
        goal = f'answer the question "{example.question.strip()}"'
        if example.evidence:
            goal += f" (background: {example.evidence.strip()})"
    else:
        goal = _describe(tree)
    parts = [rng.choice(_OPENERS["dml" if dml else "select"]).format(goal=goal)]
    if dml:
        table = _target_table(tree) or "the table"
        verb, preposition = (
            ("updates", "of")
            if isinstance(tree, exp.Update)
            else ("deletes", "from")
            if isinstance(tree, exp.Delete)
            else ("inserts", "into")
        )
        if bugged.rows != original.rows:
            parts.append(
                f"It {verb} {bugged.rows} row{_s(bugged.rows)} {preposition} {table}, but I "
                f"expected {original.rows}."
            )
    elif bugged.rows != original.rows:
        parts.append(
            f"It returns {bugged.rows} row{_s(bugged.rows)}, but I expected {original.rows}."
        )
    elif family == "order_direction":
        parts.append(f"It returns {bugged.rows} row{_s(bugged.rows)}, but not in the order I need.")
    else:
        parts.append(f"It returns {bugged.rows} row{_s(bugged.rows)}, but some values are wrong.")
    if family == "update_scope" and bugged.rows < original.rows:
        parts.append("It misses rows it should change.")
    elif family == "update_scope" and bugged.rows == original.rows:
        parts.append("It changes the wrong rows.")
    else:
        parts.append(rng.choice(_HINTS.get(family, ("",))))
    parts.append(rng.choice(_CLOSERS))
    return " ".join(p for p in parts if p)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _target_table(tree: exp.Expression) -> str | None:
    target = tree.this
    if isinstance(target, exp.Schema):
        target = target.this
    return target.name if isinstance(target, exp.Table) and target.name else None


# -- synthesis -------------------------------------------------------------------------------


@dataclass
class _Candidate:
    example: int
    mutation: Mutation
    task: Task


@dataclass
class _Source:
    """One usable input statement and the mutants still to try."""

    index: int
    example: SQLExample
    tree: exp.Expression
    sol: str
    original: _Run
    pending: list[tuple[Mutation, exp.Expression]]
    kept: int = 0


def synthesize_tasks(
    db_path: str | Path,
    sqls: Sequence[SQLExample],
    *,
    db_id: str | None = None,
    per_sql: int = 2,
    seed: int = 0,
    families: Sequence[str] | None = None,
    config: EvalConfig | None = None,
    progress: Progress | None = None,
) -> SynthesisResult:
    """Make up to `per_sql` debugging tasks from each correct statement of `sqls` on the
    database `db_path` (its ``db_id`` defaults to the file's stem), one bug each, preferring
    different bug families. Deterministic for a given `seed`."""
    path = Path(db_path).expanduser()
    if not path.is_file():
        raise SynthesisError(f"database not found: {path}")
    if per_sql < 1:
        raise SynthesisError(f"per_sql must be >= 1, got {per_sql}")
    try:
        mutations = mutations_for(families)
    except ValueError as exc:
        raise SynthesisError(str(exc)) from None
    db_id = db_id or path.stem
    config = config or EvalConfig()
    result = SynthesisResult(
        db_id,
        examples=len(sqls),
        seed=seed,
        per_sql=per_sql,
        families=tuple(dict.fromkeys(m.family for m in mutations)),
    )
    candidates: list[_Candidate] = []
    with _Scratch(path, config.statement_timeout_s) as scratch:
        sources: list[_Source] = []
        for index, example in enumerate(sqls):
            source = _prepare(index, example, db_id, scratch, mutations, seed, result.rejected)
            if source is not None:
                sources.append(source)
            if progress is not None:
                progress("mutating", index + 1, len(sqls))
        counter = 0
        while True:
            batch: list[_Candidate] = []
            for done, source in enumerate(sources, start=1):
                if progress is not None:
                    progress("trying", done, len(sources))
                need = per_sql - source.kept
                while need > 0 and source.pending:
                    mutation, mutant = source.pending.pop(0)
                    task = _try(source, mutation, mutant, db_id, counter, scratch, seed, result)
                    if task is not None:
                        counter += 1
                        batch.append(_Candidate(source.index, mutation, task))
                        need -= 1
            if not batch:
                break
            kept = _validate(batch, path, db_id, config, result.rejected, progress)
            for candidate in kept:
                sources[_position(sources, candidate.example)].kept += 1
            candidates.extend(kept)
    candidates.sort(key=lambda c: (c.example, c.task.instance_id))
    for n, candidate in enumerate(candidates, start=1):
        result.tasks.append(replace(candidate.task, instance_id=f"synth_{db_id}_{n:04d}"))
        result.by_family[candidate.mutation.family] += 1
    return result


def _position(sources: Sequence[_Source], index: int) -> int:
    return next(i for i, s in enumerate(sources) if s.index == index)


_STATEMENT_KEYWORDS = {"SELECT", "WITH", "VALUES", "UPDATE", "DELETE", "INSERT", "REPLACE"}


def _prepare(
    index: int,
    example: SQLExample,
    db_id: str,
    scratch: _Scratch,
    mutations: Sequence[Mutation],
    seed: int,
    rejected: Counter[str],
) -> _Source | None:
    """Check one input statement and list its mutants in trial order; None (with a counted
    reason) if it cannot be used."""
    if example.db_id is not None and example.db_id != db_id:
        rejected["statement is for another database"] += 1
        return None
    statements = split_statements(example.sql)
    if len(statements) != 1:
        rejected["not exactly one SQL statement"] += 1
        return None
    sol = strip_semicolon(statements[0])
    words = remove_comments([sol])[0].lstrip("( \t\r\n").split(None, 1)
    if not words or words[0].upper() not in _STATEMENT_KEYWORDS:
        rejected["original is not a SELECT, UPDATE, DELETE or INSERT"] += 1
        return None
    try:
        tree = parse_sql(sol)
    except (SqlglotError, ValueError):
        rejected["original does not parse"] += 1
        return None
    if not isinstance(tree, exp.Query | exp.Update | exp.Delete | exp.Insert):
        rejected["original is not a SELECT, UPDATE, DELETE or INSERT"] += 1
        return None
    original = _run(scratch, tree, sol)
    if original.error is not None:
        rejected["original fails to execute"] += 1
        return None
    if original.state is None and original.rows == 0:
        rejected["original returns no rows (the default test needs rows)"] += 1
        return None
    if original.state is None and not scratch.passes_default_test(sol, sol, False):
        rejected["original fails the default test"] += 1
        return None
    rendered = render_sql(tree, pretty=True)
    again = _run(scratch, tree, rendered)
    if again.error is not None or not _same(scratch, tree, again, original, rendered, sol):
        rejected["sqlglot round trip changes the original's result"] += 1
        return None
    mutants = [
        (m, mutant)
        for m in mutations
        if (mutant := m.apply(tree, random.Random(f"{seed}:{index}:{m.name}"))) is not None
    ]
    if not mutants:
        rejected["no mutation applicable"] += 1
        return None
    random.Random(f"{seed}:{index}").shuffle(mutants)
    return _Source(index, example, tree, sol, original, _by_family_round_robin(mutants))


def _by_family_round_robin(
    mutants: list[tuple[Mutation, exp.Expression]],
) -> list[tuple[Mutation, exp.Expression]]:
    """One mutant of each family in turn, so the first tasks of a statement differ in family."""
    queues: dict[str, list[tuple[Mutation, exp.Expression]]] = {}
    for item in mutants:
        queues.setdefault(item[0].family, []).append(item)
    out: list[tuple[Mutation, exp.Expression]] = []
    while any(queues.values()):
        for queue in queues.values():
            if queue:
                out.append(queue.pop(0))
    return out


def _run(scratch: _Scratch, tree: exp.Expression, sql: str) -> _Run:
    if isinstance(tree, exp.Query):
        return scratch.select(sql)
    table = _target_table(tree)
    if table is None:
        return _Run(error="cannot tell which table the statement changes")
    return scratch.dml(sql, table)


def _same(
    scratch: _Scratch, tree: exp.Expression, a: _Run, b: _Run, a_sql: str, b_sql: str
) -> bool:
    if a.state is not None or b.state is not None:
        return a.state == b.state
    order = isinstance(tree, exp.Query) and tree.args.get("order") is not None
    return scratch.passes_default_test(a_sql, b_sql, order)


def _try(
    source: _Source,
    mutation: Mutation,
    mutant: exp.Expression,
    db_id: str,
    counter: int,
    scratch: _Scratch,
    seed: int,
    result: SynthesisResult,
) -> Task | None:
    """Check one mutant on the scratch copy; the candidate task, or None (reason counted)."""
    if render_sql(mutant) == render_sql(source.tree):
        result.rejected["mutant identical to the original"] += 1
        return None
    issue = render_sql(mutant, pretty=True)
    bugged = _run(scratch, source.tree, issue)
    if bugged.error is not None:
        result.rejected["bugged SQL fails to execute"] += 1
        return None
    order = mutation.family == "order_direction" and source.tree.args.get("order") is not None
    dml = source.original.state is not None
    if dml:
        same = bugged.state == source.original.state
    else:
        same = scratch.passes_default_test(issue, source.sol, order)
    if same:
        result.rejected["bugged SQL gives the original's result"] += 1
        return None
    rng = random.Random(f"{seed}:{source.index}:{mutation.name}:text")
    table = _target_table(source.tree)
    tests: tuple[str, ...] = ()
    if dml and table is not None and source.original.state is not None:
        tests = (_state_test(table, source.original.state),)
    return Task(
        instance_id=f"synth_{db_id}_candidate_{counter:06d}",
        db_id=db_id,
        query=_issue_text(
            source.example, source.tree, mutation.family, source.original, bugged, rng
        ),
        issue_sql=(issue,),
        sol_sql=(source.sol,),
        test_cases=tests,
        conditions={"order": order},
        category=Category.MANAGEMENT if dml else Category.QUERY,
        extra={
            "bug_family": mutation.family,
            "mutation": mutation.name,
            "source": source.example.source or f"statement {source.index + 1}",
        },
    )


_VALIDATION_REASONS = (
    ("the issue SQL passes", "bugged SQL passes the tests (evaluator)"),
    ("the solution fails", "original fails its own tests (evaluator)"),
)


def _validate(
    batch: Sequence[_Candidate],
    db_path: Path,
    db_id: str,
    config: EvalConfig,
    rejected: Counter[str],
    progress: Progress | None,
) -> list[_Candidate]:
    done = 0

    def advance(_report: Any) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress("validating", done, len(batch))

    results = validate_tasks([c.task for c in batch], {db_id: db_path}, config, progress=advance)
    broken = [r for r in results if r.reason.startswith("evaluation failed")]
    if broken:  # an infrastructure failure is not a verdict on the task: stop, say why
        raise SynthesisError(
            f"validating {len(broken)} of {len(batch)} candidate tasks on {db_id} failed: "
            f"{broken[0].reason}"
        )
    kept = []
    for candidate, outcome in zip(batch, results, strict=True):
        if outcome.valid:
            kept.append(candidate)
            continue
        reason = next(
            (label for prefix, label in _VALIDATION_REASONS if outcome.reason.startswith(prefix)),
            f"invalid: {outcome.reason}",
        )
        rejected[reason] += 1
    return kept
