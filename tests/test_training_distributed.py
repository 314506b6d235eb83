"""Distributed runs: rank bookkeeping, the launch plan, mid-stage resume from a checkpoint,
and a real two-process run on CPU (``accelerate launch``, gloo) of stages 3 and 4 in which
each rank plays its episodes on its own pool partition."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import missing

from birdrl.training.config import load_preset
from birdrl.training.distributed import DistContext, accelerate_configs, dist_context, plan_run


def test_dist_context_reads_the_launcher_environment() -> None:
    assert dist_context({}) == DistContext(0, 1, 0)
    ctx = dist_context({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.is_main) == (3, 4, 1, False)
    for bad in ({"RANK": "4", "WORLD_SIZE": "4"}, {"WORLD_SIZE": "x"}):
        with pytest.raises(ValueError):
            dist_context(bad)
    with DistContext().main_first():  # a single process never waits
        pass


def test_plan_sizes_the_pool_per_rank(tmp_path: Path) -> None:
    db = tmp_path / "a.sqlite"
    db.write_bytes(b"\0" * 4096)
    config = load_preset("qwen2.5-coder-7b")
    plan = plan_run(config, {"a": db}, world_size=8)
    per_rank = config.stage4.batch_size * config.stage4.grad_accum
    assert plan.episodes_per_rank == plan.replicas_per_db_per_rank == per_rank
    assert plan.replica_bytes == 4096 * per_rank * 8
    assert plan.prompts_per_step[4] == per_rank * 8 // config.stage4.num_generations
    assert any("processes (ranks): 8" in line for line in plan.lines())
    assert {p.name for p in accelerate_configs().glob("*.yaml")} >= {
        "multi-gpu.yaml",
        "zero2.yaml",
        "zero3.yaml",
        "fsdp.yaml",
    }


def test_an_interrupted_stage_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
    from transformers import TrainerCallback

    from birdrl.training.config import apply_overrides
    from birdrl.training.curriculum import run_curriculum

    class Interrupt(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            raise KeyboardInterrupt("simulated crash after the first checkpoint")

    config = apply_overrides(load_preset("smoke"), ["evaluation.base_model=false"])
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_curriculum(
            config, run_dir, stages=[1], on_trainer=lambda _s, t: t.add_callback(Interrupt())
        )
    assert (run_dir / "stage1" / "trainer" / "checkpoint-1").is_dir()
    assert not (run_dir / "stage1" / "record.json").exists()
    lines: list[str] = []
    result = run_curriculum(config, run_dir, stages=[1], resume=True, progress=lines.append)
    assert [r.stage for r in result.records] == [1]
    assert any("step 2/2" in m for m in lines) and not any("step 1/2" in m for m in lines)
    steps = [e["step"] for e in result.records[0].log_history if "loss" in e]
    assert steps == [1, 2]  # the first step's log came back with the checkpoint
    assert not (run_dir / "stage1" / "trainer" / "checkpoint-1").exists()


def _command(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Two processes with torchrun (accelerate's own multi-CPU launch needs MPI); the
    trainers join the same gloo process group through accelerate."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    cmd += ["-m", "birdrl", "curriculum", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    return cmd, env


def _launch(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd, env = _command(args)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_two_cpu_processes_train_stages_3_and_4_on_disjoint_partitions(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
    run_dir = tmp_path / "run"
    common = ["--preset", "smoke", "--out", str(run_dir), "--set", "evaluation.base_model=false"]
    common += ["--set", "verify_clean_leases=true"]  # every lease is fingerprinted
    first = _launch([*common, "--stages", "3"], tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = _launch([*common, "--stages", "3-4", "--resume"], tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "stage 3: finished earlier, skipped (resume)" in second.stdout
    for stage in (3, 4):
        record = json.loads((run_dir / f"stage{stage}" / "record.json").read_text())
        assert [e["step"] for e in record["log_history"] if "loss" in e] == [1, 2]
    record4 = json.loads((run_dir / "stage4" / "record.json").read_text())
    assert record4["notes"][0] == f"started from {run_dir / 'stage3' / 'model'}"
    ranks = [
        json.loads((run_dir / "stage4" / f"episodes-rank{r}.json").read_text()) for r in (0, 1)
    ]
    ids = [[traj for traj, _ in rank["leases"]] for rank in ranks]
    for r, rank in enumerate(ranks):
        assert rank["episodes"] > 0 and rank["infra_errors"] == 0  # both ranks played
        assert rank["verified_clean"] == rank["episodes"]  # each lease started clean
        assert all(traj.startswith(f"r{r}-") for traj in ids[r])
        assert all(f"/w{r:03d}/" in replica for _, replica in rank["leases"])
    assert not set(ids[0]) & set(ids[1])
    assert not (run_dir / "stage4" / "pool").exists()  # removed when the stage ended


def test_two_process_run_resumes_mid_stage_from_its_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
    import signal
    import time

    run_dir = tmp_path / "run"
    args = ["--preset", "smoke", "--out", str(run_dir), "--stages", "3"]
    args += ["--set", "evaluation.base_model=false", "--set", "stage3.max_steps=6"]
    cmd, env = _command(args)
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    trainer_dir = run_dir / "stage3" / "trainer"
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if any(trainer_dir.glob("checkpoint-*")):
            break
        time.sleep(0.05)
    # a crash of the whole job: the launcher and both ranks (torchrun starts the ranks in
    # process groups of their own, so they are found by their command line)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    subprocess.run(["pkill", "-KILL", "-f", str(run_dir)], check=False)
    while subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True).returncode == 0:
        time.sleep(0.1)
    saved = sorted(int(p.name.split("-")[1]) for p in trainer_dir.glob("checkpoint-*"))
    assert saved and saved[-1] < 6 and not (run_dir / "stage3" / "record.json").exists()
    resumed = _launch([*args, "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    steps = re.findall(r"stage 3: step (\d+)/6", resumed.stdout)
    assert steps, resumed.stdout[-3000:]
    first = int(steps[0])
    assert first == saved[-1] + 1  # training continued after the checkpoint, not from step 1
    record = json.loads((run_dir / "stage3" / "record.json").read_text())
    assert [e["step"] for e in record["log_history"] if "loss" in e] == [1, 2, 3, 4, 5, 6]


def need_deepspeed() -> None:
    """Skip without DeepSpeed; fail instead where BIRDRL_REQUIRE_DEEPSPEED=1 (`.ci/run`)."""
    pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
    try:
        import deepspeed  # noqa: F401
    except ImportError as exc:
        missing(
            "BIRDRL_REQUIRE_DEEPSPEED",
            f"DeepSpeed is not installed ({exc}): pip install -e '.[deepspeed]'",
        )


@pytest.mark.parametrize(
    ("config", "lora"), [("zero2.yaml", False), ("zero3.yaml", False), ("zero3.yaml", True)]
)
def test_deepspeed_runs_all_four_stages_with_their_evaluations(
    tmp_path: Path, config: str, lora: bool
) -> None:
    """The shipped DeepSpeed config (made a 2-process CPU config by `cpu_launch_config`)
    under ``accelerate launch``: all four stages train, rank 0 evaluates after each one and
    every stage saves a model that reloads whole. Before the stage's process state was torn
    down (`stage_state`), ZeRO-3's rank 0 evaluation after stage 1 ran under the stage's
    ``zero.Init`` while rank 1 waited (a hang, here stopped by the 3-minute collective
    limit), under ZeRO-2 stage 4 died reading the name of a DeepSpeed reference model, and
    a ZeRO-3 LoRA stage hung saving: rank 0 loaded the base model to merge into under the
    live ``zero.Init`` (`outside_zero3`)."""
    need_deepspeed()
    import torch
    from transformers import AutoModelForCausalLM

    from birdrl.training.distributed import cpu_launch_config

    run_dir = tmp_path / "run"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    launch += [str(cpu_launch_config(config, tmp_path)), "-m", "birdrl", "curriculum"]
    args = ["--preset", "smoke", "--out", str(run_dir), "--set", "evaluation.base_model=false"]
    args += ["--set", "collective_timeout_minutes=3", "--set", f"lora.enabled={str(lora).lower()}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(
        [*launch, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    models = {}
    for stage in (1, 2, 3, 4):
        record = json.loads((run_dir / f"stage{stage}" / "record.json").read_text())
        assert record["evaluation"] is not None, f"stage {stage} was not evaluated"
        assert [e["step"] for e in record["log_history"] if "loss" in e] == [1, 2]
        models[stage] = AutoModelForCausalLM.from_pretrained(record["model_dir"])
    start = AutoModelForCausalLM.from_pretrained(
        json.loads((run_dir / "stage1" / "record.json").read_text())["notes"][0].split()[-1]
    )
    reference = dict(start.named_parameters())
    for stage, model in models.items():  # whole tensors, not ZeRO-3's empty placeholders
        for name, param in model.named_parameters():
            assert param.shape == reference[name].shape, (stage, name, param.shape)
    moved = [
        name
        for name, param in models[1].named_parameters()
        if not torch.equal(param, reference[name])
    ]
    assert moved, "the saved stage-1 model equals its starting model: training was lost"


FAULTY_RANK = """
import os, signal, sys, time
from birdrl.training.distributed import dist_context, start_process_group
dist = dist_context()
start_process_group(timeout_minutes=float(sys.argv[2]))
dist.barrier()  # both ranks are up
if dist.rank == 1:
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(3600)  # hangs: a deadlock, a stuck collective
dist.barrier()
print("rank", dist.rank, "passed the barrier")
"""


@pytest.mark.parametrize("fault", ["hang", "kill"])
def test_a_failed_or_hung_rank_stops_every_rank_within_the_timeout(
    tmp_path: Path, fault: str
) -> None:
    """Two CPU processes (torchrun, gloo) with a 6-second collective timeout; rank 1 hangs
    or is killed between two barriers. The run exits non-zero in well under a minute (the
    default limit is hours), and the log names what happened: rank 0's barrier error for a
    hang, the killed rank for a kill."""
    pytest.importorskip("accelerate", reason="the process group is accelerate's")
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY_RANK)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    done = subprocess.run(
        [*cmd, str(script), fault, "0.1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    elapsed = time.monotonic() - start
    log = done.stdout + done.stderr
    assert done.returncode != 0, log
    assert elapsed < 90, f"took {elapsed:.0f} s:\n{log}"
    assert "passed the barrier" not in log
    if fault == "hang":
        assert "CollectiveError: rank 0 of 2: a barrier did not complete" in log, log
        assert "collective_timeout_minutes" in log
    else:  # rank 0's barrier fails at once, or the launcher stops it first; either names it
        assert re.search(r"rank\s*: 1 .*\n.*exitcode\s*: -9", log) or "CollectiveError" in log, log


def test_collective_timeout_reaches_the_trainers(tmp_path: Path) -> None:
    """A trainer that creates the process group itself waits as long as the run's barriers."""
    from birdrl.training.common import common_args
    from birdrl.training.config import ConfigError, apply_overrides

    config = apply_overrides(load_preset("smoke"), ["collective_timeout_minutes=2.5"])
    args = common_args(config, tmp_path, config.stage3)
    assert args["ddp_timeout"] == 150
    with pytest.raises(ConfigError, match="collective_timeout_minutes must be > 0"):
        apply_overrides(load_preset("smoke"), ["collective_timeout_minutes=0"])


def test_cli_dry_run_prints_the_plan() -> None:
    from typer.testing import CliRunner

    from birdrl.cli import app

    result = CliRunner().invoke(
        app, ["curriculum", "--preset", "qwen2.5-coder-7b", "--dry-run", "--processes", "8"]
    )
    assert result.exit_code == 0, result.output
    assert "processes (ranks): 8" in result.output
    assert "replicas per database per rank: 32" in result.output
    assert "accelerate configs shipped with birdrl" in result.output
