"""The curriculum report: one record per finished stage, rendered as ``report.md`` with PNG
plots (training curves, success rate per stage). It only shows what was measured: a
missing metric is "—", an unchanged success rate says "no change"."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.evaluation.intervals import Interval, explored_interval, sr_change, sr_interval
from birdrl.training.diagnostics import WEIGHT_KEY, finite_number, summarize, verdicts

__all__ = [
    "ReportError",
    "StageRecord",
    "explored_interval",
    "markdown_table",
    "number_cell",
    "sr_change",
    "sr_interval",
    "write_report",
]

DASH = "—"
KINDS = ("base", "sft", "grpo")
SINGLE_TURN_STAGE = 3
"""The stage that trains without tools (its own training cannot teach looking first)."""
EASY_LEGEND = (
    "Easy split: single-edit bugs synthesized from the held-out test split's reference "
    "solutions (a flipped ORDER BY, a LIMIT off by one, SUM for AVG, ...), never from "
    "training tasks and checked for text overlap with them; easier than the benchmark, so "
    "a small model's changes show. Not comparable with published numbers."
)


class ReportError(BirdrlError):
    """A stage record that cannot be read (missing fields, wrong kind)."""


@dataclass
class StageRecord:
    """What one finished stage produced (stage 0: the starting model, evaluated only)."""

    stage: int
    name: str
    kind: str
    """``sft``, ``grpo`` or ``base``."""
    model_dir: str
    seconds: float
    """Training time (for ``base``: evaluation time)."""
    log_history: list[dict[str, Any]]
    """``transformers`` ``Trainer.state.log_history``."""
    evaluation: dict[str, Any] | None
    """``mode``, ``n``, ``success_rate`` (0..1), ``per_category``, ``avg_turns``, ... or None."""
    notes: list[str]
    generation: dict[str, Any] | None = None
    """What generated in each phase (`birdrl.training.generation.RunGeneration.record`):
    the plan, the bf16 capability found, the engine and dtype of the evaluation, of the
    GRPO rollouts and of training; None in records written before it existed."""
    split_evaluations: dict[str, dict[str, Any]] | None = None
    """The same measurement as `evaluation` on each further held-out split, by label
    (`birdrl.training.config.CurriculumConfig.held_out_splits`); None without any.
    Records written before it kept the easy split's as ``easy_evaluation``, read here as
    the split ``easy``."""
    diagnostics: dict[str, Any] | None = None
    """Learning-signal summary (`birdrl.training.diagnostics.summarize`); derived from
    `log_history` when not given (and for records written before it existed)."""
    semantics: dict[str, str] | None = None
    """The scoring semantics (`birdrl.evaluation.semantics`) of the stage's ``evaluation``
    and of its ``reward``; None in records written before it existed."""

    def __post_init__(self) -> None:
        if self.diagnostics is None and self.kind in ("sft", "grpo"):
            self.diagnostics = summarize(self.kind, self.log_history)

    @property
    def easy_evaluation(self) -> dict[str, Any] | None:
        """The split ``easy``'s evaluation (what older records and callers name so)."""
        return (self.split_evaluations or {}).get("easy")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageRecord:
        names = [f.name for f in fields(cls)]
        optional = {f.name for f in fields(cls) if f.default is not MISSING}
        missing = [n for n in names if n not in data and n not in optional]
        if missing:
            raise ReportError(f"stage record lacks {', '.join(missing)}: {dict(data)!r:.200}")
        if data["kind"] not in KINDS:
            raise ReportError(
                f"stage {data['stage']}: kind must be one of {KINDS}, not {data['kind']!r}"
            )
        values = {n: data[n] for n in names if n in data}
        easy = data.get("easy_evaluation")  # a record written before split_evaluations
        if easy is not None:
            values["split_evaluations"] = {"easy": easy, **(values.get("split_evaluations") or {})}
        values["log_history"] = [dict(e) for e in values["log_history"]]
        values["notes"] = list(values["notes"])
        return cls(**values)


# -- numbers ---------------------------------------------------------------------------------


def _series(log: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the entries that logged a finite number under `key`."""
    found = [(float(e.get("step", i)), finite_number(e.get(key))) for i, e in enumerate(log)]
    return [s for s, v in found if v is not None], [v for _, v in found if v is not None]


def _signal(record: StageRecord) -> str:
    """First → last of the stage's training signal (loss for SFT, mean reward for GRPO), each
    the mean of the first / last k logged values (k = n // 4, between 1 and 5)."""
    key = {"sft": "loss", "grpo": "reward"}.get(record.kind)
    if key is None:
        return DASH
    values = _series(record.log_history, key)[1]
    if not values:
        return f"{key}: {DASH}"
    if len(values) == 1:
        return f"{key} {values[0]:.3f} (1 logged step)"
    k = max(1, min(5, len(values) // 4))
    first, last = sum(values[:k]) / k, sum(values[-k:]) / k
    return f"{key} {first:.3f} → {last:.3f}" + (f" (means of {k})" if k > 1 else "")


def _steps(record: StageRecord) -> str:
    steps = [e["step"] for e in record.log_history if isinstance(e.get("step"), int | float)]
    return str(int(max(steps))) if steps else DASH


def _duration(record: StageRecord) -> str:
    s = finite_number(record.seconds)
    if s is None:
        return DASH
    text = f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min" if s >= 3600 else f"{s:.1f} s"
    text = f"{int(s // 60)} min {int(s % 60):02d} s" if 60 <= s < 3600 else text
    return text + (" (eval)" if record.kind == "base" else "")


def run_seconds(records: Sequence[StageRecord]) -> float | None:
    """Every stage's training and evaluation, summed from the records (stage 0's seconds are
    its evaluation's; a stage not evaluated adds none); None when a record holds no time."""
    total = 0.0
    for r in records:
        seconds = finite_number(r.seconds)
        if seconds is None:
            return None
        total += seconds
        if r.kind != "base":
            total += finite_number((r.evaluation or {}).get("seconds")) or 0.0
    return total


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.1f}%"


def _delta(current: float | None, previous: float | None) -> str:
    if current is None or previous is None:
        return DASH
    points = round(100 * (current - previous), 1)
    return "no change" if points == 0 else f"{points:+.1f} pts"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table (``|`` and newlines in cells escaped)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


# -- plots -----------------------------------------------------------------------------------


def _plots(plot_dir: Path, records: Sequence[StageRecord]) -> dict[int | None, list[Path]]:
    """Write the PNGs; raises ImportError without matplotlib. Keys: stage, None = overall."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg, no pyplot state
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    def save(fig: Figure, name: str) -> Path:
        FigureCanvasAgg(fig)
        fig.tight_layout()
        fig.savefig(plot_dir / name, dpi=100)
        return plot_dir / name

    plot_dir.mkdir(parents=True, exist_ok=True)
    out: dict[int | None, list[Path]] = {}
    for r in records:
        keys = {"sft": ["loss"], "grpo": ["reward", "kl"]}.get(r.kind, []) + _SIGNAL_PLOTS.get(
            r.kind, []
        )
        for key in keys:
            steps, values = _series(r.log_history, key)
            if not values:
                continue
            fig = Figure(figsize=(6, 3.5))
            ax = fig.subplots()
            ax.plot(steps, values, marker="o" if len(values) < 30 else None, lw=1.5)
            std_steps, std = _series(r.log_history, "reward_std")
            band = key == "reward" and std_steps == steps
            if band:
                pairs = list(zip(values, std, strict=True))
                ax.fill_between(
                    steps, [v - d for v, d in pairs], [v + d for v, d in pairs], alpha=0.2
                )
            label = _PLOT_LABELS.get(key, key)
            title = f"stage {r.stage}: {r.name} — {label}" + (" (band: ± std)" if band else "")
            ax.set(xlabel="optimizer step", ylabel=label, title=title)
            if key in _SHARES:
                ax.set_ylim(-0.05, 1.05)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            name = key.replace("/", "-")
            out.setdefault(r.stage, []).append(save(fig, f"stage{r.stage}_{name}.png"))
    evaluated = [
        r
        for r in records
        if r.evaluation and finite_number(r.evaluation.get("success_rate")) is not None
    ]
    if evaluated:
        groups = ["overall", *_categories(evaluated)]
        fig = Figure(figsize=(max(6, 1.4 * len(groups) + 2), 4))
        ax = fig.subplots()
        width = 0.8 / len(evaluated)
        for i, r in enumerate(evaluated):
            ev = r.evaluation or {}
            per = ev.get("per_category") or {}
            heights = [finite_number(ev.get("success_rate"))] + [
                finite_number(per.get(c)) for c in groups[1:]
            ]
            xs = [g + (i - (len(evaluated) - 1) / 2) * width for g in range(len(groups))]
            tops = [math.nan if h is None else 100 * h for h in heights]  # missing: no bar
            bars = ax.bar(xs, tops, width, label=f"{r.stage}: {r.name}")
            ax.bar_label(bars, ["" if h is None else f"{100 * h:.0f}" for h in heights], fontsize=7)
        ax.set_xticks(range(len(groups)), groups)
        ax.set(ylabel="success rate (%)", ylim=(0, 100), title="success rate per stage")
        ax.legend(fontsize="small")
        out[None] = [save(fig, "success_rate.png")]
    return out


def _categories(records: Sequence[StageRecord]) -> list[str]:
    return sorted({c for r in records for c in (r.evaluation or {}).get("per_category") or {}})


# -- the report ------------------------------------------------------------------------------


def number_cell(value: Any, fmt: str) -> str:
    """`value` formatted with `fmt`, or a dash when it is not a finite number."""
    rate = finite_number(value)
    return DASH if rate is None else format(rate, fmt)


def _bounds(iv: Interval, signed: bool = False) -> str:
    fmt = "+.1f" if signed else ".1f"
    return f"[{100 * iv.low:{fmt}}, {100 * iv.high:{fmt}}]"


def _sr_row(r: StageRecord, prev: Mapping[str, Any], categories: Sequence[str]) -> list[str]:
    ev = r.evaluation or {}
    sr = finite_number(ev.get("success_rate"))
    interval = sr_interval(ev)
    mode = str(ev.get("mode", DASH)) if r.evaluation is not None else "not evaluated"
    row = [str(r.stage), r.name, mode, str(ev.get("n", DASH)), _pct(sr)]
    row.append(DASH if interval is None else _bounds(interval))
    change = sr_change(ev, prev) if prev else None
    delta = _delta(sr, finite_number(prev.get("success_rate"))) if prev else DASH
    row.append(delta if change is None else f"{delta} {_bounds(change, signed=True)}")
    per, prev_per = ev.get("per_category") or {}, prev.get("per_category") or {}
    for c in categories:
        value = finite_number(per.get(c))
        change_c = _delta(value, finite_number(prev_per.get(c)))
        row.append(_pct(value) + (f" ({change_c})" if change_c != DASH else ""))
    valid = finite_number(ev.get("tool_call_validity"))
    row += [
        number_cell(ev.get("avg_turns"), ".2f"),
        _pct(valid),
        number_cell(ev.get("mean_reward"), ".3f"),
    ]
    return row + _episode_cells(ev) + [_explored_cell(r.stage, ev)]


def _explored_cell(stage: int, ev: Mapping[str, Any]) -> str:
    iv = explored_interval(ev)
    cell = DASH
    if iv is not None:
        cell = f"{_pct(iv.estimate)} ({ev.get('explored_first')}/{ev.get('n')}) {_bounds(iv)}"
    if stage == SINGLE_TURN_STAGE and ev:
        cell += " (stage 3 trains single-turn, without tools: it cannot learn to look)"
    return cell


def _verdict(change: Interval) -> str:
    if change.includes_zero:
        return "not distinguishable from no change (the interval includes 0)"
    return "an increase" if change.estimate > 0 else "a decrease"


def _sr_section(records: Sequence[StageRecord]) -> list[str]:
    evaluated = [r for r in records if r.evaluation is not None]
    if not evaluated:
        return ["No stage was evaluated."]
    categories = _categories(evaluated)
    header = ["stage", "name", "mode", "n", "SR", "SR 95% interval", "Δ SR [95% interval]"]
    rows: list[list[str]] = []
    changes: list[tuple[StageRecord, StageRecord, Interval]] = []
    prev: dict[str, Any] = {}  # the evaluation of the previous evaluated stage
    prev_record: StageRecord | None = None
    unlike = False
    for r in records:
        row = _sr_row(r, prev if r.evaluation else {}, categories)
        if (
            r.evaluation
            and prev
            and [r.evaluation.get(k) for k in ("mode", "n")] != [prev.get(k) for k in ("mode", "n")]
        ):
            row[6], unlike = row[6] + " †", True
        if r.evaluation and prev and prev_record is not None:
            change = sr_change(r.evaluation, prev)
            if change is not None:
                changes.append((prev_record, r, change))
        rows.append(row)
        if r.evaluation:
            prev, prev_record = r.evaluation, r
    lines = markdown_table(
        [
            *header,
            *categories,
            "avg turns",
            "valid tool calls",
            "mean reward",
            *EPISODE_COLUMNS,
            "explored first [95% interval]",
        ],
        rows,
    )
    lines += [
        "",
        "SR: share of held-out tasks solved, with its Wilson 95% interval; Δ: against the "
        "previous evaluated stage, in points, with Newcombe's 95% interval (paired: the "
        "same tasks at both stages). Explored first: episodes that ran execute_sql before "
        "submitting.",
    ]
    lines.append(EPISODE_LEGEND)
    if unlike:
        lines.append("† evaluated differently (mode or task count) from the previous stage.")
    if changes:
        lines.append("")
        for a, b, change in changes:
            shown = _delta(
                *(finite_number((x.evaluation or {}).get("success_rate")) for x in (b, a))
            )
            lines.append(
                f"- stage {a.stage} → stage {b.stage} ({b.name}): {shown} "
                f"{_bounds(change, signed=True)}: {_verdict(change)}."
            )
    # the last stage against every earlier one the lines above do not pair it with: the
    # whole run (from the first) and, say, multi-turn GRPO against the last SFT stage
    last = evaluated[-1]
    for first in evaluated[:-2] if len(evaluated) > 2 else evaluated[:1]:
        a, b = (finite_number((x.evaluation or {}).get("success_rate")) for x in (first, last))
        if first is last or a is None or b is None:
            continue
        overall = sr_change(last.evaluation or {}, first.evaluation or {})
        extra = "" if overall is None else f", 95% interval {_bounds(overall, signed=True)}"
        lines.append(
            f"\nFrom stage {first.stage} ({first.name}) to stage {last.stage} ({last.name}): "
            f"{_pct(a)} → {_pct(b)} ({_delta(b, a)}{extra})."
            + ("" if overall is None else f" That is {_verdict(overall)}.")
        )
    return lines


# -- learning signal (birdrl.training.diagnostics) ----------------------------------------------

_SIGNAL_PLOTS = {
    "sft": [WEIGHT_KEY],
    "grpo": ["frac_reward_zero_std", "completions/clipped_ratio", WEIGHT_KEY],
}
"""Per-step diagnostics plotted next to loss / reward / KL (when logged)."""
_PLOT_LABELS = {
    "loss": "training loss",
    "reward": "mean reward",
    "kl": "KL to the reference",
    "frac_reward_zero_std": "share of groups without signal",
    "completions/clipped_ratio": "share of completions truncated",
    WEIGHT_KEY: "‖Δθ‖ / ‖θ‖ since the stage began",
}
"""What a reader sees on a plot's axis instead of the logged key."""
_SHARES = {"frac_reward_zero_std", "completions/clipped_ratio"}


def _signal_row(r: StageRecord) -> list[str]:
    d = r.diagnostics or {}
    change = finite_number(d.get("weight_change"))
    moved = DASH if change is None else ("0 (unchanged)" if change == 0 else f"{change:.2e}")
    if r.kind != "grpo":
        return [str(r.stage), r.name, moved] + [DASH] * 7
    groups, quiet = d.get("groups"), d.get("groups_no_signal")
    share = _pct(finite_number(d.get("no_signal_share")))
    no_signal = f"{quiet}/{groups} ({share})" if isinstance(groups, int) else share
    mean = number_cell(d.get("reward_mean"), ".3f")
    std = number_cell(d.get("reward_std_mean"), ".3f")
    calls = number_cell(d.get("valid_tool_calls_per_episode"), ".2f")
    subs = number_cell(d.get("submissions_per_episode"), ".2f")
    return [
        str(r.stage),
        r.name,
        moved,
        f"{mean} ± {std}" if mean != DASH else DASH,
        no_signal,
        _pct(finite_number(d.get("truncated_share"))),
        calls,
        subs,
        _pct(finite_number(d.get("episodes_with_tool_call"))),
        _pct(finite_number(d.get("episodes_looked_first"))),
    ]


def _signal_section(records: Sequence[StageRecord]) -> list[str]:
    """One row per trained stage, then a sentence for each stage that could not learn."""
    trained = [r for r in records if r.kind in ("sft", "grpo") and r.diagnostics]
    if not trained:
        return ["No stage was trained in this run."]
    header = [
        "stage",
        "name",
        "‖Δθ‖/‖θ‖",
        "reward mean ± std",
        "groups without signal",
        "truncated",
        "valid tool calls / episode",
        "submissions / episode",
        "episodes with a tool call",
        "looked before submitting",
    ]
    lines = markdown_table(header, [_signal_row(r) for r in trained])
    lines += [
        "",
        "‖Δθ‖/‖θ‖: relative weight change from the stage's start (the stage notes say over "
        "which weights). Groups without signal: GRPO groups whose completions all got the "
        "same reward (zero advantage, no gradient). Truncated: completions that hit "
        "max_completion_length. Means over the stage's steps.",
    ]
    sentences = [(r, s) for r in trained for s in verdicts(r.kind, r.diagnostics or {})]
    if sentences:
        lines.append("")
        lines += [f"- **stage {r.stage} ({r.name})**: {s}" for r, s in sentences]
    return lines


# -- held-out episodes ------------------------------------------------------------------------

EPISODE_COLUMNS = ("submitted", "episode ends")
EPISODE_LEGEND = (
    "Mean reward: the mean test pass rate of the submissions (0 without one); submitted: "
    "episodes that called submit_solution; episode ends: stop reasons."
)


def _episode_cells(ev: Mapping[str, Any]) -> list[str]:
    """Submission rate (with the count) and stop reasons of one evaluation; dashes for
    records written before these were measured."""
    rate, n = finite_number(ev.get("submission_rate")), ev.get("n")
    submitted = ev.get("submitted")
    cell = _pct(rate)
    if rate is not None and isinstance(submitted, int) and isinstance(n, int):
        cell += f" ({submitted}/{n})"
    reasons = ev.get("stop_reasons")
    ends = DASH
    if isinstance(reasons, Mapping) and reasons:
        ends = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
    return [cell, ends]


def _outcome(entry: Any) -> str:
    """One task at one stage: ``✓ 1.00`` (solved), ``submitted 0.33`` (submitted, reward =
    share of tests passed), ``no submit (max_turns)``; a dash when not measured."""
    if not isinstance(entry, Mapping):
        return DASH
    reward, reason = finite_number(entry.get("reward")), entry.get("stop_reason")
    shown = DASH if reward is None else f"{reward:.2f}"
    if entry.get("success"):
        return f"✓ {shown}"
    if reason == "submitted":
        return f"submitted {shown}"
    return f"no submit ({reason or DASH})"


def _tasks_section(
    records: Sequence[StageRecord], held_out: Sequence[Mapping[str, Any]] | None
) -> list[str]:
    """The held-out tasks (given, or else the union of what the records measured) with their
    outcome at each evaluated stage."""
    evaluated = [r for r in records if r.evaluation is not None]
    per_stage = {r.stage: (r.evaluation or {}).get("per_task") or {} for r in evaluated}
    tasks = [dict(t) for t in held_out or []]
    known = {t.get("instance_id") for t in tasks}
    for per in per_stage.values():
        for iid, entry in per.items():
            if iid not in known and isinstance(entry, Mapping):
                known.add(iid)
                tasks.append(
                    {"instance_id": iid, **{k: entry.get(k) for k in ("db_id", "category")}}
                )
    if not tasks:
        return ["No held-out task outcomes were recorded."]
    header = ["instance_id", "db_id", "category"]
    header += ["base" if r.stage == 0 else f"stage {r.stage}" for r in evaluated]
    rows = [
        [str(t.get("instance_id")), str(t.get("db_id") or DASH), str(t.get("category") or DASH)]
        + [_outcome(per_stage[r.stage].get(t.get("instance_id"))) for r in evaluated]
        for t in tasks
    ]
    dbs = sorted({str(t.get("db_id")) for t in tasks if t.get("db_id")})
    categories = sorted({str(t.get("category")) for t in tasks if t.get("category")})
    lines = [
        f"{len(tasks)} task(s) from {len(dbs)} database(s) ({', '.join(dbs) or DASH}) and "
        f"{len(categories)} categories ({', '.join(categories) or DASH}).",
        "",
        *markdown_table(header, rows),
        "",
        "✓: solved (reward 1.00); submitted r: submitted, r = share of the hidden tests passed; "
        "no submit (reason): the episode ended without a submission; —: not measured.",
    ]
    return lines


def _phase(generation: Mapping[str, Any], phase: str) -> str:
    info = generation.get(phase)
    if not isinstance(info, Mapping):
        return DASH
    text = " ".join(str(info[key]) for key in ("engine", "dtype") if key in info) or DASH
    correction = info.get("importance_sampling")  # rollouts: TRL's mode, or measured
    return f"{text} (importance sampling: {correction})" if correction else text


def _generation_section(records: Sequence[StageRecord]) -> list[str]:
    """Which engine and dtype generated (and trained) in each stage, and the bf16
    capability that the dtype was chosen by."""
    known = [r for r in records if r.generation]
    if not known:
        return ["Not recorded (records written before the generation engine was recorded)."]
    first = known[0].generation or {}
    capability = first.get("capability") or {}
    trained = next((g for g in (r.generation or {} for r in known) if "bf16_training" in g), {})
    lines = [
        f"Engine: {first.get('plan', DASH)}. bf16_generation = "
        f"{first.get('bf16_generation', DASH)}; bf16_training = "
        f"{trained.get('bf16_training', DASH)}; bf16 capability: "
        f"{capability.get('detail', DASH)} "
        f"({'native' if capability.get('native') else 'not native'}).",
    ]
    starts = [(r.generation or {}).get("vllm_start_seconds") for r in known]
    started = next((s for s in starts if s is not None), None)
    if started is not None:
        engine = next((g["vllm"] for g in (r.generation or {} for r in known) if "vllm" in g), {})
        settings = (
            f" (context {engine['max_model_len']} tokens, sleep mode "
            f"{'on' if engine['sleep_mode'] else 'off'})"
            if engine
            else ""
        )
        lines.append(
            f"The run's one vLLM engine{settings} started in {started} s and served every stage."
        )
    lines.append("")
    rows = [
        [
            str(r.stage),
            _phase(r.generation or {}, "evaluation"),
            _phase(r.generation or {}, "rollouts"),
            _phase(r.generation or {}, "training"),
        ]
        for r in known
    ]
    return lines + markdown_table(["stage", "evaluation", "GRPO rollouts", "training"], rows)


def _budget_section(budgets: Sequence[Mapping[str, Any]]) -> list[str]:
    if not budgets:
        return ["Nothing to check against: no stage-1 or stage-2 data was built or found."]
    rows = [
        [
            str(b.get("key")),
            str(b.get("value")),
            str(b.get("need")) + (f"; {b['detail']}" if b.get("detail") else ""),
            f"{b.get('fits')} of {b.get('total')}",
            "ok" if b.get("ok") else "**too small**",
        ]
        for b in budgets
    ]
    lines = markdown_table(
        ["setting", "value", "the teacher's samples need", "fit", "verdict"], rows
    )
    return lines + [
        "",
        "Each limit against the verified teacher data of this run (stage 1: reasoning "
        "answers; stage 2: tool-use episodes), in the trained model's tokens. A sample "
        "that does not fit is cut (max_length, max_new_tokens, max_completion_length) or its "
        "episode ends before the teacher's submission (max_tool_calls).",
    ]


def _split_labels(records: Sequence[StageRecord], sources: Mapping[str, str]) -> list[str]:
    """The further splits to report: those configured (in order), then any other a record
    measured."""
    labels = list(sources)
    for r in records:
        labels += [label for label in r.split_evaluations or {} if label not in labels]
    return labels


def write_report(
    run_dir: Path,
    records: Sequence[StageRecord],
    *,
    title: str,
    config_summary: Mapping[str, Any],
    held_out: Sequence[Mapping[str, Any]] | None = None,
    budgets: Sequence[Mapping[str, Any]] | None = None,
    split_sources: Mapping[str, str] | None = None,
) -> Path:
    """Write ``run_dir/report.md`` (and PNGs under ``run_dir/plots/``); return its path.
    `held_out`: the evaluated tasks (``instance_id``, ``db_id``, ``category``), listed with
    their outcome at each stage; `budgets`: the budget checks of the run
    (`birdrl.training.budgets.BudgetCheck.to_dict`), a section of their own when given;
    `split_sources`: each further held-out split's task source, by label (each split the
    records measured gets its own success-rate section, in this order first)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    records = sorted(records, key=lambda r: r.stage)
    try:
        plots = _plots(run_dir / "plots", records)
        skipped = None
    except ImportError as exc:
        plots, skipped = {}, f"Plots were skipped: matplotlib is not installed ({exc})."
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# {title}", "", f"Written {stamp}; {len(records)} stage record(s).", ""]
    lines += ["## Configuration", ""]
    lines += markdown_table(
        ["setting", "value"], [[str(k), str(v)] for k, v in config_summary.items()]
    )
    if budgets is not None:
        lines += ["", "## Budget checks", "", *_budget_section(budgets)]
    lines += ["", "## Generation", "", *_generation_section(records)]
    lines += ["", "## Training", ""]
    rows = [[str(r.stage), r.name, r.kind, _duration(r), _steps(r), _signal(r)] for r in records]
    lines += markdown_table(["stage", "name", "kind", "time", "steps", "training signal"], rows)
    lines += [
        "",
        "Training signal: first → last logged value (SFT: loss, GRPO: mean reward); "
        '"means of k": each end averages k logged steps.',
    ]
    total = run_seconds(records)
    if total is not None:
        lines += [
            "",
            f"Total: {total / 60:.1f} minutes, every stage's training and evaluation (time: "
            "training only, but stage 0's) summed; a resumed stage counts the run that made "
            "it, and the setup before stage 0 is not in it.",
        ]
    lines += ["", "## Learning signal", "", *_signal_section(records)]
    lines += ["", "## Success rate", "", *_sr_section(records), ""]
    for label in _split_labels(records, split_sources or {}):
        split = [replace(r, evaluation=(r.split_evaluations or {}).get(label)) for r in records]
        source = (split_sources or {}).get(label)
        lines += [f"## Success rate on the held-out split {label}", ""]
        if source:
            lines += [f"Tasks: `{source}`.", ""]
        if label == "easy":
            lines += [EASY_LEGEND, ""]
        lines += [*_sr_section(split), ""]
    lines += ["## Held-out tasks", "", *_tasks_section(records, held_out), ""]
    lines += ["## Plots", ""]
    if skipped:
        lines.append(skipped)
    elif not plots:
        lines.append("Nothing to plot: no losses, rewards or evaluations were logged.")
    names = {r.stage: r.name for r in records}
    for key, paths in sorted(plots.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        for path in paths:
            rel = path.relative_to(run_dir).as_posix()
            label = "success rate per stage"
            if key is not None:
                label = f"stage {key} ({names[key]}): {path.stem.split('_', 1)[1]}"
            lines += [f"![{label}]({rel})", ""]
    lines += ["", "## Notes", ""]
    for r in records:
        lines += [f"### Stage {r.stage}: {r.name}", "", f"- model: `{r.model_dir}`"]
        reasons = (r.evaluation or {}).get("stop_reasons")
        if isinstance(reasons, Mapping) and reasons:
            lines.append(
                "- episode ends: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
            )
        if r.evaluation is None:
            lines.append("- not evaluated")
        lines += [f"- {note}" for note in r.notes]
        lines.append("")
    path = run_dir / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path
