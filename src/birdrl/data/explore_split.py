"""The bundled explore splits: bugs whose fix needs a look at the data.

Each task is a short read-only query (a count, a list of ids, a sum or an average) that
filters ``column = '<literal>'`` with a literal the column does not hold: the stored value
in another case (``'drama'`` for ``'Drama'``), another spelling (``'Orthopaedics'``,
``'Art and Design'`` for ``'Art & Design'``), a label where a code is stored or the reverse
(``'Canada'`` for ``'CA'``, ``'AU'`` for ``'Australia'``) or another date format
(``'2021/01/08'``, or ``'2007-01-06'`` where ``'2007-01-06 00:00:00'`` is stored). The query
returns 0 / no rows / NULL; the reference fix is the same SQL with the stored value, and the
user issue states the intent (with the user's wrong value) and the symptom.

The stored value is in neither the tiny preset's prompt (the schema cut to 300 characters,
no sample rows) nor the default prompt (8000 characters, 3 sample rows per table): the
builder leaves out every value that shows there and raises if a built task's does
(`check_value_hidden`). That leaves out the status-like columns whose values a CHECK
constraint lists, since the default prompt's schema shows them. So a fix must come from a
look at the data, and each task carries that look in ``extra["explore_sql"]`` (``SELECT
DISTINCT column FROM table``, ordered and limited to 8 rows where the column holds more than
12 values; its result holds the value), which the scripted ``probe`` teacher runs before it
submits. ``extra`` also names the ``mutation`` and the ``column`` (``db.table.column``).

* ``bundled:test-explore`` (held out, ``tasks/test-explore.jsonl``) and
* ``bundled:train-explore`` (training, ``tasks/train-explore.jsonl``)

are built together from the bundled databases and split by (database, table, column): no
column gives tasks to both sides, so no text is shared; the builder also refuses any text
shared with the other side's bundled splits (`birdrl.tasks.overlap`). Every task is
validated with the evaluator (the reference passes, the buggy SQL fails, each on a fresh
database). Run ``python -m birdrl.data.explore_split`` after changing this module or the
databases; a test checks that the shipped files are what it produces.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from birdrl.data.easy_split import write_task_file
from birdrl.dialects.loading import open_sqlite
from birdrl.dialects.sqlite.helpers import (
    preprocess_results,
    remove_comments,
    remove_distinct,
    remove_round,
)
from birdrl.env.prompts import build_messages
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.suite import validate_tasks
from birdrl.tasks.benchmark import bundled_task_file, open_benchmark
from birdrl.tasks.model import Task
from birdrl.tasks.overlap import refuse_overlap

__all__ = [
    "MUTATIONS",
    "PROMPT_SETTINGS",
    "SEED",
    "TEST_EXPLORE_SPLIT",
    "TRAIN_EXPLORE_SPLIT",
    "UNSEEN_EXPLORE_SPLIT",
    "ExploreSplitError",
    "ExploreSplits",
    "build_explore_splits",
    "check_value_hidden",
    "other_passing_values",
    "write_explore_splits",
]

TEST_EXPLORE_SPLIT = "test-explore"
TRAIN_EXPLORE_SPLIT = "train-explore"
UNSEEN_EXPLORE_SPLIT = "test-explore-unseen"
SEED = 0
MUTATIONS = ("case", "spelling", "code", "date_format")
"""How the buggy literal differs from the stored value."""
_RAREST_FIRST = ("spelling", "code", "date_format", "case")
"""The order a column's tasks take mutations in: case applies to almost every value."""
PROMPT_SETTINGS: Mapping[str, tuple[int, int]] = {
    "tiny": (0, 300),
    "default": (3, 8000),
}
"""The prompts a task's value must stay out of: name -> (sample_rows, schema_budget_chars),
the tiny preset's and `EnvConfig`'s defaults."""

_MAX_DISTINCT = 30  # a categorical column holds at most this many values
_SHOWN = 8  # a look at a column with more values shows the first 8, ordered
_MAX_VALUE_CHARS = 40  # observations cut cells at 60 characters
_PER_COLUMN = {"test": 3, "train": 6}
_PER_PLAIN_COLUMN = {"test": 2, "train": 3}
"""Tasks per column: a column that gives one kind of mutation only (most give only a case
or a date format) gives fewer, so that no kind dominates a split. The unseen-database split
takes the train side's counts: its one database has few columns."""
_DATE_COLUMNS_PER_DB = 3  # date columns are many and all alike
_SKIP_COLUMNS = re.compile(
    r"(^|_)(first|last)_?name$|^(first|last)name$|e?mail|phone|fax|address|postal|notes|dose"
    r"|description|company|cost_center|state$|title$|^name$",
    re.IGNORECASE,
)
"""Personal data and free text: not categories a user filters on by a remembered value.
(``name`` of a small lookup table is kept where the table is a list of categories, below.)"""
_LOOKUP_TABLES = {"Genre", "MediaType", "departments", "subjects", "insurers", "Playlist"}
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})( 00:00:00)?$")
_ISO2 = {
    "AU": "Australia", "BR": "Brazil", "CA": "Canada", "CH": "Switzerland", "CN": "China",
    "DE": "Germany", "ES": "Spain", "FR": "France", "GB": "United Kingdom", "IE": "Ireland",
    "IN": "India", "IT": "Italy", "JP": "Japan", "NG": "Nigeria", "NL": "Netherlands",
    "PL": "Poland", "PT": "Portugal", "SE": "Sweden", "US": "United States",
}  # fmt: skip
_COUNTRY = re.compile(r"country|nationality", re.IGNORECASE)
_LABELS: tuple[tuple[re.Pattern[str], Mapping[str, str]], ...] = (
    (_COUNTRY, _ISO2),
    (re.compile(r"^language$"), {
        "en": "English", "es": "Spanish", "fr": "French", "de": "German", "it": "Italian",
        "pt": "Portuguese",
    }),
    (re.compile(r"^sex$"), {"F": "female", "M": "male"}),
    (re.compile(r"^currency$"), {"EUR": "euro", "GBP": "pound", "USD": "dollar"}),
    (re.compile(r"^departments\.code$"), {
        "CS": "Computer Science", "MATH": "Mathematics", "PHYS": "Physics", "BIO": "Biology",
        "CHEM": "Chemistry", "ECON": "Economics", "HIST": "History", "PSYC": "Psychology",
        "ENGL": "English", "ART": "Art & Design",
    }),
    (_COUNTRY, {label: code for code, label in _ISO2.items()} | {"USA": "US"}),
)  # fmt: skip
"""Columns (``column`` or ``table.column``) that store codes -> the label a user writes
instead; and the reverse, where labels are stored and a user writes the code."""
_SPELLINGS = (
    (r"celled$", "celed"),
    (r"_", "-"),
    (r" & ", " and "),
    (r" And ", " & "),
    (r"(?<=[a-z])ped", "paed"),
    (r"Center$", "Centre"),
    (r"Co-op", "Coop"),
    (r"Sci Fi", "Sci-Fi"),
    (r"(?<=\w)/(?=\w)", " / "),
    (r"(?<=[aeiou][tl])ed$|(?<=[vg])ed$", "e"),
    (r"(?<=[a-z]{3})ed$", ""),
    (r"(?<=[a-z]{3}[^s])(?<!ic)s$", ""),
)
"""A stored value -> a variant a user plausibly types (the first rule that applies)."""


class ExploreSplitError(BirdrlError):
    """The explore splits cannot be built as specified (a value shows in a prompt, a text
    is shared with the other side, a task is invalid, too few tasks)."""


@dataclass(frozen=True)
class _Column:
    db_id: str
    table: str
    column: str
    values: tuple[str, ...]
    """Distinct stored values, most frequent first."""
    shown: tuple[str, ...]
    """The values the look shows."""
    explore_sql: str
    key: str | None
    """The table's integer primary key (the list template)."""
    number: str | None
    """A numeric column to sum and average."""

    @property
    def name(self) -> str:
        return f"{self.db_id}.{self.table}.{self.column}"


@dataclass(frozen=True)
class _Candidate:
    column: _Column
    value: str
    wrong: str
    mutation: str
    template: str


@dataclass(frozen=True)
class ExploreSplits:
    """The explore splits, built together."""

    train: list[Task]
    test: list[Task]
    unseen: list[Task]
    """Held out on databases no training split uses."""
    alternatives_checked: int
    """Other stored values tried in the picked candidates' references (each failed; a
    candidate that a validation then drops still counts)."""
    weak_refused: int
    """Candidates refused because another value of the column (or none) passed too."""


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_]\w*", name) else '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _columns(db_id: str, path: Path) -> list[_Column]:
    """The categorical text columns of a database (and date columns with a few values)."""
    conn = open_sqlite(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        out = []
        for table in tables:
            info = conn.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
            keys = [(name, kind) for _, name, kind, _, _, pk in info if pk]
            key = keys[0][0] if len(keys) == 1 and keys[0][1].upper() == "INTEGER" else None
            numbers = [
                r[1] for r in info if r[2].upper().startswith(("REAL", "NUMERIC")) and not r[5]
            ]
            for _, column, _type, *_ in info:
                found = _column(conn, db_id, table, column, key, numbers[0] if numbers else None)
                if found is not None:
                    out.append(found)
        return out
    finally:
        conn.close()


def _column(
    conn: sqlite3.Connection,
    db_id: str,
    table: str,
    column: str,
    key: str | None,
    number: str | None,
) -> _Column | None:
    if _SKIP_COLUMNS.search(column) and not (column.lower() == "name" and table in _LOOKUP_TABLES):
        return None
    t, c = _quote(table), _quote(column)
    rows = conn.execute(
        f"SELECT {c}, typeof({c}), COUNT(*) FROM {t} WHERE {c} IS NOT NULL "
        f"GROUP BY {c} ORDER BY COUNT(*) DESC, {c}"
    ).fetchall()
    if len(rows) < 2 or any(kind != "text" for _, kind, _ in rows):
        return None
    values = tuple(str(v) for v, _, _ in rows)
    dates = all(_DATE.match(v) for v in values)
    if len(values) > _MAX_DISTINCT and not dates:
        return None
    if len(values) <= _SHOWN + 4:
        explore = f"SELECT DISTINCT {c} FROM {t}"
    else:
        explore = f"SELECT DISTINCT {c} FROM {t} ORDER BY {c} LIMIT {_SHOWN}"
    shown = tuple(str(r[0]) for r in conn.execute(explore) if r[0] is not None)
    return _Column(db_id, table, column, values, shown, explore, key, number)


def _variants(value: str, column: _Column) -> list[tuple[str, str]]:
    """(mutation, wrong literal) pairs for a stored `value`: none that the column holds."""
    out: list[tuple[str, str]] = []
    date = _DATE.match(value)
    if date:
        y, m, d, time = date.groups()
        out.append(("date_format", f"{y}-{m}-{d}" if time else f"{y}/{m}/{d}"))
    else:
        if value.islower():
            case = value.capitalize() if value.replace(" ", "").isalpha() else value.upper()
        elif value.isupper():
            case = value.lower()
        else:
            case = value.lower()
        out.append(("case", case))
        for pattern, replacement in _SPELLINGS:
            spelled = re.sub(pattern, replacement, value)
            if spelled != value:
                out.append(("spelling", spelled))
                break
        for columns, labels in _LABELS:
            if value in labels and (
                columns.search(column.column) or columns.search(f"{column.table}.{column.column}")
            ):
                out.append(("code", labels[value]))
                break
    held = set(column.values)
    return [(m, w) for m, w in out if w != value and w not in held and len(w) > 1]


def _noun(table: str) -> str:
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", table).replace("_", " ").lower()
    return words if words.endswith("s") else words + "s"


def _words(column: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", column).replace("_", " ").lower()


_TEMPLATES = ("count", "list", "sum", "avg")


def _sql(candidate: _Candidate, literal: str) -> str | None:
    col = candidate.column
    t, c = _quote(col.table), _quote(col.column)
    where = f"WHERE {c} = {_literal(literal)}"
    if candidate.template == "count":
        return f"SELECT COUNT(*) FROM {t} {where}"
    if candidate.template == "list" and col.key:
        k = _quote(col.key)
        return f"SELECT {k} FROM {t} {where} ORDER BY {k} LIMIT 10"
    if candidate.template in ("sum", "avg") and col.number:
        fn = candidate.template.upper()
        return f"SELECT ROUND({fn}({_quote(col.number)}), 2) FROM {t} {where}"
    return None


def _issue(candidate: _Candidate, rng: random.Random) -> str:
    col, wrong = candidate.column, candidate.wrong
    noun = _noun(col.table)
    which = f"whose {col.column} is {wrong}"
    if candidate.template == "count":
        asks = [
            f"I need the number of {noun} {which}.",
            f"How many {noun} are there {which}?",
        ]
        symptom = "My query returns 0, but there are such rows in the table."
    elif candidate.template == "list":
        asks = [
            f"I want the ids ({col.key}) of the first 10 {noun} {which}.",
            f"List the {col.key} of the first ten {noun} {which}, lowest first.",
        ]
        symptom = "The query returns no rows, although such rows exist."
    else:
        what = "total" if candidate.template == "sum" else "average"
        number = _words(col.number or "")
        asks = [
            f"I want the {what} {number} of the {noun} {which}, rounded to 2 decimals.",
            f"What is the {what} {number} over {noun} {which}?",
        ]
        symptom = "It gives NULL instead of a number, yet those rows are there."
    return f"{rng.choice(asks)} {symptom}"


def _candidates(column: _Column) -> list[_Candidate]:
    out = []
    for value in column.shown:
        if len(value) > _MAX_VALUE_CHARS or any(ch in value for ch in "'|\n\\"):
            continue
        for mutation, wrong in _variants(value, column):
            for template in _TEMPLATES:
                candidate = _Candidate(column, value, wrong, mutation, template)
                if _sql(candidate, value) is not None:
                    out.append(candidate)
    return out


def _task(candidate: _Candidate, instance_id: str, rng: random.Random) -> Task:
    issue = _sql(candidate, candidate.wrong)
    fix = _sql(candidate, candidate.value)
    if issue is None or fix is None:  # _candidates keeps only renderable ones
        raise ExploreSplitError(f"{candidate.column.name}: no {candidate.template} query")
    return Task(
        instance_id=instance_id,
        db_id=candidate.column.db_id,
        query=_issue(candidate, rng),
        issue_sql=(issue,),
        sol_sql=(fix,),
        extra={
            "bug_family": "explore",
            "mutation": candidate.mutation,
            "explore_sql": candidate.column.explore_sql,
            "column": candidate.column.name,
        },
    )


def _value_pattern(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + re.escape(value) + r"(?!\w)")


def _prompt_text(task: Task, db_path: Path, setting: str) -> str:
    sample_rows, budget = PROMPT_SETTINGS[setting]
    messages = build_messages(task, db_path, sample_rows=sample_rows, budget_chars=budget)
    return "\n".join(str(m.get("content") or "") for m in messages)


def _stored_value(task: Task) -> str:
    """The literal of the reference fix that the buggy SQL lacks."""
    literals = re.findall(r"'((?:[^']|'')*)'", task.sol_sql[0])
    wrong = set(re.findall(r"'((?:[^']|'')*)'", task.issue_sql[0]))
    (value,) = [v.replace("''", "'") for v in literals if v not in wrong]
    return value


def check_value_hidden(tasks: Iterable[Task], databases: Mapping[str, Path]) -> None:
    """Raise `ExploreSplitError` when the stored value a task's fix needs (as a whole
    token, case-sensitive) appears in the prompt a model sees, under any `PROMPT_SETTINGS`."""
    shown = []
    for task in tasks:
        value = _stored_value(task)
        for setting in PROMPT_SETTINGS:
            if _value_pattern(value).search(_prompt_text(task, databases[task.db_id], setting)):
                shown.append(f"{task.instance_id} ({setting} prompt): {value!r}")
    if shown:
        raise ExploreSplitError("the needed value shows in the prompt: " + "; ".join(shown))


def _judged_rows(conn: sqlite3.Connection, sql: str, ordered: bool) -> object:
    """The result of `sql` as the official default test compares it (comments, DISTINCT and
    ROUND removed, values normalised, rows as a set unless ordered); None for no rows, which
    that test fails whatever the other side returns."""
    (sql,) = remove_round(remove_distinct(remove_comments([sql])))
    rows = preprocess_results(conn.execute(sql).fetchall())
    if not rows:
        return None
    return rows if ordered else frozenset(rows)


def _judged_by_value(
    conn: sqlite3.Connection, table: str, column: str, render: Callable[[str], str], ordered: bool
) -> dict[str, object]:
    """Every stored value of ``table.column`` -> the judged result (`_judged_rows`) of the
    query `render` writes for it."""
    values = conn.execute(
        f"SELECT DISTINCT CAST({_quote(column)} AS TEXT) FROM {_quote(table)} "
        f"WHERE {_quote(column)} IS NOT NULL ORDER BY 1"
    )
    return {str(v): _judged_rows(conn, render(str(v)), ordered) for (v,) in values.fetchall()}


def other_passing_values(task: Task, db_path: Path) -> list[str]:
    """The values of the task's column, other than the stored one its fix needs, with which
    the reference fix passes the task's hidden test (the official default test: results
    compared as sets after ROUND and DISTINCT are removed): a submission that copies one of
    them from the look would be scored a success. Empty for a strict task; the builder
    ships only those (`ExploreSplits.alternatives_checked`)."""
    if task.test_cases:
        raise ExploreSplitError(f"{task.instance_id}: explore tasks are judged by the default test")
    _, table, column = str(task.extra["column"]).split(".")
    value, fix = _stored_value(task), task.sol_sql[0]
    target = _literal(value)
    ordered = bool((task.conditions or {}).get("order", False))
    con = open_sqlite(db_path)
    try:
        gold = _judged_rows(con, fix, ordered)
        results = _judged_by_value(
            con, table, column, lambda other: fix.replace(target, _literal(other)), ordered
        )
    finally:
        con.close()
    return [other for other, result in results.items() if other != value and result == gold]


class _Strictness:
    """Which candidates only their own value passes: per (column, template), every stored
    value's judged result is computed once; a value whose result another value shares (or
    that returns no rows) makes a weak task."""

    def __init__(self, databases: Mapping[str, Path]) -> None:
        self._databases = databases
        self._results: dict[tuple[str, str], dict[str, object]] = {}
        self.checked = 0
        """Other stored values tried in the references of the candidates kept (each failed)."""
        self.refused = 0
        """Candidates refused because another value (or none) passes too."""

    def strict(self, candidate: _Candidate) -> bool:
        results = self._by_value(candidate)
        mine = results[candidate.value]
        ok = mine is not None and sum(r == mine for r in results.values()) == 1
        if ok:
            self.checked += len(results) - 1
        else:
            self.refused += 1
        return ok

    def _by_value(self, candidate: _Candidate) -> dict[str, object]:
        col = candidate.column
        key = (col.name, candidate.template)
        if key not in self._results:
            con = open_sqlite(self._databases[col.db_id])
            try:
                self._results[key] = _judged_by_value(
                    con, col.table, col.column, lambda v: str(_sql(candidate, v)), ordered=False
                )
            finally:
                con.close()
        return self._results[key]


def _visible(candidate: _Candidate, databases: Mapping[str, Path]) -> bool:
    task = _task(candidate, "probe", random.Random(0))
    try:
        check_value_hidden([task], databases)
    except ExploreSplitError:
        return True
    return False


def _pick(
    candidates: Sequence[_Candidate],
    limit: int,
    rng: random.Random,
    keep: Callable[[_Candidate], bool],
) -> list[_Candidate]:
    """Up to `limit` candidates of one column that `keep` accepts: mutations in turn, values
    and templates spread (a value and a template are reused only when nothing else is
    left)."""
    pool = list(candidates)
    rng.shuffle(pool)
    by_mutation: dict[str, list[_Candidate]] = {}
    for c in pool:
        by_mutation.setdefault(c.mutation, []).append(c)
    picked: list[_Candidate] = []
    used_values: Counter[str] = Counter()
    used_templates: Counter[str] = Counter()
    mutations = [m for m in _RAREST_FIRST if m in by_mutation]
    while len(picked) < limit and any(by_mutation[m] for m in mutations):
        for m in mutations:
            if len(picked) >= limit or not by_mutation[m]:
                continue
            best = min(
                by_mutation[m], key=lambda c: (used_values[c.value], used_templates[c.template])
            )
            by_mutation[m].remove(best)
            if not keep(best):
                continue
            picked.append(best)
            used_values[best.value] += 1
            used_templates[best.template] += 1
    return picked


def _usable(
    databases: Mapping[str, Path], all_databases: Mapping[str, Path]
) -> dict[str, list[_Candidate]]:
    """Column name -> the candidates of its values that no prompt shows."""
    usable = {}
    for db_id in sorted(databases):
        for column in _columns(db_id, databases[db_id]):
            found = [c for c in _candidates(column) if not _visible(c, all_databases)]
            if found:
                usable[column.name] = found
    return usable


def _not_first_listed(candidate: _Candidate) -> bool:
    """Training tasks never need the first value the look lists: copying it must not pay."""
    return candidate.value != candidate.column.shown[0]


def build_explore_splits(
    databases: Mapping[str, Path],
    *,
    held_out_databases: Mapping[str, Path] | None = None,
    training_databases: Mapping[str, Path] | None = None,
    train_side: Sequence[Task] = (),
    test_side: Sequence[Task] = (),
    seed: int = SEED,
    eval_config: EvalConfig | None = None,
) -> ExploreSplits:
    """The explore splits from the databases (db_id -> SQLite file): the columns of
    `databases` are dealt to test-explore and train-explore, every column of
    `training_databases` goes to train-explore and every column of `held_out_databases` to
    the unseen-database split. `train_side` and `test_side` are the other bundled splits of
    each side: a held-out task may share no text with `train_side` or train-explore, a
    train-explore task none with `test_side` or the held-out splits. Every task is strict
    (no other stored value of its column passes its hidden test: each is checked, and a
    candidate that another value passes is never picked), and a training task never needs
    the first value its look lists. Raises `ExploreSplitError` when a built task breaks a
    rule, shows its value in a prompt, or when a split ends with too few tasks."""
    held_out, training = dict(held_out_databases or {}), dict(training_databases or {})
    everything = {**databases, **held_out, **training}
    if len(everything) != len(databases) + len(held_out) + len(training):
        raise ExploreSplitError("a database is given for more than one side")
    rng = random.Random(seed)
    strictness = _Strictness(everything)

    def train_keep(c: _Candidate) -> bool:
        return _not_first_listed(c) and strictness.strict(c)

    sides: dict[str, list[Task]] = {"test": [], "train": [], "unseen": []}

    def deal(usable: Mapping[str, Sequence[_Candidate]], assigned: list[tuple[str, str]]) -> None:
        for name, side in assigned:
            kinds = {c.mutation for c in usable[name]}
            limit = (_PER_COLUMN if len(kinds) > 1 else _PER_PLAIN_COLUMN)[
                "test" if side == "test" else "train"
            ]
            keep = train_keep if side == "train" else strictness.strict
            for candidate in _pick(usable[name], limit, rng, keep):
                sides[side].append(_task(candidate, f"{side}:{len(sides[side])}", rng))

    shared = _usable(databases, everything)
    deal(shared, _assign(shared, rng))
    for group, side in ((training, "train"), (held_out, "unseen")):
        usable = _usable(group, everything)
        deal(usable, [(name, side) for name, _ in _assign(usable, rng)])
    test = _number(_valid(sides["test"], everything, eval_config), "explore")
    train = _number(_valid(sides["train"], everything, eval_config), "train_explore")
    unseen = _number(_valid(sides["unseen"], everything, eval_config), "explore_unseen")
    check_value_hidden([*test, *train, *unseen], everything)
    refuse_overlap(
        [*test, *unseen],
        train_side,
        "the held-out explore splits",
        "the training splits",
        ExploreSplitError,
    )
    refuse_overlap(
        train,
        [*test_side, *test, *unseen],
        "train-explore",
        "the held-out splits",
        ExploreSplitError,
    )
    least = [(TEST_EXPLORE_SPLIT, test, 32), (TRAIN_EXPLORE_SPLIT, train, 64)]
    least += [(UNSEEN_EXPLORE_SPLIT, unseen, 32)] if held_out else []
    short = [
        f"{name} has {len(tasks)} tasks; at least {n} needed"
        for name, tasks, n in least
        if len(tasks) < n
    ]
    if short:
        raise ExploreSplitError("; ".join(short))
    return ExploreSplits(
        train=train,
        test=test,
        unseen=unseen,
        alternatives_checked=strictness.checked,
        weak_refused=strictness.refused,
    )


def _assign(
    usable: Mapping[str, Sequence[_Candidate]], rng: random.Random
) -> list[tuple[str, str]]:
    """(column, side) pairs: columns grouped by the mutations they give, each group shuffled
    and dealt alternately to test and train, so both sides get every kind; date columns
    (many, and all alike) at most `_DATE_COLUMNS_PER_DB` per database."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name in sorted(usable):
        kinds = tuple(sorted({c.mutation for c in usable[name]}))
        groups.setdefault(kinds, []).append(name)
    dates = groups.pop(("date_format",), [])
    rng.shuffle(dates)
    kept: Counter[str] = Counter()
    for name in dates:
        db_id = usable[name][0].column.db_id
        if kept[db_id] < _DATE_COLUMNS_PER_DB:
            kept[db_id] += 1
            groups.setdefault(("date_format",), []).append(name)
    out = []
    n = 0
    for kinds in sorted(groups):
        names = sorted(groups[kinds])
        rng.shuffle(names)
        for name in names:
            out.append((name, "test" if n % 2 == 0 else "train"))
            n += 1
    return out


def _valid(
    tasks: list[Task], databases: Mapping[str, Path], config: EvalConfig | None
) -> list[Task]:
    """The tasks whose reference passes and whose buggy SQL fails, each on a fresh database;
    raises when an evaluation itself failed (no verdict is not a rejection)."""
    if not tasks:
        return []
    used = {t.db_id: databases[t.db_id] for t in tasks}
    results = validate_tasks(tasks, used, config or EvalConfig(workers=2))
    failed = [f"{r.instance_id}: {r.reason}" for r in results if r.verdict == "evaluation_failed"]
    if failed:
        raise ExploreSplitError("validating explore tasks failed: " + "; ".join(failed[:5]))
    return [t for t, r in zip(tasks, results, strict=True) if r.valid]


def _number(tasks: list[Task], prefix: str) -> list[Task]:
    """Sorted by database (stable within one), numbered per database."""
    out: list[Task] = []
    counts: Counter[str] = Counter()
    for task in sorted(tasks, key=lambda t: t.db_id):
        counts[task.db_id] += 1
        out.append(replace(task, instance_id=f"{prefix}_{task.db_id}_{counts[task.db_id]:03d}"))
    return out


def write_explore_splits(
    out_dir: Path | None = None, db_root: Path | None = None
) -> tuple[dict[str, Path], ExploreSplits]:
    """Build the explore splits from the bundled databases (under `db_root`, default: the
    per-user cache): the shared ones dealt by column, `TRAINING_DB_IDS` to train-explore
    only, `HELD_OUT_DB_IDS` to the unseen-database split only; checked against the other
    bundled splits of each side, and write them as ``{split}.jsonl`` (the official format)
    into `out_dir` (default: the shipped task directory). Returns {split: path} and the
    splits (with the strictness counts)."""
    from birdrl.tasks.bundled import (
        HELD_OUT_DB_IDS,
        TRAINING_DB_IDS,
        build_databases,
        default_db_root,
    )

    test_side = [
        *open_benchmark("bundled:test", db_root).debugging_tasks(),
        *open_benchmark("bundled:test-easy", db_root).debugging_tasks(),
    ]
    train = open_benchmark("bundled:train", db_root)
    train_side = [
        *train.debugging_tasks(),
        *open_benchmark("bundled:train-easy", db_root).debugging_tasks(),
    ]
    root = default_db_root() if db_root is None else db_root
    splits = build_explore_splits(
        train.databases,
        held_out_databases=build_databases(root, db_ids=HELD_OUT_DB_IDS),
        training_databases=build_databases(root, db_ids=TRAINING_DB_IDS),
        train_side=train_side,
        test_side=test_side,
    )
    target = out_dir or bundled_task_file("test").parent
    written = {
        name: write_task_file(tasks, target / f"{name}.jsonl")
        for name, tasks in (
            (TEST_EXPLORE_SPLIT, splits.test),
            (TRAIN_EXPLORE_SPLIT, splits.train),
            (UNSEEN_EXPLORE_SPLIT, splits.unseen),
        )
    }
    return written, splits


if __name__ == "__main__":
    paths, built = write_explore_splits()
    for split, path in paths.items():
        print(f"{split}: {sum(1 for _ in path.open())} tasks -> {path}")
    print(
        f"strict: {built.alternatives_checked} other stored values tried in the picked "
        f"candidates' references, every one failed; {built.weak_refused} candidates refused "
        "because another value passed too"
    )
