"""Evaluation worker processes (`birdrl.evaluation.workers`): a worker busy in a job that
never ends goes away with its parent instead of running on, orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

PARENT = textwrap.dedent(
    """
    import sys, time
    from birdrl.evaluation.workers import Worker

    def spin(_):
        while True:
            pass

    if __name__ == "__main__":
        worker = Worker(spin)
        worker._start()
        print(worker._proc.pid, flush=True)
        worker.run("job", timeout=3600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
        return f.read().split(") ")[-1][0] != "Z"


def test_a_worker_in_an_endless_job_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    time.sleep(1.0)  # the job is running
    assert _alive(worker)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(worker):
        os.kill(worker, signal.SIGKILL)
        raise AssertionError("the worker outlived its killed parent by 20 s")
