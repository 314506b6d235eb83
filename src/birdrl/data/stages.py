"""Stage datasets for the curriculum.

* **Stage 1 (reasoning imitation)**: a teacher's diagnostic explanation plus the fixed SQL
  as the answer to the single-turn prompt (which does not show the reference), kept only
  when that SQL passes the task's tests (see `birdrl.data.teachers`).
* **Stage 2 (tool-use imitation)**: multi-turn trajectories played in the real environment
  by a teacher agent (offline: the scripted ``explorer``), kept only when the submission
  passes every test, exported as conversational data with ``tools`` in the format TRL's
  ``SFTTrainer`` reads (assistant ``tool_calls`` with dict arguments, ``tool`` messages).
* **Stages 3 and 4 (RL prompts)**: one row per task with the opening conversation
  (single-turn for stage 3, agentic for stage 4, with ``tools`` unless asked not to) and
  the columns the reward and the environment need to find the task again
  (``instance_id``, ``db_id``, ``category``).

Each builder writes ``data.jsonl`` (``datasets.load_dataset("json", ...)`` reads it) and a
``README.md`` card: counts, the filter applied, and why rows were rejected.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.agents.base import Agent
from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.rollout import RolloutConfig, Trajectory
from birdrl.agents.scripted import ScriptedAgent
from birdrl.data.teachers import GuidedAgent, Teacher, gather_evidence
from birdrl.db.statements import join_statements, split_statements
from birdrl.env.parse import extract_answer, parse_turn
from birdrl.env.prompts import build_messages
from birdrl.env.tools import TOOL_NAMES, TOOLS
from birdrl.env.types import Message, ToolCall
from birdrl.evaluation.evaluator import EvalConfig, Evaluator
from birdrl.evaluation.session import scoring_session
from birdrl.tasks.model import Task

__all__ = [
    "StageDataset",
    "build_reasoning_sft",
    "build_rl_prompts",
    "build_tool_use_sft",
    "to_sft_messages",
]


@dataclass
class StageDataset:
    """Rows of one stage's dataset and what was filtered out."""

    stage: int
    rows: list[dict[str, Any]]
    source: str
    rejected: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def write(self, out_dir: str | Path) -> Path:
        """``data.jsonl`` plus a ``README.md`` card in `out_dir`; returns the jsonl path."""
        out = Path(out_dir).expanduser()
        out.mkdir(parents=True, exist_ok=True)
        path = out / "data.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for row in self.rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        categories = Counter(r.get("category", "?") for r in self.rows)
        lines = [
            f"# Stage {self.stage} dataset",
            "",
            f"Source: {self.source}. Rows: {len(self.rows)} "
            f"({', '.join(f'{k} {v}' for k, v in sorted(categories.items()))}).",
            "",
            *[f"* {note}" for note in self.notes],
            "",
            "Rejected: "
            + (", ".join(f"{k}: {v}" for k, v in sorted(self.rejected.items())) or "none"),
            "",
            'Load with `datasets.load_dataset("json", data_files="data.jsonl", split="train")`.',
        ]
        (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path


def to_sft_messages(messages: Sequence[Message]) -> list[Message]:
    """Environment messages → TRL conversational tool-calling format: each assistant turn's
    ``<tool_call>`` blocks become ``tool_calls`` entries (arguments as dicts, statement
    lists joined into one script) and the text
    outside them the content; parse-error feedback stays a user message."""
    out: list[Message] = []
    for m in messages:
        if m.get("role") != "assistant":
            out.append({k: m[k] for k in ("role", "content", "name") if k in m})
            continue
        content = str(m.get("content") or "")
        calls = parse_turn(content, TOOL_NAMES).calls
        text = content.split("<tool_call>", 1)[0].strip()
        entry: Message = {"role": "assistant", "content": text}
        if calls:
            entry["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": _arguments(c)}}
                for c in calls
            ]
        out.append(entry)
    return out


def _arguments(call: ToolCall) -> dict[str, Any]:
    """A list of statements becomes one script, so every row has one type per argument
    (Arrow-backed datasets need that) and matches the ``sql: str`` tool of stage 4."""
    args = dict(call.arguments)
    if isinstance(args.get("sql"), list):
        args["sql"] = join_statements(args["sql"])
    return args


def build_tool_use_sft(
    tasks: Sequence[Task],
    databases: Mapping[str, Path],
    teacher: Agent,
    *,
    source: str = "",
    rollout: RolloutConfig | None = None,
    eval_config: EvalConfig | None = None,
    progress: Callable[[Trajectory], None] | None = None,
    guide: bool = True,
) -> StageDataset:
    """Stage 2: play every task with `teacher` in the environment; keep the episodes whose
    submission passes all tests. A model teacher is guided by the reference solution
    (`GuidedAgent`; ``guide=False`` turns that off); scripted teachers need no guide."""
    if guide and not isinstance(teacher, ScriptedAgent):
        teacher = GuidedAgent(teacher, tasks)
    result = evaluate_agent(tasks, databases, teacher, rollout, eval_config, progress)
    data = StageDataset(2, [], source or f"teacher {getattr(teacher, 'name', teacher)!s}")
    data.notes.append("kept: episodes whose submission passed every hidden test (success)")
    for traj in result.trajectories:
        if traj.infra_error:
            data.rejected["infrastructure error"] += 1
        elif not traj.success:
            data.rejected[f"not solved ({traj.stop_reason})"] += 1
        else:
            data.rows.append(
                {
                    "messages": to_sft_messages(traj.messages),
                    "tools": [dict(t) for t in TOOLS],
                    "instance_id": traj.instance_id,
                    "db_id": traj.db_id,
                    "category": traj.category,
                    "turns": traj.turns,
                }
            )
    return data


def build_rl_prompts(
    tasks: Sequence[Task],
    databases: Mapping[str, Path],
    *,
    stage: int,
    source: str = "",
    sample_rows: int = 3,
    budget_chars: int = 8000,
    with_tools: bool = True,
) -> StageDataset:
    """Stages 3 (single-turn) and 4 (agentic): the opening conversation of each task and the
    keys the reward function and environment use to find the task. Stage-4 rows carry the
    tool schemas as ``tools`` for trainers that read them from the data; ``with_tools=False``
    leaves them out for one that takes its tools elsewhere (TRL's ``environment_factory``
    derives them from the environment's methods)."""
    if stage not in (3, 4):
        raise ValueError(f"RL prompt datasets are stages 3 and 4, not {stage}")
    data = StageDataset(stage, [], source or "tasks")
    data.notes.append(
        "single-turn prompts (answer in an <answer> block)"
        if stage == 3
        else "agentic prompts (tools)"
    )
    for task in tasks:
        if not task.has_reference:
            data.rejected["no reference solution (cannot be rewarded)"] += 1
            continue
        row: dict[str, Any] = {
            "prompt": build_messages(
                task,
                databases[task.db_id],
                single_turn=stage == 3,
                sample_rows=sample_rows,
                budget_chars=budget_chars,
            ),
            "instance_id": task.instance_id,
            "db_id": task.db_id,
            "category": task.category.value,
        }
        if stage == 4 and with_tools:
            row["tools"] = [dict(t) for t in TOOLS]
        data.rows.append(row)
    return data


def build_reasoning_sft(
    tasks: Sequence[Task],
    databases: Mapping[str, Path],
    teacher: Teacher,
    *,
    source: str = "",
    eval_config: EvalConfig | None = None,
    progress: Callable[[Task], None] | None = None,
    sample_rows: int = 3,
    budget_chars: int = 8000,
    chunk: int = 32,
) -> StageDataset:
    """Stage 1: single-turn prompt -> teacher explanation + fixed SQL, verified by execution.
    `sample_rows` and `budget_chars` size the schema in the prompt; the teacher is asked
    for `chunk` tasks at a time (concurrently, for a model teacher)."""
    data = StageDataset(1, [], source or f"teacher {teacher.name}")
    data.notes.append("kept: answers whose SQL passes every test of the task when executed")
    used = {t.db_id: databases[t.db_id] for t in tasks}
    with scoring_session(
        used, replicas_per_db=2, eval_config=eval_config, prefix="birdrl-stage1-"
    ) as (pool, evaluator):
        for start in range(0, len(tasks), chunk):
            batch = []
            for task in tasks[start : start + chunk]:
                if progress is not None:
                    progress(task)
                if not task.has_reference:
                    data.rejected["no reference solution"] += 1
                    continue
                batch.append((task, gather_evidence(task, pool)))
            # one concurrent round of teacher calls per chunk, cached before the next one
            for (task, _), explanation in zip(batch, teacher.explain_many(batch), strict=True):
                _keep_verified(
                    data, task, explanation, evaluator, databases, sample_rows, budget_chars
                )
    return data


def _keep_verified(
    data: StageDataset,
    task: Task,
    explanation: str,
    evaluator: Evaluator,
    databases: Mapping[str, Path],
    sample_rows: int,
    budget_chars: int,
) -> None:
    """Add the stage-1 row if the explanation's SQL passes the task's tests."""
    answer = extract_answer(explanation)
    if answer is None:  # an offline explanation: append the verified fix
        script = join_statements(task.sol_sql)
        explanation = f"{explanation}\n<answer>\n```sql\n{script}\n```\n</answer>"
        answer = script
    report = evaluator.evaluate(task, split_statements(answer))
    if report.infra_error:
        data.rejected["infrastructure error"] += 1
        return
    if not report.success:
        data.rejected["answer fails the tests"] += 1
        return
    prompt = build_messages(
        task,
        databases[task.db_id],
        single_turn=True,
        sample_rows=sample_rows,
        budget_chars=budget_chars,
    )
    data.rows.append(
        {
            "messages": [*prompt, {"role": "assistant", "content": explanation}],
            "instance_id": task.instance_id,
            "db_id": task.db_id,
            "category": task.category.value,
        }
    )
