"""The multi-process matrix: the curriculum under each shipped launch config, in CPU processes
(gloo), for each generation engine and fine-tuning mode; a table of how far each cell got.

    python benchmarks/multiprocess_matrix.py                          # every cell
    python benchmarks/multiprocess_matrix.py --configs zero3.yaml --engines hf --modes lora
    python benchmarks/multiprocess_matrix.py --out runs/matrix --processes 2

A cell is ``birdrl curriculum --preset smoke`` (all four stages, rank 0 evaluating after
each; the vLLM cells on the same tiny model with 32-wide heads, `vllm_model`) launched in
`--processes` processes: ``ddp`` under torchrun (accelerate's own
multi-CPU launch needs MPI), a DeepSpeed config under ``accelerate launch`` with its CPU
variant (`birdrl.training.distributed.cpu_launch_config`). ``fsdp.yaml`` is not a cell yet:
accelerate takes its FSDP path only on GPU-like devices (tests/test_training_save.py runs
FSDP2 saving on CPUs with a patched accelerate state). Each cell has a collective timeout of
`--timeout-minutes`, so a hang ends as an error. The table says per cell: the stages whose
record (training and evaluation) exists, minutes, and the error line of a failed cell. It
goes to stdout and to OUT/matrix.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from birdrl.training.distributed import cpu_launch_config

CONFIGS = ("ddp", "zero2.yaml", "zero3.yaml")
ENGINES = ("hf", "vllm")
MODES = ("full", "lora")


@dataclass
class Cell:
    config: str
    engine: str
    mode: str
    stages: list[int]
    minutes: float
    returncode: int
    error: str

    def row(self) -> str:
        reached = ",".join(map(str, self.stages)) or "none"
        verdict = "ok" if self.returncode == 0 and self.stages == [1, 2, 3, 4] else "FAILED"
        return (
            f"| {self.config} | {self.engine} | {self.mode} | {reached} | {self.minutes:.1f} "
            f"| {verdict} | {self.error} |"
        )


def launch_command(config: str, processes: int, folder: Path) -> list[str]:
    """The launcher's command line for a cell, up to the module it runs."""
    if config == "ddp":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    variant = cpu_launch_config(config, folder, processes)
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(variant)]


def last_error(log: str) -> str:
    """The most telling line of a failed cell's log: a rank's own error (the birdrl error of
    a collective that timed out, else the last exception a rank printed), not the
    launcher's summary."""
    lines = [line.strip() for line in log.splitlines()]
    for needle in ("CollectiveError", "error: rank", "]: ", "Error"):
        for line in reversed(lines):
            if needle in line and "Error" in line and "ChildFailedError" not in line:
                return line.replace("|", "/")[:160]
    return (lines[-1] if lines else "").replace("|", "/")[:160]


def vllm_model(out: Path) -> Path:
    """The smoke preset's tiny random model with 32-wide attention heads, built once: vLLM's
    CPU attention has no kernel for the preset's 16."""
    from birdrl.training.tiny import build_tiny_model

    folder = out / "tiny-head32"
    if not (folder / "config.json").is_file():
        build_tiny_model(folder, head_dim=32)
    return folder


def run_cell(
    config: str, engine: str, mode: str, out: Path, processes: int, timeout_minutes: float
) -> Cell:
    folder = out / f"{config.removesuffix('.yaml')}-{engine}-{mode}"
    run_dir = folder / "run"
    command = launch_command(config, processes, folder)
    command += ["-m", "birdrl", "curriculum", "--preset", "smoke", "--out", str(run_dir)]
    settings = [f"model={vllm_model(out)}"] if engine == "vllm" else []
    settings += [
        "evaluation.base_model=false",
        f"generation_engine={engine}",
        f"lora.enabled={'true' if mode == 'lora' else 'false'}",
        f"collective_timeout_minutes={timeout_minutes}",
    ]
    command += [arg for s in settings for arg in ("--set", s)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"{folder.name}: {' '.join(command)}", flush=True)
    with open(folder / "log.txt", "w", encoding="utf-8") as log:
        done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    minutes = (time.monotonic() - started) / 60
    stages = []
    for stage in (1, 2, 3, 4):
        record = run_dir / f"stage{stage}" / "record.json"
        if record.is_file() and json.loads(record.read_text())["evaluation"] is not None:
            stages.append(stage)
    error = "" if done.returncode == 0 else last_error((folder / "log.txt").read_text())
    cell = Cell(config, engine, mode, stages, minutes, done.returncode, error)
    print(cell.row(), flush=True)
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--timeout-minutes", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("runs/matrix"))
    args = parser.parse_args()
    cells = [
        run_cell(c, e, m, args.out, args.processes, args.timeout_minutes)
        for c in args.configs
        for e in args.engines
        for m in args.modes
    ]
    lines = [
        f"{args.processes} CPU processes; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; preset smoke (all four stages, evaluated after each)",
        "",
        "| config | engine | mode | stages reached | minutes | result | error |",
        "|---|---|---|---|---|---|---|",
        *(cell.row() for cell in cells),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "matrix.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
