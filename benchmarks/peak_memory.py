"""Peak memory of a command: the largest resident set of the command and its children, and
on a CUDA machine the largest GPU memory in use while it ran (``nvidia-smi``, sampled every
0.2 s, every GPU; it counts what vLLM reserves as well as what torch allocates).

    python benchmarks/peak_memory.py [--json out.json] -- birdrl curriculum ...

The command's exit status is passed on. The figures are measured, never estimated; a
sampled GPU peak can miss a spike shorter than the sampling interval.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path


def _gpu_used_mib() -> list[int] | None:
    """MiB in use on each GPU, or None without ``nvidia-smi``."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    result = subprocess.run(
        [smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return None
    return [int(line) for line in result.stdout.split() if line.strip().isdigit()]


def run(cmd: list[str], interval: float = 0.2) -> dict[str, object]:
    """Run `cmd`; return its exit code, seconds, peak RSS (GiB) and, where a GPU is seen,
    the peak GPU memory in use per GPU (GiB), including what was in use before it started."""
    baseline = _gpu_used_mib()
    peaks = list(baseline) if baseline is not None else None
    done = threading.Event()

    def sample() -> None:
        while not done.wait(interval):
            used = _gpu_used_mib()
            if used is not None and peaks is not None:
                for i, mib in enumerate(used[: len(peaks)]):
                    peaks[i] = max(peaks[i], mib)

    sampler = threading.Thread(target=sample, daemon=True)
    if peaks is not None:
        sampler.start()
    started = time.monotonic()
    code = subprocess.run(cmd, check=False).returncode
    seconds = time.monotonic() - started
    done.set()
    if peaks is not None:
        sampler.join()
    # ru_maxrss of waited-for children: the largest single process (KiB on Linux)
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out: dict[str, object] = {
        "command": cmd,
        "exit_code": code,
        "seconds": round(seconds, 1),
        "peak_rss_gib": round(rss_kib / 2**20, 2),
    }
    if peaks is not None:
        out["gpu_before_gib"] = [round(m / 1024, 2) for m in baseline or []]
        out["gpu_peak_gib"] = [round(m / 1024, 2) for m in peaks]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command to measure after --")
    figures = run(cmd)
    line = f"peak memory: largest process {figures['peak_rss_gib']} GiB resident"
    if "gpu_peak_gib" in figures:
        line += f"; GPU in use at peak {figures['gpu_peak_gib']} GiB"
        line += f" (before: {figures['gpu_before_gib']} GiB)"
    print(line, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    sys.exit(int(figures["exit_code"]))  # type: ignore[call-overload]


if __name__ == "__main__":
    main()
