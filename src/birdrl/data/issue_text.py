"""The issue text of a synthesized task, in the user's voice: what the statement is supposed
to do, what it observably does wrong, a hint per bug family that does not give the fix away,
and a question. Templates are picked with the caller's seeded generator, so the text is
reproducible."""

from __future__ import annotations

import random
from collections.abc import Sequence

from sqlglot import exp

from birdrl.data.mutations import render_sql
from birdrl.data.sql_examples import SQLExample

__all__ = ["issue_text", "target_table"]


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
        table = target_table(tree) or "the table"
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


def issue_text(
    example: SQLExample,
    tree: exp.Expression,
    family: str,
    expected_rows: int,
    actual_rows: int,
    rng: random.Random,
) -> str:
    """The issue text for a bug of `family` in the original `tree`: the original returns or
    changes `expected_rows` rows, the bugged statement `actual_rows`."""
    dml = isinstance(tree, exp.Update | exp.Delete | exp.Insert)
    if example.question:
        goal = f'answer the question "{example.question.strip()}"'
        if example.evidence:
            goal += f" (background: {example.evidence.strip()})"
    else:
        goal = _describe(tree)
    parts = [rng.choice(_OPENERS["dml" if dml else "select"]).format(goal=goal)]
    if dml:
        table = target_table(tree) or "the table"
        verb, preposition = (
            ("updates", "of")
            if isinstance(tree, exp.Update)
            else ("deletes", "from")
            if isinstance(tree, exp.Delete)
            else ("inserts", "into")
        )
        if actual_rows != expected_rows:
            parts.append(
                f"It {verb} {actual_rows} row{_s(actual_rows)} {preposition} {table}, but I "
                f"expected {expected_rows}."
            )
    elif actual_rows != expected_rows:
        parts.append(
            f"It returns {actual_rows} row{_s(actual_rows)}, but I expected {expected_rows}."
        )
    elif family == "order_direction":
        parts.append(f"It returns {actual_rows} row{_s(actual_rows)}, but not in the order I need.")
    else:
        parts.append(f"It returns {actual_rows} row{_s(actual_rows)}, but some values are wrong.")
    if family == "update_scope" and actual_rows < expected_rows:
        parts.append("It misses rows it should change.")
    elif family == "update_scope" and actual_rows == expected_rows:
        parts.append("It changes the wrong rows.")
    else:
        parts.append(rng.choice(_HINTS.get(family, ("",))))
    parts.append(rng.choice(_CLOSERS))
    return " ".join(p for p in parts if p)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def target_table(tree: exp.Expression) -> str | None:
    """The table an UPDATE / DELETE / INSERT changes; None when it is not a plain table."""
    target = tree.this
    if isinstance(target, exp.Schema):
        target = target.this
    return target.name if isinstance(target, exp.Table) and target.name else None
