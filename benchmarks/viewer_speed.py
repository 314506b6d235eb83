"""How fast `birdrl view` opens and filters a large run, measured in headless Chromium.

Builds a curriculum-shaped run of `--stages` × `--tasks` held-out episodes (default 5 ×
2,000 = 10,000 episodes) out of real episodes (the explorer and issue-SQL agents played on
the bundled test set through the environment, each copied under new instance ids with its
outcome varied per stage), plus 100 logged steps of curves and GRPO groups per GRPO stage;
writes the viewer; then opens it from disk in Debian's Chromium (Playwright drives it) and
prints:

* the build time and the size of what the first page load reads (``data/index.js``);
* open: navigation start → the page drawn (index loaded, parsed and rendered; "from outside":
  Playwright's goto → the ready mark, browser overhead included), for the run
  page and the task table, median and worst of `--repeats` fresh browser contexts;
* filter: a change of a task-table control → the table redrawn and painted (next frame),
  for a text search, a category, an outcome in one column and "changed between stages";
* episode: a click on a cell → its episode page drawn (one chunk loaded).

    python benchmarks/viewer_speed.py [--tasks 2000] [--stages 5] [--repeats 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.rollout import RolloutConfig
from birdrl.agents.scripted import ScriptedAgent
from birdrl.tasks.benchmark import open_benchmark
from birdrl.view.build import build_view
from birdrl.view.chromium import CHROMIUM_FLAGS, chromium_path, missing_browser

STAGES = [
    ("base model", "base"),
    ("reasoning SFT", "sft"),
    ("tool-use SFT", "sft"),
    ("single-turn GRPO", "grpo"),
    ("multi-turn GRPO", "grpo"),
]


def real_episodes() -> list[dict[str, Any]]:
    bench = open_benchmark("bundled:test")
    out = []
    for agent in ("explorer", "issue"):
        result = evaluate_agent(bench.tasks, bench.databases, ScriptedAgent(agent), RolloutConfig())
        out += [t.to_dict() for t in result.trajectories]
    return out


def make_run(root: Path, tasks: int, stages: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    base = real_episodes()
    picks = [rng.choice(base) for _ in range(tasks)]
    run = root / "run"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"name": "viewer-bench", "stages": stages}))
    for stage in range(stages):
        name, kind = STAGES[stage % len(STAGES)]
        d = run / f"stage{stage}"
        d.mkdir()
        solved = n = 0
        with open(d / "eval_trajectories.jsonl", "w", encoding="utf-8") as f:
            for k, ep in enumerate(picks):
                ep = dict(ep, instance_id=f"{ep['instance_id']}-{k:05d}", traj_id=f"ep-{stage}-{k}")
                success = rng.random() < 0.1 + 0.15 * stage
                ep.update(success=success, reward=1.0 if success else rng.choice([0.0, 0.0, 0.5]))
                solved += success
                n += 1
                f.write(json.dumps(ep) + "\n")
        log = []
        if kind != "base":
            log = [
                {"loss": 1 / s, "reward": s / 100, "reward_std": 0.2, "kl": s / 1e4, "step": s}
                for s in range(1, 101)
            ]
        evaluation = {
            "n": n,
            "success_rate": solved / n,
            "per_category": {},
            "mean_reward": 0.0,
            "stop_reasons": {"submitted": n},
        }
        (d / "record.json").write_text(
            json.dumps(
                {
                    "stage": stage,
                    "name": name,
                    "kind": kind,
                    "model_dir": "",
                    "seconds": 60.0,
                    "log_history": log,
                    "evaluation": evaluation,
                    "notes": [],
                }
            )
        )
        if kind == "grpo":
            with open(d / "groups.jsonl", "w", encoding="utf-8") as f:
                for step in range(1, 51):
                    for g in range(4):
                        ep = rng.choice(base)
                        f.write(
                            json.dumps(
                                {
                                    "step": step,
                                    "group": g,
                                    "instance_id": ep["instance_id"],
                                    "prompt": ep["messages"][:2],
                                    "completions": [
                                        {
                                            "completion": ep["messages"][2:],
                                            "reward": r,
                                            "advantage": r - 0.5,
                                        }
                                        for r in (0, 0.5, 1, 0.5)
                                    ],
                                }
                            )
                            + "\n"
                        )
    return run


def measure(site: Path, repeats: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    url = site.resolve().as_uri() + "/index.html"
    out: dict[str, list[float]] = defaultdict(list)  # in the order measured
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_path()), args=list(CHROMIUM_FLAGS))
        for _ in range(repeats):
            for route, key in (("/run", "open run page"), ("/tasks", "open task table")):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                started = time.perf_counter()
                page.goto(f"{url}#{route}")
                page.wait_for_selector("body[data-ready='1']")
                out[key + " (from outside)"].append(1000 * (time.perf_counter() - started))
                out[key].append(page.evaluate("window.birdrlTimings.ready"))
                if key == "open task table":
                    for label, action in (
                        (
                            "filter: search",
                            "const e=document.querySelector('input[type=search]'); e.value='chinook_01'; e.dispatchEvent(new Event('input'))",
                        ),
                        (
                            "filter: category",
                            "const e=document.querySelector('select[aria-label=category]'); e.value='Query'; e.dispatchEvent(new Event('change'))",
                        ),
                        (
                            "filter: outcome in a column",
                            "let e=document.querySelector('select[aria-label=column]'); e.value='2'; e=document.querySelector('select[aria-label=outcome]'); e.value='solved'; e.dispatchEvent(new Event('change'))",
                        ),
                        (
                            "filter: changed between stages",
                            "const e=document.querySelector('input[type=checkbox]'); e.checked=true; e.dispatchEvent(new Event('change'))",
                        ),
                    ):
                        out[label].append(
                            page.evaluate(
                                "async () => { const t0 = performance.now(); " + action + ";"
                                " await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));"
                                " return performance.now() - t0; }"
                            )
                        )
                    page.evaluate(  # back to every task, then open the first one
                        "const c=document.querySelector('input[type=checkbox]'); c.checked=false;"
                        " const o=document.querySelector('select[aria-label=outcome]'); o.value='';"
                        " o.dispatchEvent(new Event('change')); delete document.body.dataset.ready"
                    )
                    page.click("table.tasks tbody tr:first-child td.cell a >> nth=0")
                    page.wait_for_selector("body[data-ready='1']")
                    out["episode page"].append(page.evaluate("window.birdrlTimings.episode"))
                context.close()
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--stages", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="keep the run and site here")
    args = parser.parse_args()
    if (reason := missing_browser()) is not None:
        raise SystemExit(f"cannot measure: {reason}")
    root = args.out or Path(tempfile.mkdtemp(prefix="birdrl-viewer-bench-"))
    run = make_run(root, args.tasks, args.stages)
    t0 = time.perf_counter()
    index = build_view([run])
    built = time.perf_counter() - t0
    site = index.parent
    data = site / "data"
    total = sum(f.stat().st_size for f in data.rglob("*.js"))
    print(
        f"{args.stages} stages x {args.tasks} tasks = {args.stages * args.tasks} episodes; "
        f"site built in {built:.1f} s, data {total / 1e6:.1f} MB in {sum(1 for _ in data.rglob('*.js'))} files, "
        f"first load reads data/index.js ({(data / 'index.js').stat().st_size / 1e6:.2f} MB)"
    )
    results = measure(site, args.repeats)
    print(f"{'measure (ms)':<34}{'median':>10}{'worst':>10}")
    for key, values in results.items():
        print(f"{key:<34}{statistics.median(values):>10.1f}{max(values):>10.1f}")
    print(f"site: {index}")


if __name__ == "__main__":
    main()
