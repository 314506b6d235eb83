"""Tasks written for another engine, named before they are scored.

A task set scored in a dialect it was not written for fails every task: a PostgreSQL task's
SQL does not run on SQLite, and its ``test_case(pred_sqls, sol_sqls, db_name, conn)``
cannot take the ``conditions=`` the SQLite evaluator passes, so each test raises and the
run reports 0% with no invalid task. Two checks refuse such a set with one error instead:

* `tasks_for_dialect`: the records' ``dialect`` field (published files carry one). Tasks
  labelled with another engine are refused with the counts per dialect, except SQLite
  tasks on a server dialect that carries them over from their database files
  (`birdrl.dialects.carry`), and a mixed set scored over several dialects at once, where
  each dialect takes its own tasks.
* `check_test_cases`: tasks whose every test case defines a ``test_case`` that cannot take
  the arguments the dialect's official evaluator passes (`OfficialCall`), or calls another
  engine's query helper (``perform_query_on_postgresql_databases``), named with the
  signature found and the dialects it fits.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from birdrl.dialects.base import DialectError, OfficialCall
from birdrl.dialects.registry import dialect_names, get_dialect

if TYPE_CHECKING:
    from birdrl.tasks.benchmark import Benchmark
    from birdrl.tasks.model import Task

__all__ = ["CARRIED_FROM", "check_test_cases", "foreign_test_case", "tasks_for_dialect"]

CARRIED_FROM = "sqlite"
"""The dialect whose task sets the server dialects carry over (`birdrl.dialects.carry`)."""

_SHOWN = 5
"""Tasks an error names, at most."""


def _title(label: str, tasks: Iterable[Task]) -> str:
    """How a ``dialect`` label reads in a message: the registered dialect's title, else the
    label as the first record wrote it."""
    if label in dialect_names():
        return get_dialect(label).title
    for task in tasks:
        if task.dialect == label:
            return str(task.extra["dialect"]).strip()
    return label


def tasks_for_dialect(
    bench: Benchmark, dialect: str, *, run_dialects: Sequence[str] = ()
) -> list[Task]:
    """The debugging tasks of `bench` that a run in `dialect` scores (see the module
    docstring); `run_dialects` are all the dialects of the run, when it scores several.
    Unlabelled tasks are scored in every dialect. Raises `DialectError` with the counts
    per dialect when the set holds tasks written for another engine."""
    spec = get_dialect(dialect)
    tasks = bench.debugging_tasks()
    counts = Counter(t.dialect for t in tasks if t.dialect is not None)
    others = {label for label in counts if label != spec.name}
    if not others:
        return tasks
    carried = others == {CARRIED_FROM} and spec.databases_on_server and spec.name not in counts
    if carried and bench.databases:
        return tasks
    routed = len(run_dialects) > 1 and set(counts) <= set(run_dialects)
    if routed and spec.name in counts:
        return [t for t in tasks if t.dialect in (spec.name, None)]
    held = ", ".join(f"{n} {_title(label, tasks)}" for label, n in counts.most_common())
    if carried:
        raise DialectError(
            f"{bench.name} holds {held} tasks: {spec.title} scores them by carrying them "
            "over from their database files; give their database root (--db-root)"
        )
    if routed:
        raise DialectError(
            f"{bench.name} holds {held} tasks and no {spec.title} task: leave "
            f"{spec.name} out of the dialects asked for"
        )
    registered = [label for label, _ in counts.most_common() if label in dialect_names()]
    ways = []
    if len(registered) == len(counts) == 1:
        ways.append(f"run them with --dialect {registered[0]}")
    elif len(registered) == len(counts):
        ways.append(f"score each in its own dialect with --dialects {','.join(registered)}")
    ways.append("keep each dialect's tasks in a file of their own (split by 'dialect')")
    unregistered = [_title(label, tasks) for label in counts if label not in dialect_names()]
    unknown = (
        f"; no registered dialect runs {', '.join(unregistered)} tasks" if unregistered else ""
    )
    raise DialectError(
        f"{bench.name} holds {held} tasks (their 'dialect' field), and a {spec.title} run "
        f"scores only tasks written for {spec.title}{unknown}: {', or '.join(ways)}"
    )


def check_test_cases(tasks: Iterable[Task], dialect: str) -> None:
    """Raise `DialectError` naming the tasks (at most five, and how many in all) whose test
    cases are all written for another engine than `dialect` (`foreign_test_case`). A task
    with one test of its own is scored as its official evaluator would: a foreign test
    among its own fails there too (the fidelity suite has such cases)."""
    spec = get_dialect(dialect)
    found = []
    for task in tasks:
        reasons = [foreign_test_case(source, dialect) for source in task.test_cases]
        if reasons and all(reasons):
            found.append(f"{task.instance_id!r} test_cases[0] {reasons[0]}")
    if not found:
        return
    more = f" (and {len(found) - _SHOWN} more)" if len(found) > _SHOWN else ""
    raise DialectError(
        f"{len(found)} task(s) have test cases written for another engine than "
        f"{spec.title}, whose evaluator calls {spec.official_call.shown}{more}: "
        + "; ".join(found[:_SHOWN])
    )


def foreign_test_case(source: str, dialect: str) -> str | None:
    """Why `dialect`'s official evaluator cannot run the test case `source` as written
    (its ``test_case`` does not take the arguments passed, or it calls another engine's
    query helper), or None. A source that does not parse or defines no ``test_case`` is
    left to the evaluator, which reports it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_case"]
    if not defs:
        return None
    test = defs[-1]
    own = get_dialect(dialect)
    shown = f"test_case({ast.unparse(test.args)})"
    if not _accepts(test.args, own.official_call):
        fits = [
            get_dialect(name).title
            for name in dialect_names()
            if name != own.name and _accepts(test.args, get_dialect(name).official_call)
        ]
        belongs = f", the {' and '.join(fits)} signature" if fits else ""
        return f"defines {shown}{belongs}"
    helpers = {
        get_dialect(name).official_call.query_helper: get_dialect(name).title
        for name in dialect_names()
    }
    helpers.pop(own.official_call.query_helper, None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in helpers:
            return f"calls {node.id}, the {helpers[node.id]} test API"
    return None


def _accepts(args: ast.arguments, call: OfficialCall) -> bool:
    """Whether a function with parameters `args` can be called as `call` calls it."""
    params = [*args.posonlyargs, *args.args]
    first_default = len(params) - len(args.defaults)
    if call.positional > len(params) and args.vararg is None:
        return False
    by_position = {p.arg for p in params[: call.positional]}
    named = {p.arg for p in args.args[max(0, call.positional - len(args.posonlyargs)) :]}
    named |= {p.arg for p in args.kwonlyargs}
    for keyword in call.keywords:
        if keyword in by_position or (keyword not in named and args.kwarg is None):
            return False
    for index, param in enumerate(params[call.positional :], start=call.positional):
        passed = param.arg in call.keywords and index >= len(args.posonlyargs)
        if index < first_default and not passed:
            return False
    required = [p.arg for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    return all(name in call.keywords for name in required)
