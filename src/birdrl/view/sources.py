"""What `birdrl view` reads: run artifacts, turned into plain, JSON-ready records.

A *source* is one thing the user pointed at: a curriculum run directory (stages 0-4, each
with its held-out episodes, training log and logged GRPO groups), a trajectories JSONL of
``birdrl eval --agent``, or a ``--json`` report of ``birdrl eval`` (agent episodes without
their messages, or prediction scores). Every source is a list of *columns* (a stage, or the
single evaluation), each with its episodes keyed by ``instance_id``. Nothing here runs a
model or a database; missing pieces become notes the page shows, never an empty page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.env.types import explored_first
from birdrl.errors import BirdrlError
from birdrl.evaluation.intervals import explored_interval, sr_change, sr_interval

__all__ = [
    "Column",
    "Source",
    "ViewError",
    "load_source",
    "outcome",
]


class ViewError(BirdrlError):
    """A path given to `birdrl view` is not something it can show (and why)."""


OUTCOMES = ("solved", "partial", "failed", "no submission", "infra error", "not run")
"""Episode outcomes, best first (the task table's filter values)."""

_CURVE_SKIP = {"step", "epoch", "train_runtime", "total_flos", "train_loss", "step_time"}
_STAGE_DIR = re.compile(r"^stage(\d+)$")
_SPLIT_FILE = re.compile(r"^eval_trajectories_([a-z0-9][a-z0-9_-]*)\.jsonl$")
MAIN_SPLIT = "held-out"
"""A run's ``eval_tasks`` among its evaluated splits (`birdrl.training.config`)."""


@dataclass
class Column:
    """One evaluated set of episodes: a curriculum stage, or one evaluation."""

    key: str
    title: str
    stage: int | None = None
    kind: str = "eval"
    """``base``, ``sft``, ``grpo`` (a curriculum stage) or ``eval`` / ``predictions``."""
    split: str | None = None
    """A run's held-out split: ``held-out`` (its ``eval_tasks``) or a further split's
    label; None for an evaluation that is not a run's."""
    semantics: str | None = None
    """How it was scored (``official``, ``strict``; a stage: its evaluation's, then its
    reward's); None where the file does not say."""
    seconds: float | None = None
    evaluation: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    curves: dict[str, list[list[float]]] = field(default_factory=dict)
    episodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    """95% intervals (`birdrl.evaluation.intervals`), each ``{estimate, low, high}``:
    ``sr`` (Wilson), ``explored`` (the share of episodes that ran execute_sql before
    submitting), ``change`` (the SR against ``change_from``, the previous evaluated column
    of the same split: Newcombe's, paired over the same tasks)."""

    def summary(self) -> dict[str, Any]:
        """Everything but the episodes and groups (the run page's row)."""
        return {
            "key": self.key,
            "title": self.title,
            "stage": self.stage,
            "kind": self.kind,
            "split": self.split,
            "stats": self.stats,
            "semantics": self.semantics,
            "seconds": self.seconds,
            "evaluation": self.evaluation,
            "diagnostics": self.diagnostics,
            "notes": self.notes,
            "curves": self.curves,
            "episodes": len(self.episodes),
            "groups": len(self.groups),
            "group_steps": sorted({int(g.get("step", 0)) for g in self.groups}),
        }


@dataclass
class Source:
    """One path the user gave, read."""

    label: str
    path: str
    kind: str
    """``run``, ``trajectories`` or ``report``."""
    columns: list[Column]
    config: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    splits: dict[str, str] = field(default_factory=dict)
    """A run's held-out splits: label → task source, as its configuration names them."""


def outcome(episode: Mapping[str, Any]) -> str:
    """One word for how an episode ended (see `OUTCOMES`)."""
    if episode.get("infra_error"):
        return "infra error"
    if episode.get("success"):
        return "solved"
    if episode.get("submission") is None and episode.get("stop_reason") != "submitted":
        return "no submission"
    return "partial" if float(episode.get("reward") or 0) > 0 else "failed"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ViewError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ViewError(
                    f"{path}, line {number}, column {exc.colno}: not valid JSON ({exc.msg})"
                ) from None
            if not isinstance(record, dict):
                raise ViewError(f"{path}, line {number}: expected a JSON object per line")
            yield record


def _episode(raw: Mapping[str, Any], tasks: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A trajectory (or a report row) with every field the episode page reads, the task's
    SQL filled in from `tasks` when the record predates it, and its outcome."""
    iid = raw.get("instance_id")
    if not isinstance(iid, str) or not iid:
        raise ViewError(f"{where}: an episode without an instance_id")
    ep = dict(raw)
    task = tasks.get(iid)
    for name in ("query", "issue_sql", "sol_sql"):
        if not ep.get(name) and task is not None:
            value = getattr(task, name, None)
            ep[name] = list(value) if isinstance(value, (list, tuple)) else value
    if task is not None:
        ep.setdefault("db_id", task.db_id)
        ep.setdefault("category", getattr(getattr(task, "category", None), "value", None))
    if not ep.get("query"):
        ep["query"] = _issue_text(ep.get("messages") or [])
    ep.setdefault("messages", [])
    ep["outcome"] = outcome(ep)
    return ep


def _issue_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The user's issue out of the opening prompt (records written before ``query``)."""
    for message in messages:
        if message.get("role") == "user":
            text = str(message.get("content") or "")
            match = re.search(r"User issue:\n(.*?)(?:\n\nThe user's SQL|\Z)", text, re.DOTALL)
            return match.group(1).strip() if match else None
    return None


def _curves(log_history: Sequence[Mapping[str, Any]]) -> dict[str, list[list[float]]]:
    """Every numeric metric logged per step, as ``[step, value]`` points."""
    curves: dict[str, list[list[float]]] = {}
    for entry in log_history:
        step = entry.get("step")
        if not isinstance(step, (int, float)) or "train_runtime" in entry:
            continue
        for key, value in entry.items():
            if key in _CURVE_SKIP or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)) and value == value:  # not NaN
                curves.setdefault(key, []).append([float(step), float(value)])
    return curves


def _groups(path: Path) -> list[dict[str, Any]]:
    """Logged GRPO groups; a resumed stage appends, so the last record of a step wins."""
    if not path.is_file():
        return []
    latest: dict[tuple[int, int], dict[str, Any]] = {}
    for record in _read_jsonl(path):
        latest[(int(record.get("step", 0)), int(record.get("group", 0)))] = record
    return [latest[k] for k in sorted(latest)]


def _run(path: Path, tasks: Mapping[str, Any]) -> Source:
    """A curriculum run: a column per stage on ``eval_tasks``, then, for each further
    held-out split, a column per stage that evaluated it."""
    config = _read_json(path / "config.json") if (path / "config.json").is_file() else None
    stage_dirs = sorted(
        (int(m.group(1)), d)
        for d in path.iterdir()
        if d.is_dir() and (m := _STAGE_DIR.match(d.name))
    )
    source = Source(
        path.name or str(path), str(path), "run", [], config, splits=_split_sources(config)
    )
    if not stage_dirs:
        source.notes.append("no stage has finished yet: no stageN/record.json in this directory")
    further: dict[str, list[Column]] = {}
    for number, stage_dir in stage_dirs:
        record_path = stage_dir / "record.json"
        record = _read_json(record_path) if record_path.is_file() else None
        column = Column(f"stage{number}", f"stage {number}", stage=number, split=MAIN_SPLIT)
        if record is not None:
            column.title = f"stage {number}: {record.get('name', '')}".rstrip(": ")
            column.kind = str(record.get("kind", "eval"))
            column.seconds = record.get("seconds")
            column.evaluation = record.get("evaluation")
            column.diagnostics = record.get("diagnostics")
            column.semantics = _semantics(record.get("semantics"), column.kind)
            column.notes = [str(n) for n in record.get("notes", [])]
            column.curves = _curves(record.get("log_history", []))
        else:
            column.notes.append("this stage has not finished: no record.json yet")
        trajectories = stage_dir / "eval_trajectories.jsonl"
        if trajectories.is_file():
            _read_episodes(column, trajectories, tasks)
        elif column.evaluation is not None:
            column.notes.append(
                "no eval_trajectories.jsonl: the episodes of this evaluation were not kept"
            )
        elif record is not None:
            column.notes.append("this stage was not evaluated")
        column.groups = _groups(stage_dir / "groups.jsonl")
        if column.kind == "grpo" and not column.groups:
            column.notes.append("no GRPO groups logged (groups.jsonl is missing or empty)")
        source.columns.append(column)
        for label, evaluation in _further_splits(record, stage_dir).items():
            split = Column(
                f"{column.key}-{label}",
                f"{column.title} · {label}",
                stage=number,
                kind=column.kind,
                split=label,
                semantics=column.semantics,
                evaluation=evaluation,
            )
            episodes = stage_dir / f"eval_trajectories_{label}.jsonl"
            if episodes.is_file():
                _read_episodes(split, episodes, tasks)
                split.evaluation = split.evaluation or _summarize(split.episodes.values())
            else:
                split.notes.append(f"no {episodes.name}: the episodes of this split were not kept")
            further.setdefault(label, []).append(split)
    for columns in further.values():
        source.columns += columns
    _add_stats(source.columns)
    return source


def _split_sources(config: Any) -> dict[str, str]:
    """label → task source of the held-out splits a run's ``config.json`` names."""
    if not isinstance(config, Mapping):
        return {}
    found = {MAIN_SPLIT: config.get("eval_tasks"), "easy": config.get("easy_eval_tasks")}
    evaluation = config.get("evaluation")
    splits = evaluation.get("splits") if isinstance(evaluation, Mapping) else None
    for split in splits if isinstance(splits, list) else []:
        if isinstance(split, Mapping):
            found[str(split.get("label"))] = split.get("tasks")
    return {k: str(v) for k, v in found.items() if v}


def _read_episodes(column: Column, path: Path, tasks: Mapping[str, Any]) -> None:
    for raw in _read_jsonl(path):
        ep = _episode(raw, tasks, str(path))
        column.episodes[ep["instance_id"]] = ep


def _further_splits(record: Mapping[str, Any] | None, stage_dir: Path) -> dict[str, Any]:
    """label → evaluation (None where only episodes were kept) of each further held-out
    split a stage evaluated: its record's ``split_evaluations`` (``easy_evaluation`` in
    records written before them), then any other ``eval_trajectories_<label>.jsonl``."""
    found: dict[str, Any] = {}
    if record is not None:
        if isinstance(record.get("easy_evaluation"), Mapping):
            found["easy"] = record["easy_evaluation"]
        given = record.get("split_evaluations")
        if isinstance(given, Mapping):
            found.update({str(k): v for k, v in given.items() if isinstance(v, Mapping)})
    for path in sorted(stage_dir.glob("eval_trajectories_*.jsonl")):
        match = _SPLIT_FILE.match(path.name)
        if match and match.group(1) not in found:
            found[match.group(1)] = None
    return found


def _add_stats(columns: Sequence[Column]) -> None:
    """Each evaluated column's intervals; a change is taken against the previous evaluated
    column of the same split (a run's stages in order)."""
    previous: dict[str, Column] = {}
    for column in columns:
        ev = column.evaluation
        if not isinstance(ev, Mapping):
            continue
        stats: dict[str, Any] = {}
        for name, interval in (("sr", sr_interval(ev)), ("explored", explored_interval(ev))):
            if interval is not None:
                stats[name] = interval.to_dict()
        before = previous.get(column.split) if column.split is not None else None
        change = None if before is None else sr_change(ev, before.evaluation or {})
        if change is not None and before is not None:
            stats["change"], stats["change_from"] = change.to_dict(), before.key
        column.stats = stats
        if column.split is not None:
            previous[column.split] = column


def _semantics(given: Any, kind: str) -> str | None:
    """A stage record's ``{"evaluation": ..., "reward": ...}`` as one cell."""
    if not isinstance(given, Mapping):
        return None
    text = str(given.get("evaluation", "?"))
    if kind == "grpo" and given.get("reward"):
        text += f", reward {given['reward']}"
    return text


def _trajectories(path: Path, tasks: Mapping[str, Any]) -> Source:
    column = Column("eval", "evaluation")
    for raw in _read_jsonl(path):
        ep = _episode(raw, tasks, str(path))
        column.episodes[ep["instance_id"]] = ep
    if not column.episodes:
        column.notes.append(f"{path.name} holds no episodes")
    column.evaluation = _summarize(column.episodes.values())
    _add_stats([column])
    return Source(path.stem, str(path), "trajectories", [column])


def _report(path: Path, data: Mapping[str, Any], tasks: Mapping[str, Any]) -> Source:
    column = Column("eval", "evaluation")
    if isinstance(data.get("semantics"), str):
        column.semantics = data["semantics"]
    given = data.get("predictions")
    predictions: dict[str, Any] = given if isinstance(given, dict) else {}
    if "episodes" in data:
        column.notes.append(
            "a --json report keeps no messages: pass the --trajectories file to see the turns"
        )
        rows = data["episodes"]
    else:
        column.kind = "predictions"
        rows = []
        for report in data["reports"]:
            row = dict(report)
            row["stop_reason"] = "submitted"
            row["submission"] = predictions.get(str(row.get("instance_id")))
            row["tests"] = {
                "passed": report.get("passed"),
                "expected": int(
                    report.get("expected_tests", max(int(report.get("total_test_cases") or 0), 1))
                ),
                "run": report.get("tests_run"),
                "failed_tests": report.get("failed_tests", []),
                "errors": report.get("errors", []),
                "infra_error": report.get("infra_error"),
            }
            row["success"] = report.get("status") == "success"
            rows.append(row)
        if not predictions:
            column.notes.append("this report does not hold the predicted SQL (only their scores)")
    for raw in rows:
        ep = _episode(raw, tasks, str(path))
        column.episodes[ep["instance_id"]] = ep
    column.evaluation = _summarize(column.episodes.values())
    _add_stats([column])
    return Source(path.stem, str(path), "report", [column])


def _summarize(episodes: Any) -> dict[str, Any]:
    """SR, per category, mean reward and stop reasons of a loose set of episodes."""
    eps = list(episodes)
    n = len(eps)
    per_category: dict[str, list[int]] = {}
    stops: dict[str, int] = {}
    for ep in eps:
        cell = per_category.setdefault(str(ep.get("category")), [0, 0])
        cell[0] += 1
        cell[1] += bool(ep.get("success"))
        reason = str(ep.get("stop_reason", "?"))
        stops[reason] = stops.get(reason, 0) + 1
    calls = sum(int(ep.get("tool_calls") or 0) for ep in eps)
    invalid = sum(int(ep.get("invalid_tool_calls") or 0) for ep in eps)
    submitted = sum(ep.get("stop_reason") == "submitted" for ep in eps)
    looked = [explored_first(_tools(ep)) for ep in eps if ep.get("turn_log")]
    return {
        "n": n,
        "success_rate": sum(bool(ep.get("success")) for ep in eps) / n if n else None,
        "per_category": {k: v[1] / v[0] for k, v in sorted(per_category.items())},
        "mean_reward": sum(float(ep.get("reward") or 0) for ep in eps) / n if n else None,
        "tool_call_validity": (calls - invalid) / calls if calls else None,
        "submission_rate": submitted / n if n else None,
        "stop_reasons": stops,
        # only where every episode kept its turns (a --json report keeps none)
        "explored_first": sum(looked) if n and len(looked) == n else None,
        "explored_first_rate": sum(looked) / n if n and len(looked) == n else None,
    }


def _tools(episode: Mapping[str, Any]) -> list[str]:
    """The tools an episode's turns called, in order (`birdrl.training.curriculum`'s
    ``tools_called`` on a trajectory record)."""
    return [
        str(call.get("name"))
        for turn in episode.get("turn_log") or []
        for call in (turn.get("calls") or [] if isinstance(turn, Mapping) else [])
        if isinstance(call, Mapping)
    ]


def load_source(path: str | Path, tasks: Mapping[str, Any] | None = None) -> Source:
    """Read `path` (a run directory, a trajectories JSONL or a ``--json`` report); `tasks`
    (instance_id → task) fills in the issue and reference SQL of records without them."""
    p = Path(path).expanduser()
    known = tasks or {}
    if not p.exists():
        raise ViewError(f"{p}: no such file or directory")
    if p.is_dir():
        if not (p / "config.json").is_file() and not any(p.glob("stage*/record.json")):
            raise ViewError(
                f"{p}: not a curriculum run directory (no config.json, no stageN/record.json)"
            )
        return _run(p, known)
    if p.suffix == ".jsonl":
        return _trajectories(p, known)
    if p.suffix == ".json":
        data = _read_json(p)
        if isinstance(data, dict) and ("reports" in data or "episodes" in data):
            return _report(p, data, known)
        if isinstance(data, dict) and all(
            isinstance(v, dict) and ("reports" in v or "episodes" in v) for v in data.values()
        ):
            raise ViewError(
                f"{p}: a multi-dialect report ({', '.join(data)}); run birdrl eval with one "
                "--dialect to view it"
            )
        raise ViewError(f"{p}: not a birdrl eval --json report (no 'reports' or 'episodes')")
    raise ViewError(
        f"{p}: give a run directory, a trajectories .jsonl or an eval --json report (.json)"
    )
