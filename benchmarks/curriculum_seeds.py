"""A curriculum preset over several seeds: each stage's held-out figures per split as a
mean with a 95% interval across seeds, so a stage's effect is claimed only where more than
one seed carries it.

    python benchmarks/curriculum_seeds.py                       # tiny, seeds 0 1 2
    python benchmarks/curriculum_seeds.py --preset tiny --seeds 0 1 2 3 --out runs/seeds
    python benchmarks/curriculum_seeds.py --from runs/a runs/b runs/c   # only aggregate

Each seed runs as ``birdrl curriculum --preset P --set seed=S --out OUT/seed-S --resume``
in its own process; a seed whose run has finished (a record for every stage the preset
trains and evaluates) is not run again, and an interrupted one resumes. The summary goes
to stdout and to ``--summary`` (``.md`` and ``.json``; default ``OUT/seeds``). Per split
and stage: the mean success rate with Student's t 95% interval across seeds and the
pooled rate (all seeds' episodes, Wilson), the mean change from the previous evaluated
stage with its t interval, the same change pooled over every seed's episodes (Newcombe's
paired interval over (seed, task) pairs, with the tasks gained and lost), and the share of
episodes that ran execute_sql before submitting (mean and t interval). The last stage is
also compared with every earlier evaluated stage (stage 4 against stage 2). The verdict is
the t interval's: the pooled one treats the seeds' episodes as independent and leaves out
how much the runs themselves differ.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from birdrl.evaluation.intervals import (
    Interval,
    mean_interval,
    newcombe_paired,
    task_outcomes,
    wilson,
)
from birdrl.training.config import MAIN_SPLIT, apply_overrides, load_preset
from birdrl.training.report import StageRecord, markdown_table
from birdrl.training.stages import CURRICULUM

SINGLE_TURN_STAGE = 3


def seed_dir(out: Path, seed: int) -> Path:
    return out / f"seed-{seed}"


def finished(run_dir: Path, preset: str, overrides: Sequence[str]) -> bool:
    """Whether `run_dir` holds a record for every stage the configuration trains (and the
    base model's, when it is evaluated)."""
    config = apply_overrides(load_preset(preset), list(overrides))
    stages = [s.number for s in CURRICULUM if s.settings(config).enabled]
    stages += [0] if config.evaluation.base_model else []
    return all((run_dir / f"stage{n}" / "record.json").is_file() for n in stages)


def run_seed(preset: str, seed: int, out: Path, overrides: Sequence[str]) -> Path:
    """Run (or resume) one seed in its own process; a finished seed is reused."""
    run_dir = seed_dir(out, seed)
    settings = [*overrides, f"seed={seed}"]
    if finished(run_dir, preset, settings):
        print(f"seed {seed}: finished earlier in {run_dir}, reused", flush=True)
        return run_dir
    command = [sys.executable, "-m", "birdrl", "curriculum", "--preset", preset]
    command += [arg for s in settings for arg in ("--set", s)]
    command += ["--out", str(run_dir), "--resume"]
    print(f"seed {seed}: {' '.join(command)}", flush=True)
    subprocess.run(command, check=True)
    return run_dir


def load_records(run_dir: Path) -> list[StageRecord]:
    """The stage records of one run directory, by stage."""
    paths = sorted(run_dir.glob("stage*/record.json"))
    if not paths:
        raise SystemExit(f"{run_dir}: no stageN/record.json (not a curriculum run directory)")
    records = [StageRecord.from_dict(json.loads(p.read_text(encoding="utf-8"))) for p in paths]
    return sorted(records, key=lambda r: r.stage)


def _evaluations(record: StageRecord) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    if record.evaluation:
        found[MAIN_SPLIT] = record.evaluation
    found.update({k: v for k, v in (record.split_evaluations or {}).items() if v})
    return found


def _count(ev: Mapping[str, Any], rate: str) -> tuple[int, int] | None:
    n, value = ev.get("n"), ev.get(rate)
    if not isinstance(n, int) or n <= 0 or not isinstance(value, int | float):
        return None
    return round(value * n), n


def _interval(
    values: Sequence[float], lowest: float = 0.0, highest: float = 1.0
) -> dict[str, float | None] | None:
    """Mean and t interval of `values`, clipped to what the quantity can be ([0, 1] for a
    rate, [-1, 1] for a change of one); with one value the bounds are None (unknown), and
    ``spread`` is False when every value is the same (a t interval of width 0 bounds
    nothing)."""
    if not values:
        return None
    found = mean_interval(values)
    if len(values) == 1:
        return {"estimate": found.estimate, "low": None, "high": None, "spread": False}
    return {
        "estimate": found.estimate,
        "low": max(lowest, found.low),
        "high": min(highest, found.high),
        "spread": max(values) - min(values) > 1e-9,  # differences of rates carry rounding
    }


def pooled_change(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The change from `before` to `after` (evaluations by seed) over every seed's episodes
    together: Newcombe's paired interval over (seed, task) pairs, with the tasks gained and
    lost; None when a seed's evaluations keep no per-task outcomes or differ in tasks."""
    pairs: list[tuple[bool, bool]] = []
    for seed in sorted(set(before) & set(after)):
        a, b = task_outcomes(before[seed]), task_outcomes(after[seed])
        if a is None or b is None or a.keys() != b.keys():
            return None
        pairs += [(a[t], b[t]) for t in sorted(a)]
    if not pairs:
        return None
    found = newcombe_paired([a for a, _ in pairs], [b for _, b in pairs])
    return {
        **found.to_dict(),
        "gained": sum(b and not a for a, b in pairs),
        "lost": sum(a and not b for a, b in pairs),
        "pairs": len(pairs),
    }


def aggregate(runs: Mapping[str, Sequence[StageRecord]]) -> dict[str, Any]:
    """Per split and stage, across the runs (one per seed): mean SR with its t interval,
    the pooled SR with its Wilson interval, the mean change from the previous evaluated
    stage with its t interval, and the exploring share."""
    names = {r.stage: r.name for records in runs.values() for r in records}
    splits: dict[str, dict[int, dict[str, Mapping[str, Any]]]] = {}
    for seed, records in runs.items():
        for r in records:
            for split, ev in _evaluations(r).items():
                splits.setdefault(split, {}).setdefault(r.stage, {})[seed] = ev
    out: dict[str, Any] = {"seeds": list(runs), "splits": {}, "last_against": {}}
    for split in sorted(splits, key=lambda s: (s != MAIN_SPLIT, s)):
        rows = []
        seen: dict[int, dict[str, float]] = {}  # every evaluated stage's rates, by seed
        for stage in sorted(splits[split]):
            by_seed = splits[split][stage]
            rates = {s: float(ev["success_rate"]) for s, ev in by_seed.items()
                     if isinstance(ev.get("success_rate"), int | float)}  # fmt: skip
            counts = [c for ev in by_seed.values() if (c := _count(ev, "success_rate"))]
            looked = [float(ev["explored_first_rate"]) for ev in by_seed.values()
                      if isinstance(ev.get("explored_first_rate"), int | float)]  # fmt: skip
            row: dict[str, Any] = {
                "stage": stage,
                "name": names.get(stage, ""),
                "seeds": sorted(rates),
                "n_per_seed": sorted({int(ev.get("n") or 0) for ev in by_seed.values()}),
                "success_rate": _interval(list(rates.values())),
                "pooled": wilson(sum(k for k, _ in counts), sum(n for _, n in counts)).to_dict()
                if counts
                else None,
                "explored_first": _interval(looked),
                "change": None,
                "change_from": None,
                "pooled_change": None,
            }
            if seen:  # the previous evaluated stage
                previous_stage = max(seen)
                previous = seen[previous_stage]
                paired = [rates[s] - previous[s] for s in rates if s in previous]
                row["change"], row["change_from"] = _interval(paired, -1.0), previous_stage
                row["pooled_change"] = pooled_change(splits[split][previous_stage], by_seed)
            rows.append(row)
            if rates:
                seen[stage] = rates
        out["splits"][split] = rows
        # the last stage against each earlier one but the previous (its row has that):
        # multi-turn GRPO against the last SFT stage, and the whole run
        *earlier, _, last = sorted(seen) if len(seen) > 1 else [None, None]
        out["last_against"][split] = [
            {
                "stage": last,
                "from": stage,
                "change": _interval(
                    [seen[last][s] - seen[stage][s] for s in seen[last] if s in seen[stage]], -1.0
                ),
                "pooled_change": pooled_change(splits[split][stage], splits[split][last]),
            }
            for stage in earlier
        ]
    return out


def _pct(iv: Mapping[str, Any] | None, signed: bool = False) -> str:
    if not iv:
        return "—"
    fmt = "+.1f" if signed else ".1f"
    text = f"{100 * iv['estimate']:{fmt}}" + ("" if signed else "%")
    if iv["low"] is None:
        return f"{text} [one seed: no interval]"
    return f"{text} [{100 * iv['low']:{fmt}}, {100 * iv['high']:{fmt}}]"


def _verdict(iv: Mapping[str, Any] | None) -> str:
    if not iv:
        return "—"
    if iv["low"] is None:
        return "one seed cannot tell"
    if not iv.get("spread", True) and iv["estimate"] != 0:
        return "the same in every seed: no spread to bound it"
    if Interval(iv["estimate"], iv["low"], iv["high"]).includes_zero:
        return "not distinguishable from no change"
    return "increase" if iv["estimate"] > 0 else "decrease"


def _pooled(found: Mapping[str, Any] | None) -> str:
    if not found:
        return "—"
    return f"{_pct(found, signed=True)} (+{found['gained']}/−{found['lost']} of {found['pairs']})"


def to_markdown(summary: Mapping[str, Any]) -> str:
    seeds = summary["seeds"]
    lines = [
        f"Seeds: {', '.join(map(str, seeds))} ({len(seeds)} runs). Means across seeds with "
        "Student's t 95% intervals; pooled: every seed's episodes together, Wilson 95%; Δ: "
        "the mean per-seed change from the previous evaluated stage, in points; pooled Δ: "
        "the same change over every seed's episodes together, Newcombe's paired 95% interval, "
        "with the tasks gained and lost of the (seed, task) pairs.",
    ]
    for split, rows in summary["splits"].items():
        title = "held-out tasks (eval_tasks)" if split == MAIN_SPLIT else f"split {split}"
        table = []
        for row in rows:
            looked = _pct(row["explored_first"])
            if row["stage"] == SINGLE_TURN_STAGE:
                looked += " (stage 3 trains single-turn: it cannot learn to look)"
            table.append(
                [
                    str(row["stage"]),
                    row["name"],
                    "/".join(map(str, row["n_per_seed"])),
                    _pct(row["success_rate"]),
                    _pct(row["pooled"]),
                    _pct(row["change"], signed=True)
                    + (f" (from stage {row['change_from']})" if row["change"] else ""),
                    _verdict(row["change"]),
                    _pooled(row.get("pooled_change")),
                    looked,
                ]
            )
        header = ["stage", "name", "tasks", "mean SR [95%]", "pooled SR [95%]",
                  "Δ SR, pts [95%]", "Δ verdict", "pooled Δ, pts [95%]",
                  "explored first [95%]"]  # fmt: skip
        lines += ["", f"### {title}", "", *markdown_table(header, table)]
        against = summary.get("last_against", {}).get(split, [])
        lines += [""] if against else []
        lines += [
            f"- stage {a['stage']} against stage {a['from']}: Δ {_pct(a['change'], signed=True)} "
            f"pts, {_verdict(a['change'])}; pooled {_pooled(a.get('pooled_change'))}"
            for a in against
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, help="runs go to OUT/seed-S (default runs/P-seeds)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="a setting for every seed's run (key=value; repeatable)")  # fmt: skip
    parser.add_argument("--from", dest="existing", type=Path, nargs="+",
                        help="aggregate these run directories; run nothing")  # fmt: skip
    parser.add_argument("--summary", type=Path,
                        help="write SUMMARY.md and SUMMARY.json (default OUT/seeds, or "
                        "./curriculum_seeds with --from)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.existing:
        if len(args.existing) < 2:
            print("warning: one run gives no interval across seeds", file=sys.stderr)
        runs = {str(d): load_records(d) for d in args.existing}
        summary_path = args.summary or Path("curriculum_seeds")
    else:
        if len(args.seeds) < 3 or len(set(args.seeds)) != len(args.seeds):
            parser.error("--seeds: give at least 3 different seeds")
        out = args.out or Path("runs") / f"{args.preset}-seeds"
        dirs = {s: run_seed(args.preset, s, out, args.overrides) for s in args.seeds}
        runs = {str(s): load_records(d) for s, d in dirs.items()}
        summary_path = args.summary or out / "seeds"
    summary = aggregate(runs)
    text = to_markdown(summary)
    print(text)
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    summary_path.with_suffix(".md").write_text(text, encoding="utf-8")
    summary_path.with_suffix(".json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(f"written: {summary_path.with_suffix('.md')}, {summary_path.with_suffix('.json')}")


if __name__ == "__main__":
    main()
