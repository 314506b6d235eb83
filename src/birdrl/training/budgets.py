"""Budgets checked against the data, before any training: a limit that the teacher's own
verified answers do not fit in cannot be learned within (an episode cut before its
``submit_solution`` turn teaches nothing about submitting).

The measures come from the stage datasets and the tokenizer the run trains with: the
stage-2 teacher's verified trajectories (tool calls per episode, tokens per assistant turn,
tokens of the whole episode after the prompt, sample length) and the stage-1 answers
(tokens of the answer, sample length). Each check names the config key, its value and the
measured need; `BudgetCheck.ok` is False when some teacher samples do not fit.

Token counts render the conversation with the tokenizer's chat template, as the trainers
do: a turn's tokens are the difference between the conversation up to and including it and
the conversation before it with the generation prompt (so they include the end-of-turn
token the model has to produce).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from birdrl.training.config import CurriculumConfig
from birdrl.training.sft import sft_rows

__all__ = ["BudgetCheck", "SampleMeasures", "check_budgets", "measure_rows"]

Row = Mapping[str, Any]


@dataclass(frozen=True)
class BudgetCheck:
    """One limit of the configuration against what the teacher's samples need."""

    key: str
    """The config key (``evaluation.max_tool_calls``)."""
    value: int
    need: str
    """The measured need, in words (``median 3, max 4 tool calls``)."""
    fits: int
    """Teacher samples (episodes, turns) within the limit."""
    total: int
    source: str
    """What was measured (``stage 2 teacher episodes``)."""
    detail: str = ""
    """More of the need (e.g. the submit turns), appended to the message."""

    @property
    def ok(self) -> bool:
        return self.fits == self.total

    @property
    def message(self) -> str:
        verdict = "all fit" if self.ok else f"only {self.fits} of {self.total} fit"
        text = f"{self.key}={self.value}: {self.source} need {self.need}; {verdict}"
        return text + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict[str, Any]:
        """The fields plus ``ok`` and ``message`` (for the report)."""
        return {**asdict(self), "ok": self.ok, "message": self.message}


@dataclass
class SampleMeasures:
    """Token and tool-call counts of one stage's SFT rows."""

    lengths: list[int] = field(default_factory=list)
    """Tokens of each whole sample (what ``max_length`` cuts)."""
    completions: list[int] = field(default_factory=list)
    """Tokens after the prompt of each sample: the answer (stage 1) or the whole episode,
    tool results included (stage 2)."""
    turns: list[int] = field(default_factory=list)
    """Tokens of each assistant turn (every sample, in order)."""
    submit_turns: list[int] = field(default_factory=list)
    """Tokens of each assistant turn that calls ``submit_solution``."""
    tool_calls: list[int] = field(default_factory=list)
    """Tool calls of each sample (``submit_solution`` included)."""


def _count(tokenizer: Any, messages: Sequence[Any], tools: Any, generation: bool = False) -> int:
    text = tokenizer.apply_chat_template(
        list(messages), tools=tools, tokenize=False, add_generation_prompt=generation
    )
    return len(tokenizer(text)["input_ids"])


def _calls(message: Mapping[str, Any]) -> list[str]:
    return [c.get("function", {}).get("name", "") for c in message.get("tool_calls") or []]


def measure_rows(rows: Sequence[Row], tokenizer: Any, *, with_tools: bool) -> SampleMeasures:
    """Measure SFT rows (``messages``) as the SFT stage renders them (stage 2: with the
    stage-4 tool schemas)."""
    out = SampleMeasures()
    for item in sft_rows(rows, with_tools=with_tools):
        messages = item["messages"]
        tools = json.loads(item["tools"]) if "tools" in item else None
        out.lengths.append(_count(tokenizer, messages, tools))
        assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        if not assistant:
            continue
        prompt = _count(tokenizer, messages[: assistant[0]], tools, generation=True)
        out.completions.append(out.lengths[-1] - prompt)
        calls = 0
        for i in assistant:
            before = _count(tokenizer, messages[:i], tools, generation=True)
            tokens = _count(tokenizer, messages[: i + 1], tools) - before
            out.turns.append(tokens)
            names = _calls(messages[i])
            calls += len(names)
            if "submit_solution" in names:
                out.submit_turns.append(tokens)
        out.tool_calls.append(calls)
    return out


def _spread(values: Sequence[int], unit: str) -> str:
    median = statistics.median(values)
    shown = f"{median:g}" if median != int(median) else str(int(median))
    return f"a median of {shown} {unit} (max {max(values)})"


def _check(key: str, value: int, values: Sequence[int], unit: str, source: str) -> BudgetCheck:
    return BudgetCheck(
        key, value, _spread(values, unit), sum(v <= value for v in values), len(values), source
    )


def check_budgets(
    config: CurriculumConfig,
    rows: Mapping[int, Sequence[Row]],
    tokenizer: Any,
    stages: Collection[int] = (1, 2, 3, 4),
) -> list[BudgetCheck]:
    """Check the limits of `config` against the stage datasets `rows` (by stage number:
    1 = reasoning SFT rows, 2 = the teacher's verified tool-use trajectories), measured with
    `tokenizer`. Limits of a stage not in `stages` (or disabled) are not checked; a check
    whose data is missing is left out."""

    def runs(stage: int) -> bool:
        enabled = {
            1: config.stage1.enabled,
            2: config.stage2.enabled,
            3: config.stage3.enabled,
            4: config.stage4.enabled,
        }
        return stage in stages and enabled[stage]

    wanted: list[tuple[bool, str, list[int], str, str]] = []
    if rows.get(1):
        one = measure_rows(rows[1], tokenizer, with_tools=False)
        wanted += [
            (runs(1), "stage1.max_length", one.lengths, "tokens", "stage-1 samples (whole)"),
            (runs(3), "stage3.max_completion_length", one.completions, "tokens",
             "stage-1 teacher answers"),
        ]  # fmt: skip
    submits: list[int] = []
    if rows.get(2):
        two = measure_rows(rows[2], tokenizer, with_tools=True)
        episodes, submits = "stage-2 teacher episodes", two.submit_turns
        wanted += [
            (runs(2), "stage2.max_length", two.lengths, "tokens", f"{episodes} (whole samples)"),
            (True, "evaluation.max_tool_calls", two.tool_calls, "tool calls", episodes),
            (runs(4), "stage4.max_tool_calls", two.tool_calls, "tool calls", episodes),
            (True, "evaluation.max_new_tokens", two.turns, "tokens",
             "the stage-2 teacher's assistant turns"),
            (runs(4), "stage4.max_completion_length", two.completions, "tokens",
             f"{episodes} (all turns after the prompt)"),
        ]  # fmt: skip
    checks = []
    for on, key, values, unit, source in wanted:
        if not on or not values:
            continue
        section, name = key.split(".")
        check = _check(key, getattr(getattr(config, section), name), values, unit, source)
        if key == "evaluation.max_new_tokens" and submits:
            fit = sum(t <= check.value for t in submits)
            detail = (
                f"a submit turn needs {_spread(submits, 'tokens')}; {fit} of {len(submits)} fit"
            )
            check = replace(check, detail=detail)
        checks.append(check)
    return checks
