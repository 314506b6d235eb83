"""Running the curriculum in several processes (``accelerate launch`` on GPUs, ``torchrun``
on CPUs or GPUs): who this
process is, what only the main process does, and the resolved distributed plan.

Every rank runs the same curriculum code. The main process builds each stage's dataset,
evaluates and writes records and reports while the others wait at a barrier; the trainers
are TRL's, which shard the prompts across ranks. In stage 4 each rank owns one partition of
a pool shared on disk (worker id = global rank, locked against every other process), sized
to that rank's episodes in flight, and prefixes its trajectory ids with its rank, so no
acquire ever waits on another rank and no replica is ever leased twice.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from birdrl.errors import BirdrlError
from birdrl.training.config import (
    DEFAULT_COLLECTIVE_TIMEOUT_MIN,
    CurriculumConfig,
    GRPOStageConfig,
)

__all__ = [
    "CollectiveError",
    "DistContext",
    "DistributedPlan",
    "accelerate_configs",
    "cpu_launch_config",
    "dist_context",
    "episodes_per_rank",
    "outside_zero3",
    "plan_run",
    "stage_state",
    "start_process_group",
]


class CollectiveError(BirdrlError, RuntimeError):
    """A barrier or collective did not complete: another rank failed or hangs."""


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run (from the launcher's environment variables)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        """Wait for every rank (no-op in a single process). The wait is limited by the
        process group's timeout (`start_process_group`); a rank that died or hangs makes
        this raise `CollectiveError` instead of waiting for ever."""
        if self.distributed:
            from accelerate import PartialState

            start_process_group()  # where the run did not start it (a library's own call)
            try:
                PartialState().wait_for_everyone()
            except RuntimeError as exc:  # torch.distributed.DistError and gloo's errors
                raise CollectiveError(
                    f"rank {self.rank} of {self.world_size}: a barrier did not complete "
                    f"({exc}). Another rank has failed (its error is in its log) or hangs; "
                    "a healthy run that waits longer needs a larger collective_timeout_minutes"
                ) from exc

    @contextmanager
    def main_first(self) -> Iterator[None]:
        """Run the block on the main process, then on the others (which find its results)."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()


def start_process_group(timeout_minutes: float = DEFAULT_COLLECTIVE_TIMEOUT_MIN) -> None:
    """Create the run's process group (gloo on CPUs, through accelerate's `PartialState`,
    which the trainers then share) with `timeout_minutes` as the wait limit of every barrier
    and collective, before a library creates it with its own (torch's default is 30 min).
    A no-op in one process, and where the group exists already (its limit stays)."""
    if not dist_context().distributed:
        return
    import torch
    from accelerate import PartialState

    PartialState(cpu=not torch.cuda.is_available(), timeout=timedelta(minutes=timeout_minutes))


@contextmanager
def stage_state() -> Iterator[None]:
    """The process-wide training state one stage's trainer creates, torn down when the stage
    ends, so the next stage and the main process's evaluation start clean: accelerate's
    `AcceleratorState` and `GradientState` (with the stage's DeepSpeed plugin, whose config
    the trainer filled in place with its batch sizes) and transformers' ZeRO-3 flag, which
    the plugin sets for the whole process. Left alone, that flag makes a later
    ``from_pretrained`` run under ``deepspeed.zero.Init`` and ``generate`` sync with
    other ranks: rank 0's evaluation after a ZeRO-3 stage then waits on collectives the other
    ranks never issue. The process group (`PartialState`) stays: it is the run's."""
    try:
        yield
    finally:
        _reset_training_state()


@contextmanager
def outside_zero3() -> Iterator[None]:
    """Load models as plain, whole models on this rank alone while a ZeRO-3 stage is live:
    transformers' ZeRO-3 flag is hidden for the block, so ``from_pretrained`` does not run
    under ``deepspeed.zero.Init`` (which partitions every parameter with collectives that
    the other ranks, not loading anything, never join)."""
    import sys

    if "transformers.integrations.deepspeed" not in sys.modules:
        yield
        return
    from transformers.integrations import deepspeed as hf_deepspeed

    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def _reset_training_state() -> None:
    import sys

    if "accelerate" not in sys.modules:  # nothing was created
        return
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    if "transformers.integrations.deepspeed" in sys.modules:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()


def dist_context(environ: Mapping[str, str] | None = None) -> DistContext:
    """Read RANK / WORLD_SIZE / LOCAL_RANK (set by accelerate, torchrun, deepspeed)."""
    env = os.environ if environ is None else environ
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        local = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise ValueError(f"malformed RANK/WORLD_SIZE/LOCAL_RANK in the environment: {exc}") from exc
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK {rank} is outside WORLD_SIZE {world}")
    return DistContext(rank, world, local)


def episodes_per_rank(stage: GRPOStageConfig) -> int:
    """Episodes one rank plays at once: TRL generates ``batch_size × grad_accum`` completions
    per rank per generation round (``steps_per_generation`` defaults to ``grad_accum``)."""
    return max(1, stage.batch_size * stage.grad_accum)


@dataclass(frozen=True)
class DistributedPlan:
    """What a launch will do, before it does it (``birdrl curriculum --dry-run``)."""

    world_size: int
    episodes_per_rank: int
    databases: dict[str, int]
    """db_id -> template size in bytes (stage 4's databases)."""
    prompts_per_step: dict[int, int]
    """GRPO stage -> prompts per optimizer step over all ranks."""

    @property
    def replicas_per_db_per_rank(self) -> int:
        """One replica per episode in flight, so an acquire never waits."""
        return self.episodes_per_rank

    @property
    def replica_bytes(self) -> int:
        """Disk stage 4's pool needs (all ranks, replicas of every database)."""
        per_rank = sum(self.databases.values()) * self.replicas_per_db_per_rank
        return per_rank * self.world_size

    def lines(self) -> list[str]:
        mib = self.replica_bytes / 2**20
        return [
            f"processes (ranks): {self.world_size}",
            f"stage 4 episodes in flight per rank: {self.episodes_per_rank}",
            f"stage 4 replicas per database per rank: {self.replicas_per_db_per_rank} "
            f"({len(self.databases)} databases, {mib:.1f} MiB of replicas in all)",
            *(
                f"stage {s}: {n} prompts per optimizer step over all ranks"
                for s, n in sorted(self.prompts_per_step.items())
            ),
        ]


def plan_run(
    config: CurriculumConfig, databases: Mapping[str, Path], world_size: int
) -> DistributedPlan:
    """The distributed plan of `config` over `world_size` processes."""
    prompts: dict[int, int] = {}
    for n, stage in ((3, config.stage3), (4, config.stage4)):
        total = stage.batch_size * stage.grad_accum * world_size
        prompts[n] = max(1, total // max(1, stage.num_generations))
    return DistributedPlan(
        world_size=world_size,
        episodes_per_rank=episodes_per_rank(config.stage4),
        databases={k: Path(p).stat().st_size for k, p in sorted(databases.items())},
        prompts_per_step=prompts,
    )


def cpu_launch_config(name: str, dest: Path, processes: int = 2) -> Path:
    """The shipped accelerate config `name` (``zero2.yaml``, ...) rewritten for `processes`
    CPU processes, written to `dest` (a folder): ``use_cpu``, no mixed precision (a CPU
    trains in float32; DeepSpeed refuses a bf16 config beside a float32 trainer) and the
    process count; every other setting is the shipped file's, so the CPU run exercises the
    same sharding. DeepSpeed picks its CPU accelerator by itself where CUDA is absent."""
    import yaml

    source = accelerate_configs() / name
    if not source.is_file():
        shipped = sorted(p.name for p in accelerate_configs().glob("*.yaml"))
        raise ValueError(f"no shipped accelerate config {name!r} (shipped: {', '.join(shipped)})")
    config = yaml.safe_load(source.read_text(encoding="utf-8"))
    config.update(use_cpu=True, mixed_precision="no", num_processes=processes)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"cpu-{name}"
    out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return out


def accelerate_configs() -> Path:
    """The folder of accelerate launcher configs shipped with birdrl (``multi-gpu.yaml``,
    ``zero2.yaml``, ``zero3.yaml``, ``fsdp.yaml``)."""
    return Path(__file__).resolve().parent / "accelerate"
