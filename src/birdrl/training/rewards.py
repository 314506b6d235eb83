"""Reward functions for GRPO on TRL (``GRPOTrainer(reward_funcs=...)``).

TRL calls each one as ``func(prompts=..., completions=..., completion_ids=..., **columns)``
with the dataset's other columns as lists; the rows carry ``instance_id`` (the key of the
task), ``db_id`` and ``kind``. A reward is one float per sample, or None where a sample
cannot be scored (TRL leaves it out of the advantage).

* `ExecutionReward`, the default: the evaluator's own score, the one benchmark SR comes from.
* `LocalCorrectnessReward`, `HeuristicReward`, `JudgeReward`: the paper's ablations.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError
from sqlglot.tokens import TokenType

from birdrl.agents.base import Agent
from birdrl.db.statements import split_statements
from birdrl.env.parse import extract_answer
from birdrl.env.types import Message
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import Evaluator, TaskNotScorableError
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "REWARDS",
    "REWARD_NAMES",
    "ExecutionReward",
    "HeuristicReward",
    "JudgeReward",
    "LocalCorrectnessReward",
    "RewardConfigError",
    "RewardInfraError",
    "RewardInputError",
    "RewardInputs",
    "RewardSpec",
    "TaskReward",
    "UnknownRewardError",
    "UnknownTaskError",
    "completion_text",
    "make_reward",
    "register_reward",
]

AnyTask = Task | TextToSQLTask
_STATEMENTS = (
    *(exp.Query, exp.DML, exp.DDL, exp.Drop, exp.Alter, exp.Pragma, exp.Command),
    *(exp.Transaction, exp.Commit, exp.Rollback, exp.Attach, exp.Detach, exp.Analyze),
    exp.EndStatement,  # the END of a trigger that sqlglot read as a Command
)
_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)
_SCORE = re.compile(r"<score>\s*(\d+(?:\.\d+)?)\s*</score>", re.IGNORECASE)


class RewardInfraError(BirdrlError):
    """Every sample of a reward call hit an infrastructure failure (e.g. a broken database):
    training must stop rather than learn from rewards that are not the model's doing."""


class RewardInputError(BirdrlError, ValueError):
    """The trainer passed columns or completions a reward cannot read."""


class UnknownTaskError(BirdrlError, KeyError):
    """A row's instance_id names no task in the reward's task mapping."""


class RewardConfigError(BirdrlError, ValueError):
    """`make_reward` cannot build the reward asked for (a dependency is missing)."""


class UnknownRewardError(RewardConfigError):
    """`make_reward` was given a name outside `REWARD_NAMES`."""


def completion_text(completion: object) -> str:
    """The text of a completion: a plain string, or the last assistant message of a
    conversational one ("" when it has none)."""
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, Sequence):
        raise RewardInputError(
            f"a completion must be a string or a list of messages, got {completion!r:.80}"
        )
    for message in reversed(completion):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            return content if isinstance(content, str) else ""
    return ""


class TaskReward:
    """The base of the rewards: a TRL name (``__name__``), the task lookup and the answer
    extraction; by default it scores each sample on its own with `score`."""

    def __init__(self, name: str, tasks: Mapping[str, AnyTask]) -> None:
        self.__name__ = name
        self.tasks = tasks

    def __call__(self, completions: Sequence[Any], **columns: Any) -> list[float | None]:
        return [self.score(task, answer) for task, answer in self._samples(completions, columns)]

    def score(self, task: AnyTask, answer: str | None) -> float | None:
        """The reward of one answer (None: no answer block)."""
        raise NotImplementedError(f"{type(self).__name__} scores whole batches")

    def _samples(
        self, completions: Sequence[Any], columns: Mapping[str, Any]
    ) -> list[tuple[AnyTask, str | None]]:
        """(task, answer SQL or None) per completion."""
        ids = columns.get("instance_id")
        if ids is None or len(ids) != len(completions):
            raise RewardInputError(
                f"{self.__name__} needs an instance_id column with one id per completion "
                f"(got {None if ids is None else len(ids)} ids for {len(completions)} completions)"
            )
        out = []
        for instance_id, completion in zip(ids, completions, strict=True):
            if instance_id not in self.tasks:
                raise UnknownTaskError(f"{self.__name__}: no task with instance_id {instance_id!r}")
            task = self.tasks[instance_id]
            if isinstance(task, Task) and not task.has_reference:
                raise TaskNotScorableError(f"task {instance_id!r} has no sol_sql: no reward")
            out.append((task, extract_answer(completion_text(completion))))
        return out


class ExecutionReward(TaskReward):
    """The paper's pure execution reward, from the same evaluator that computes SR: a debugging
    task scores the fraction of its hidden test cases passed, a text-to-SQL task 1.0 if its
    result multiset equals the gold one. No answer block is a wrong answer (0.0). An
    infrastructure failure is None, never a silent 0; a call where every sample failed that
    way raises `RewardInfraError` (a broken database must stop training)."""

    def __init__(self, tasks: Mapping[str, AnyTask], evaluator: Evaluator) -> None:
        super().__init__("execution_reward", tasks)
        self.evaluator = evaluator
        self.calls = self.samples = self.successes = self.infra_errors = self.no_answer = 0

    def __call__(self, completions: Sequence[Any], **columns: Any) -> list[float | None]:
        samples = self._samples(completions, columns)
        with ThreadPoolExecutor(max_workers=self.evaluator.config.workers) as pool:
            outcomes = list(pool.map(lambda s: self._score(*s), samples))
        self.calls += 1
        self.samples += len(samples)
        self.no_answer += sum(answer is None for _, answer in samples)
        self.successes += sum(success for _, success, _ in outcomes)
        failed = [(t, e) for (t, _), (_, _, e) in zip(samples, outcomes, strict=True) if e]
        self.infra_errors += len(failed)
        if samples and len(failed) == len(samples):
            task, err = failed[0]
            raise RewardInfraError(
                f"all {len(samples)} samples failed to evaluate (infrastructure, not the model); "
                f"first: task {task.instance_id!r} on database {task.db_id!r}: {err}"
            )
        return [None if err else reward for reward, _, err in outcomes]

    def metrics(self) -> dict[str, float]:
        """Running counters for a trainer's log."""
        return {
            "calls": self.calls,
            "samples": self.samples,
            "success_rate": self.successes / max(self.samples, 1),
            "infra_errors": self.infra_errors,
            "no_answer": self.no_answer,
        }

    def _score(self, task: AnyTask, answer: str | None) -> tuple[float, bool, str | None]:
        """(reward, success, infrastructure error) of one sample."""
        if answer is None:
            return 0.0, False, None
        if isinstance(task, TextToSQLTask):
            ex = self.evaluator.execution_accuracy(task, answer)
            return float(ex.correct), ex.correct, ex.infra_error
        report = self.evaluator.evaluate(task, split_statements(answer))
        return report.reward, report.success, report.infra_error


def _reference(task: AnyTask) -> list[str]:
    return split_statements(task.sql) if isinstance(task, TextToSQLTask) else list(task.sol_sql)


def _parse(statement: str) -> list[exp.Expression] | None:
    """sqlglot's trees of one SQLite statement, or None if it does not parse as statements.
    Syntax sqlglot does not model (CREATE TRIGGER, REPLACE INTO) comes back as `exp.Command`."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # "falling back to parsing as a Command" is expected here
    try:
        trees = sqlglot.parse(statement, read="sqlite")
    except (SqlglotError, ValueError, RecursionError):
        return None
    finally:
        logger.setLevel(level)
    if not trees or not all(isinstance(t, _STATEMENTS) for t in trees):
        return None  # nothing, or a bare expression ("foo bar"): not a statement
    return [t for t in trees if isinstance(t, exp.Expression)]


def _canonical(statement: str) -> str:
    """sqlglot's rendering of a statement (identifiers lower-cased, as SQLite compares them),
    or its whitespace-collapsed text."""
    trees = _parse(statement)
    if trees and not any(isinstance(t, exp.Command) for t in trees):
        opts: dict[str, Any] = {"normalize": True, "unsupported_level": ErrorLevel.IGNORE}
        return "; ".join(t.sql(dialect="sqlite", comments=False, **opts) for t in trees)
    return " ".join(statement.split()).rstrip(";")


def _valid(statements: Sequence[str], reference: Sequence[str]) -> bool:
    """Every statement parses with sqlglot, or is a reference statement verbatim (references
    are valid SQLite; sqlglot cannot parse every trigger)."""
    known = {" ".join(s.split()) for s in reference}
    return bool(statements) and all(
        _parse(s) is not None or " ".join(s.split()) in known for s in statements
    )


@dataclass
class _Names:
    """The schema names that statements reference (lower-cased)."""

    tables: set[str] = field(default_factory=set)
    columns: set[str] = field(default_factory=set)
    created: set[str] = field(default_factory=set)
    """Tables and views the statements create themselves."""
    other: set[str] = field(default_factory=set)
    """Identifiers of statements sqlglot cannot model (no table/column roles known)."""

    def items(self) -> set[tuple[str, str]]:
        return (
            {("table", n) for n in self.tables}
            | {("column", n) for n in self.columns}
            | {("name", n) for n in self.other}
        )


def _names(statements: Sequence[str]) -> _Names:
    out = _Names()
    for statement in statements:
        trees = _parse(statement)
        if trees is None or any(isinstance(t, exp.Command) for t in trees):
            try:
                tokens = sqlglot.tokenize(statement, read="sqlite")
            except (SqlglotError, ValueError):
                tokens = []
            out.other |= {t.text.lower() for t in tokens if t.token_type in _NAME_TOKENS}
            continue
        for tree in trees:
            ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
            out.tables |= {t.name.lower() for t in tree.find_all(exp.Table) if t.name} - ctes
            out.columns |= {c.name.lower() for c in tree.find_all(exp.Column) if c.name != "*"}
            out.columns |= {d.name.lower() for d in tree.find_all(exp.ColumnDef)}
            for schema in tree.find_all(exp.Schema):  # INSERT INTO t (a, b)
                out.columns |= {
                    i.name.lower() for i in schema.expressions if isinstance(i, exp.Identifier)
                }
            for create in tree.find_all(exp.Create):
                table = create.this.find(exp.Table) if create.this else None
                if str(create.args.get("kind", "")).upper() in ("TABLE", "VIEW") and table:
                    out.created.add(table.name.lower())
    return out


def _f1(pred: set[tuple[str, str]], ref: set[tuple[str, str]]) -> float:
    if not pred and not ref:
        return 1.0
    hits = len(pred & ref)
    return 0.0 if hits == 0 else 2 * hits / (len(pred) + len(ref))


def _kind(statement: str) -> str:
    """select, insert, update, delete, create, drop, alter, or the first word."""
    trees = _parse(statement)
    tree = trees[0] if trees else None
    if isinstance(tree, exp.Query):
        return "select"
    if isinstance(tree, (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter)):
        return type(tree).__name__.lower()
    words = statement.split(maxsplit=1)
    return words[0].lower() if words else ""


class LocalCorrectnessReward(TaskReward):
    """Ablation: correctness judged from the SQL text alone, never by running it (untrusted
    SQL must not reach a template database). 0.5 x syntax validity (every statement parses
    with sqlglot's SQLite dialect) + 0.5 x schema-linking F1 between the tables and columns
    the prediction and the reference mention. No answer block scores 0.0."""

    def __init__(self, tasks: Mapping[str, AnyTask]) -> None:
        super().__init__("local_correctness_reward", tasks)

    def score(self, task: AnyTask, answer: str | None) -> float:
        if answer is None:
            return 0.0
        pred, ref = split_statements(answer), _reference(task)
        syntax = 1.0 if _valid(pred, ref) else 0.0
        return 0.5 * syntax + 0.5 * _f1(_names(pred).items(), _names(ref).items())


class HeuristicReward(TaskReward):
    """Ablation: the mean of equal-weight rules (see `rules`), each a cheap proxy for a fix:

    * ``answered``: the completion holds an answer block;
    * ``parses``: every statement parses (as in `LocalCorrectnessReward`);
    * ``changed``: it is not the buggy issue SQL again, after normalisation (debugging only);
    * ``same_kinds``: its statement kinds (select, update, create...) are the reference's;
    * ``known_tables``: it touches no table that the reference does not mention, apart from
      those it creates itself.
    """

    def __init__(self, tasks: Mapping[str, AnyTask]) -> None:
        super().__init__("heuristic_reward", tasks)

    def score(self, task: AnyTask, answer: str | None) -> float:
        rules = self.rules(task, answer)
        return sum(rules.values()) / len(rules)

    def rules(self, task: AnyTask, answer: str | None) -> dict[str, bool]:
        """Each rule's verdict (all False without an answer)."""
        pred = split_statements(answer) if answer is not None else []
        ref = _reference(task)
        out = {"answered": bool(pred), "parses": _valid(pred, ref)}
        if isinstance(task, Task):
            canonical = [_canonical(s) for s in pred]
            out["changed"] = bool(pred) and canonical != [_canonical(s) for s in task.issue_sql]
        out["same_kinds"] = bool(pred) and {_kind(s) for s in pred} == {_kind(s) for s in ref}
        mine, theirs = _names(pred), _names(ref)
        allowed = theirs.tables | theirs.other | mine.created
        out["known_tables"] = bool(pred) and mine.tables <= allowed
        return out


_JUDGE_SYSTEM = (
    "You grade a candidate SQL answer for SQLite. You are given the user's request, "
    "the reference solution (known to be correct) and the candidate. Decide whether the "
    "candidate does what the reference does for this request: same result rows, or the same "
    "changes to the database. Differences in formatting, aliases or equivalent formulations "
    "do not matter. Reply with one or two sentences of reasoning, then a score from 0 (wrong) "
    "to 10 (equivalent to the reference) as <score>N</score>."
)


class JudgeReward(TaskReward):
    """Ablation: an LLM judge compares the candidate with the reference and scores it 0-10;
    the reward is score / 10. All samples of a call go to the judge in one batch. An
    unparseable verdict is None (counted in `unparseable`); no answer block scores 0.0
    without asking. A judge that fails (e.g. `AgentError`) raises: that is infrastructure."""

    def __init__(self, judge: Agent, tasks: Mapping[str, AnyTask]) -> None:
        super().__init__("judge_reward", tasks)
        self.judge = judge
        self.calls = self.samples = self.unparseable = 0

    def __call__(self, completions: Sequence[Any], **columns: Any) -> list[float | None]:
        samples = self._samples(completions, columns)
        asked = [(i, task, answer) for i, (task, answer) in enumerate(samples) if answer]
        conversations = [self.conversation(task, answer) for _, task, answer in asked]
        replies = self.judge.generate(conversations) if conversations else []
        if len(replies) != len(asked):
            raise RewardInputError(
                f"the judge returned {len(replies)} replies for {len(asked)} conversations"
            )
        rewards: list[float | None] = [0.0] * len(samples)
        for (i, _, _), reply in zip(asked, replies, strict=True):
            rewards[i] = self.parse_score(reply)
        self.calls += 1
        self.samples += len(samples)
        self.unparseable += sum(rewards[i] is None for i, _, _ in asked)
        return rewards

    @staticmethod
    def conversation(task: AnyTask, answer: str) -> list[Message]:
        """The judge's prompt for one candidate."""
        if isinstance(task, TextToSQLTask):
            evidence = f"\nEvidence: {task.evidence}" if task.evidence else ""
            parts = [f"Question:\n{task.question}{evidence}", f"Reference SQL:\n{task.sql}"]
        else:
            parts = [
                f"Issue:\n{task.query}",
                "Buggy SQL:\n" + ";\n".join(task.issue_sql),
                "Reference solution:\n" + ";\n".join(task.sol_sql),
            ]
        user = "\n\n".join([*parts, f"Candidate SQL:\n{answer}"])
        return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}]

    @staticmethod
    def parse_score(reply: str) -> float | None:
        """The last ``<score>N</score>`` of a reply as N / 10, or None (missing, over 10)."""
        found = _SCORE.findall(reply or "")
        score = float(found[-1]) if found else -1.0
        return score / 10 if 0.0 <= score <= 10.0 else None


@dataclass(frozen=True)
class RewardInputs:
    """What a reward may be built from."""

    tasks: Mapping[str, AnyTask]
    """instance_id -> task."""
    evaluator: Evaluator | None = None
    judge: Agent | None = None


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward: its name (the config's ``reward`` value), one line on what it
    measures, and how to build it."""

    name: str
    doc: str
    build: Callable[[RewardInputs], TaskReward]


REWARDS: dict[str, RewardSpec] = {}
"""The rewards a GRPO stage can select by name, in registration order."""


def register_reward(
    name: str, doc: str
) -> Callable[[Callable[[RewardInputs], TaskReward]], Callable[[RewardInputs], TaskReward]]:
    """Register the decorated builder as the reward `name` (a new reward = one function)."""

    def add(build: Callable[[RewardInputs], TaskReward]) -> Callable[[RewardInputs], TaskReward]:
        if name in REWARDS:
            raise RewardConfigError(f"a reward named {name!r} is already registered")
        REWARDS[name] = RewardSpec(name, doc, build)
        return build

    return add


@register_reward(
    "execution", "the evaluator's test pass rate on a fresh replica (the benchmark's own score)"
)
def _execution(inputs: RewardInputs) -> TaskReward:
    if inputs.evaluator is None:
        raise RewardConfigError(
            "the execution reward needs an evaluator (birdrl.evaluation.Evaluator)"
        )
    return ExecutionReward(inputs.tasks, inputs.evaluator)


@register_reward(
    "local", "ablation: syntax validity and schema-linking F1 against the reference, never executed"
)
def _local(inputs: RewardInputs) -> TaskReward:
    return LocalCorrectnessReward(inputs.tasks)


@register_reward(
    "heuristic", "ablation: the mean of cheap rules (answered, parses, ...), each a proxy for a fix"
)
def _heuristic(inputs: RewardInputs) -> TaskReward:
    return HeuristicReward(inputs.tasks)


@register_reward("judge", "ablation: an LLM judge's score of the answer against the reference")
def _judge(inputs: RewardInputs) -> TaskReward:
    if inputs.judge is None:
        raise RewardConfigError("the judge reward needs a judge agent (e.g. an OpenAIAgent)")
    return JudgeReward(inputs.judge, inputs.tasks)


REWARD_NAMES = tuple(REWARDS)


def make_reward(
    name: str,
    *,
    tasks: Mapping[str, AnyTask],
    evaluator: Evaluator | None = None,
    judge: Agent | None = None,
) -> TaskReward:
    """The registered reward `name` (see `REWARDS`) over `tasks` (instance_id -> task)."""
    spec = REWARDS.get(name)
    if spec is None:
        raise UnknownRewardError(f"unknown reward {name!r}; choose one of: {', '.join(REWARDS)}")
    return spec.build(RewardInputs(tasks, evaluator, judge))
