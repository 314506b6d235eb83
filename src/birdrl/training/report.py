"""The curriculum report: one record per finished stage, rendered as ``report.md`` with PNG
plots (training curves, success rate per stage). It only shows what was measured: a
missing metric is "—", an unchanged success rate says "no change"."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError

__all__ = ["ReportError", "StageRecord", "write_report"]

DASH = "—"
KINDS = ("base", "sft", "grpo")


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageRecord:
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise ReportError(f"stage record lacks {', '.join(missing)}: {dict(data)!r:.200}")
        if data["kind"] not in KINDS:
            raise ReportError(
                f"stage {data['stage']}: kind must be one of {KINDS}, not {data['kind']!r}"
            )
        values = {n: data[n] for n in names}
        values["log_history"] = [dict(e) for e in values["log_history"]]
        values["notes"] = list(values["notes"])
        return cls(**values)


# -- numbers ---------------------------------------------------------------------------------


def _series(log: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the entries that logged a finite number under `key`."""
    found = [(float(e.get("step", i)), _rate(e.get(key))) for i, e in enumerate(log)]
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
    s = _rate(record.seconds)
    if s is None:
        return DASH
    text = f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min" if s >= 3600 else f"{s:.1f} s"
    text = f"{int(s // 60)} min {int(s % 60):02d} s" if 60 <= s < 3600 else text
    return text + (" (eval)" if record.kind == "base" else "")


def _rate(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.1f}%"


def _delta(current: float | None, previous: float | None) -> str:
    if current is None or previous is None:
        return DASH
    points = round(100 * (current - previous), 1)
    return "no change" if points == 0 else f"{points:+.1f} pts"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


# -- plots -----------------------------------------------------------------------------------


def _plots(plot_dir: Path, records: Sequence[StageRecord]) -> dict[int | None, list[Path]]:
    """Write the PNGs; raises ImportError without matplotlib. Keys: stage, None = overall."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg, no pyplot state
    from matplotlib.figure import Figure

    def save(fig: Figure, name: str) -> Path:
        FigureCanvasAgg(fig)
        fig.tight_layout()
        fig.savefig(plot_dir / name, dpi=100)
        return plot_dir / name

    plot_dir.mkdir(parents=True, exist_ok=True)
    out: dict[int | None, list[Path]] = {}
    for r in records:
        keys = {"sft": ["loss"], "grpo": ["reward", "kl"]}.get(r.kind, [])
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
            title = f"stage {r.stage}: {r.name} — {key}" + (" (band: ± reward_std)" if band else "")
            ax.set(xlabel="step", ylabel=key, title=title)
            ax.grid(alpha=0.3)
            out.setdefault(r.stage, []).append(save(fig, f"stage{r.stage}_{key}.png"))
    evaluated = [
        r for r in records if r.evaluation and _rate(r.evaluation.get("success_rate")) is not None
    ]
    if evaluated:
        groups = ["overall", *_categories(evaluated)]
        fig = Figure(figsize=(max(6, 1.4 * len(groups) + 2), 4))
        ax = fig.subplots()
        width = 0.8 / len(evaluated)
        for i, r in enumerate(evaluated):
            ev = r.evaluation or {}
            per = ev.get("per_category") or {}
            heights = [_rate(ev.get("success_rate"))] + [_rate(per.get(c)) for c in groups[1:]]
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


def _num(value: Any, fmt: str) -> str:
    rate = _rate(value)
    return DASH if rate is None else format(rate, fmt)


def _sr_row(r: StageRecord, prev: Mapping[str, Any], categories: Sequence[str]) -> list[str]:
    ev = r.evaluation or {}
    sr = _rate(ev.get("success_rate"))
    row = [str(r.stage), r.name, str(ev.get("mode", DASH)), str(ev.get("n", DASH)), _pct(sr)]
    row.append(_delta(sr, _rate(prev.get("success_rate"))) if prev else DASH)
    per, prev_per = ev.get("per_category") or {}, prev.get("per_category") or {}
    for c in categories:
        value, change = _rate(per.get(c)), _delta(_rate(per.get(c)), _rate(prev_per.get(c)))
        row.append(_pct(value) + (f" ({change})" if change != DASH else ""))
    valid = _rate(ev.get("tool_call_validity"))
    return row + [_num(ev.get("avg_turns"), ".2f"), _pct(valid), _num(ev.get("mean_reward"), ".3f")]


def _sr_section(records: Sequence[StageRecord]) -> list[str]:
    evaluated = [r for r in records if r.evaluation is not None]
    if not evaluated:
        return ["No stage was evaluated."]
    categories = _categories(evaluated)
    header = ["stage", "name", "mode", "n", "SR", "Δ SR", *categories]
    rows: list[list[str]] = []
    prev: dict[str, Any] = {}  # the evaluation of the previous evaluated stage
    unlike = False
    for r in records:
        row = _sr_row(r, prev if r.evaluation else {}, categories)
        if (
            r.evaluation
            and prev
            and [r.evaluation.get(k) for k in ("mode", "n")] != [prev.get(k) for k in ("mode", "n")]
        ):
            row[5], unlike = row[5] + " †", True
        rows.append(row)
        prev = r.evaluation or prev
    lines = _table([*header, "avg turns", "valid tool calls", "mean reward"], rows)
    lines += ["", "SR: share of held-out tasks solved; Δ: against the previous evaluated stage."]
    if unlike:
        lines.append("† evaluated differently (mode or task count) from the previous stage.")
    first, last = evaluated[0], evaluated[-1]
    a, b = (_rate((x.evaluation or {}).get("success_rate")) for x in (first, last))
    if first is not last and a is not None and b is not None:
        lines.append(
            f"\nFrom stage {first.stage} ({first.name}) to stage {last.stage} ({last.name}): "
            f"{_pct(a)} → {_pct(b)} ({_delta(b, a)})."
        )
    return lines


def write_report(
    run_dir: Path,
    records: Sequence[StageRecord],
    *,
    title: str,
    config_summary: Mapping[str, Any],
) -> Path:
    """Write ``run_dir/report.md`` (and PNGs under ``run_dir/plots/``); return its path."""
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
    lines += _table(["setting", "value"], [[str(k), str(v)] for k, v in config_summary.items()])
    lines += ["", "## Training", ""]
    rows = [[str(r.stage), r.name, r.kind, _duration(r), _steps(r), _signal(r)] for r in records]
    lines += _table(["stage", "name", "kind", "time", "steps", "training signal"], rows)
    lines += [
        "",
        "Training signal: first → last logged value (SFT: loss, GRPO: mean reward); "
        '"means of k": each end averages k logged steps.',
    ]
    lines += ["", "## Success rate", "", *_sr_section(records), "", "## Plots", ""]
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
