"""What a verl launch must agree on before Ray starts: the birdrl config's tasks cover every
row verl will train or validate on, and its replica pool holds what one agent-loop worker
may lease at once. Both mismatches otherwise surface only after verl has loaded the model
(an unknown task at the first validation, or tool calls failing for want of a replica), so
`run_grpo.sh` runs `check_launch` after exporting its data and before `main_ppo`.

    python -m birdrl.training.verl.launch CONFIG --train-rows TRAIN.parquet \\
        --val-rows VAL.parquet --train-batch 32 --n 8 --val-n 1 --agent-workers 8
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from birdrl.training.verl import VerlConfig, VerlConfigError

__all__ = ["LaunchPlan", "check_launch", "replicas_needed", "row_task_ids"]

LEASE_HEADROOM = 2
"""Leases of unsubmitted episodes outlive their step until `lease_ttl_s` (verl never says
when an episode ends), so a worker may hold up to two steps' trajectories at once."""


@dataclass(frozen=True)
class LaunchPlan:
    """The numbers of a verl launch that size the pool: trajectories per step (train:
    ``data.train_batch_size`` x ``rollout.n``; validation: the validation rows x
    ``rollout.val_kwargs.n``, verl validates the whole set in one batch) and
    ``rollout.agent.num_workers``, the processes those trajectories are spread over."""

    train_batch: int
    n: int
    val_rows: int
    val_n: int
    agent_workers: int

    def __post_init__(self) -> None:
        for name in ("train_batch", "n", "val_n", "agent_workers"):
            if getattr(self, name) < 1:
                raise VerlConfigError(
                    f"launch plan: {name} must be >= 1, got {getattr(self, name)}"
                )
        if self.val_rows < 0:
            raise VerlConfigError(f"launch plan: val_rows must be >= 0, got {self.val_rows}")

    @property
    def trajectories_per_batch(self) -> int:
        """The larger of a training step's and the validation's trajectories."""
        return max(self.train_batch * self.n, self.val_rows * self.val_n)


def replicas_needed(plan: LaunchPlan) -> int:
    """Replicas per database one agent-loop worker may need: its share of a batch's
    trajectories (every one of which may be on the same database), times `LEASE_HEADROOM`."""
    return LEASE_HEADROOM * math.ceil(plan.trajectories_per_batch / plan.agent_workers)


def row_task_ids(paths: Iterable[str | Path]) -> list[str]:
    """The task ids (``reward_model.ground_truth``) of exported verl parquet files."""
    import pyarrow.parquet as pq

    ids: list[str] = []
    for path in paths:
        for row in pq.read_table(path, columns=["reward_model"]).to_pylist():
            ids.append(str(row["reward_model"]["ground_truth"]))
    return ids


def check_launch(config: VerlConfig, task_ids: Iterable[str], plan: LaunchPlan) -> None:
    """Refuse a launch whose rows name tasks the config's task source lacks, or whose pool
    is smaller than `replicas_needed`; the error gives the numbers."""
    from birdrl.tasks.benchmark import open_benchmark

    known = {t.instance_id for t in open_benchmark(config.tasks, config.db_root).tasks}
    wanted = list(dict.fromkeys(task_ids))
    missing = [t for t in wanted if t not in known]
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise VerlConfigError(
            f"the verl config's tasks ({config.tasks!r}, {len(known)} tasks) lack {len(missing)} "
            f"of the {len(wanted)} tasks in the training and validation rows ({shown}): every "
            "row is scored through the config, so list every exported source in 'tasks' "
            "(sources join with '+', e.g. 'bundled:train+bundled:test')"
        )
    need = replicas_needed(plan)
    if config.replicas_per_db < need:
        raise VerlConfigError(
            f"replicas_per_db = {config.replicas_per_db} is too small for this launch: "
            f"{plan.trajectories_per_batch} trajectories a batch (train {plan.train_batch} x "
            f"{plan.n}, validation {plan.val_rows} x {plan.val_n}) over {plan.agent_workers} "
            f"agent-loop workers may all lease one database, times {LEASE_HEADROOM} for "
            f"leases held until lease_ttl_s: set replicas_per_db to at least {need}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m birdrl.training.verl.launch", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("config", help="the birdrl verl config (JSON)")
    parser.add_argument("--train-rows", required=True, help="exported training parquet")
    parser.add_argument("--val-rows", required=True, help="exported validation parquet")
    parser.add_argument("--train-batch", type=int, required=True, help="data.train_batch_size")
    parser.add_argument("--n", type=int, required=True, help="actor_rollout_ref.rollout.n")
    parser.add_argument("--val-n", type=int, default=1, help="rollout.val_kwargs.n")
    parser.add_argument(
        "--agent-workers", type=int, required=True, help="rollout.agent.num_workers"
    )
    args = parser.parse_args(argv)
    config = VerlConfig.load(args.config)
    train, val = row_task_ids([args.train_rows]), row_task_ids([args.val_rows])
    plan = LaunchPlan(args.train_batch, args.n, len(val), args.val_n, args.agent_workers)
    try:
        check_launch(config, [*train, *val], plan)
    except VerlConfigError as exc:
        raise SystemExit(f"{args.config}: {exc}") from None
    print(
        f"verl launch checked: {len(train)} training and {len(val)} validation rows in "
        f"{config.tasks!r}; replicas_per_db {config.replicas_per_db} >= "
        f"{replicas_needed(plan)} needed"
    )


if __name__ == "__main__":
    main()
