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

The trial runs and the state test are in `birdrl.data.scratch`, the issue text in
`birdrl.data.issue_text`; this module is the pipeline and its counted rejections.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError

from birdrl import __version__
from birdrl.data.issue_text import issue_text, target_table
from birdrl.data.mutations import FAMILIES, Mutation, mutations_for, parse_sql, render_sql
from birdrl.data.scratch import Run, Scratch, state_test
from birdrl.data.sql_examples import SQLExample, SynthesisError, load_sql_examples, strip_semicolon
from birdrl.db.statements import split_statements
from birdrl.dialects.sqlite.helpers import remove_comments
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.suite import ValidationResult, Verdict, validate_tasks
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
    table: str | None
    """The table the statement changes; None for a query."""
    original: Run
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
    with Scratch(path, config.statement_timeout_s) as scratch:
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
    scratch: Scratch,
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
    dml = not isinstance(tree, exp.Query)
    table = target_table(tree) if dml else None
    if dml and table is None:
        # without a plain target table there is no state to test: counted as a failed run
        rejected["original fails to execute"] += 1
        return None
    original = scratch.run(sol, table)
    if not original.ok:
        rejected["original fails to execute"] += 1
        return None
    if original.state is None and original.rows == 0:
        rejected["original returns no rows (the default test needs rows)"] += 1
        return None
    if original.state is None and not scratch.passes_default_test(sol, sol, False):
        rejected["original fails the default test"] += 1
        return None
    rendered = render_sql(tree, pretty=True)
    again = scratch.run(rendered, table)
    if not again.ok or not _same(scratch, tree, again, original, rendered, sol):
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
    return _Source(index, example, tree, sol, table, original, _by_family_round_robin(mutants))


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


def _same(scratch: Scratch, tree: exp.Expression, a: Run, b: Run, a_sql: str, b_sql: str) -> bool:
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
    scratch: Scratch,
    seed: int,
    result: SynthesisResult,
) -> Task | None:
    """Check one mutant on the scratch copy; the candidate task, or None (reason counted)."""
    if render_sql(mutant) == render_sql(source.tree):
        result.rejected["mutant identical to the original"] += 1
        return None
    issue = render_sql(mutant, pretty=True)
    bugged = scratch.run(issue, source.table)
    if not bugged.ok:
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
    tests: tuple[str, ...] = ()
    if source.table is not None and source.original.state is not None:
        tests = (state_test(source.table, source.original.state),)
    return Task(
        instance_id=f"synth_{db_id}_candidate_{counter:06d}",
        db_id=db_id,
        query=issue_text(
            source.example, source.tree, mutation.family, source.original.rows, bugged.rows, rng
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


_REJECTED_AS: dict[Verdict, str] = {
    "issue_passes": "bugged SQL passes the tests (evaluator)",
    "solution_fails": "original fails its own tests (evaluator)",
}
"""The rejection label (as counted and printed) of a validation verdict."""


def rejection_labels(outcomes: Sequence[ValidationResult], db_id: str) -> list[str | None]:
    """The rejection label of each validated candidate, None for one that is kept. Raises
    `SynthesisError` if any evaluation itself failed: an infrastructure failure is no verdict
    on the task, so synthesis stops and says why instead of counting it as a rejection."""
    broken = [r for r in outcomes if r.verdict == "evaluation_failed"]
    if broken:
        raise SynthesisError(
            f"validating {len(broken)} of {len(outcomes)} candidate tasks on {db_id} failed: "
            f"{broken[0].reason}"
        )
    return [
        None if r.valid else _REJECTED_AS.get(r.verdict, f"invalid: {r.reason}") for r in outcomes
    ]


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
    kept = []
    for candidate, label in zip(batch, rejection_labels(results, db_id), strict=True):
        if label is None:
            kept.append(candidate)
        else:
            rejected[label] += 1
    return kept
