"""Stages 3 and 4: GRPO with TRL's ``GRPOTrainer``. `run_grpo_stage` is the same for both;
a `Rollouts` object says how completions are produced and scored:

* `SingleTurnRollouts` (stage 3): one answer per prompt, scored by a registered reward
  function (default: the execution reward, the evaluator's test pass rate; text-to-SQL
  rows mixed in by `mix_text2sql` are scored by execution accuracy).
* `EpisodeRollouts` (stage 4, trajectory-level multi-turn): the policy plays whole
  episodes with ``execute_sql`` / ``submit_solution`` in the SQL-Act environment
  (`SQLActToolEnv` through ``environment_factory``); the reward of an episode is its
  submission's pass rate, and the tool results inside the episode are masked from the loss
  by TRL. The reference policy of the KL term is the model the stage starts from, i.e.
  stage 3's output.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from birdrl.agents.base import Agent
from birdrl.db.pool import ReplicaPool
from birdrl.env.sqlact import EnvConfig
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig, Evaluator
from birdrl.evaluation.semantics import REWARD_SEMANTICS
from birdrl.evaluation.session import scoring_session
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.training.common import (
    StageJob,
    StageOutput,
    common_args,
    finish_stage,
    last_checkpoint,
    lora_config,
    prepare_trainer,
    progress_callback,
)
from birdrl.training.config import CurriculumConfig, GRPOStageConfig
from birdrl.training.diagnostics import (
    diagnostics_callback,
    summarize,
    verdicts,
    weight_note,
)
from birdrl.training.distributed import dist_context, episodes_per_rank
from birdrl.training.environment import EpisodeStats, ToolEnvSession
from birdrl.training.episode_loop import episode_loop_trainer
from birdrl.training.generation import RunGeneration, plan_generation
from birdrl.training.groups import group_log_callback
from birdrl.training.models import load_policy, load_tokenizer
from birdrl.training.prefix_sharing import prefix_sharing_trainer
from birdrl.training.rewards import make_reward

__all__ = [
    "EpisodeRollouts",
    "PoolPlan",
    "RolloutInputs",
    "Rollouts",
    "SingleTurnRollouts",
    "grpo_trainer_class",
    "mix_text2sql",
    "run_grpo_stage",
]


def mix_text2sql(
    debug_rows: Sequence[dict[str, Any]],
    text2sql_rows: Sequence[dict[str, Any]],
    ratio: float,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Debugging rows plus ``len(debug_rows) / ratio`` text-to-SQL rows (3.0 = 3:1), drawn
    without replacement (capped at what exists), shuffled deterministically."""
    if ratio <= 0 or not text2sql_rows:
        return list(debug_rows)
    rng = random.Random(seed)
    want = min(len(text2sql_rows), max(1, round(len(debug_rows) / ratio)))
    mixed = list(debug_rows) + rng.sample(list(text2sql_rows), want)
    rng.shuffle(mixed)
    return mixed


def _grpo_args(
    config: CurriculumConfig,
    stage_config: GRPOStageConfig,
    out_dir: Path,
    multi_turn: bool,
    generation: RunGeneration,
    model_path: Path | str | None = None,
) -> Any:
    from trl import GRPOConfig

    extra: dict[str, Any] = generation.grpo_args(model_path)
    if multi_turn:
        extra["max_tool_calling_iterations"] = stage_config.max_tool_calls
    return GRPOConfig(
        **common_args(config, out_dir, stage_config),
        num_generations=stage_config.num_generations,
        max_completion_length=stage_config.max_completion_length,
        temperature=stage_config.temperature,
        beta=stage_config.beta,
        remove_unused_columns=False,
        # every dropout off, LoRA's included: the old-policy, reference and loss passes of
        # one completion must see the same network (TRL's default leaves dropout on)
        disable_dropout=True,
        **extra,
    )


def grpo_trainer_class(*, prefix_sharing: bool, multi_turn: bool) -> type:
    """TRL's ``GRPOTrainer`` with birdrl's parts: each group's prompt computed once
    (`prefix_sharing`) and, for episodes, the loop that ends an episode at its submission
    and trains on the chat template's own tokens (`birdrl.training.episode_loop`)."""
    from trl import GRPOTrainer

    trainer: type = prefix_sharing_trainer(GRPOTrainer) if prefix_sharing else GRPOTrainer
    return episode_loop_trainer(trainer) if multi_turn else trainer


@dataclass(frozen=True)
class PoolPlan:
    """The replica pool a GRPO stage scores on (`scoring_session`'s arguments)."""

    replicas_per_db: int = 1
    pool_root: Path | None = None
    """A pool on disk shared by every rank (one partition each); None: a temporary one."""
    workers: int = 1
    worker_id: int | None = None


@dataclass(frozen=True)
class RolloutInputs:
    """What a rollout mode hands the trainer: its ``GRPOTrainer`` arguments
    (``reward_funcs`` or ``environment_factory``) and, for episodes, their counters (the
    diagnostics read them)."""

    trainer_kwargs: dict[str, Any]
    episode_stats: EpisodeStats | None = None


@dataclass(frozen=True, kw_only=True)
class Rollouts(ABC):
    """How a GRPO stage's completions are produced and scored; everything that differs
    between single-turn and multi-turn GRPO lives in a subclass, so `run_grpo_stage` has
    no branch on the mode."""

    databases: Mapping[str, Path]
    """db_id -> template of every database the rows name."""
    eval_config: EvalConfig = field(default_factory=lambda: EvalConfig(semantics=REWARD_SEMANTICS))
    """How completions are scored (strict semantics unless a run says otherwise)."""
    multi_turn: ClassVar[bool]
    """Whether TRL runs its tool loop (bounded by ``max_tool_calls``)."""

    def pool_plan(self, job: StageJob[GRPOStageConfig]) -> PoolPlan:
        """One replica per database in a temporary pool: scoring needs no more."""
        return PoolPlan()

    @abstractmethod
    def attach(
        self,
        job: StageJob[GRPOStageConfig],
        pool: ReplicaPool | None,
        evaluator: Evaluator | None,
        notes: list[str],
    ) -> AbstractContextManager[RolloutInputs]:
        """The trainer's inputs for the stage's duration; on exit (training over, or
        failed) whatever was opened is closed, and on success what the rollouts saw is
        added to `notes`."""


@dataclass(frozen=True, kw_only=True)
class SingleTurnRollouts(Rollouts):
    """One answer per prompt, scored by the registered reward ``stage_config.reward``."""

    tasks: Mapping[str, Task | TextToSQLTask]
    """instance_id -> task of every row (debugging and text-to-SQL)."""
    judge: Agent | None = None
    """The LLM judge of ``reward = "judge"``."""
    multi_turn: ClassVar[bool] = False

    @contextmanager
    def attach(
        self,
        job: StageJob[GRPOStageConfig],
        pool: ReplicaPool | None,
        evaluator: Evaluator | None,
        notes: list[str],
    ) -> Iterator[RolloutInputs]:
        if evaluator is None:
            raise BirdrlError("single-turn rollouts score in this process: they need an evaluator")
        reward = make_reward(
            job.stage_config.reward, tasks=self.tasks, evaluator=evaluator, judge=self.judge
        )
        yield RolloutInputs({"reward_funcs": [reward]})
        metrics = getattr(reward, "metrics", None)
        if metrics is not None:
            figures = ", ".join(f"{k} {v:.3g}" for k, v in metrics().items())
            notes.append(f"{reward.__name__}: {figures}")


@dataclass(frozen=True, kw_only=True)
class EpisodeRollouts(Rollouts):
    """Whole episodes in the SQL-Act environment, each rewarded by its submission's pass
    rate. Every rank plays on its own partition of one pool on disk, with as many replicas
    per database as it has episodes in flight."""

    tasks: Mapping[str, Task]
    """instance_id -> debugging task of every row."""
    multi_turn: ClassVar[bool] = True

    def pool_plan(self, job: StageJob[GRPOStageConfig]) -> PoolPlan:
        dist = dist_context()
        return PoolPlan(
            replicas_per_db=episodes_per_rank(job.stage_config),
            pool_root=job.out_dir / "pool",
            workers=dist.world_size,
            worker_id=dist.rank,  # worker id = global rank
        )

    @contextmanager
    def attach(
        self,
        job: StageJob[GRPOStageConfig],
        pool: ReplicaPool | None,
        evaluator: Evaluator | None,
        notes: list[str],
    ) -> Iterator[RolloutInputs]:
        config, stage_config = job.config, job.stage_config
        rank = dist_context().rank
        env_config = EnvConfig(
            mode="agent",
            max_tool_calls=stage_config.max_tool_calls,
            max_context_tokens=None,  # TRL bounds the episode by max_completion_length
            schema_budget_chars=config.prompt.schema_budget_chars,
            sample_rows=config.prompt.sample_rows,
        )
        session = ToolEnvSession(
            self.tasks,
            pool,
            evaluator,
            env_config,
            prefix=f"r{rank}-s{job.stage}",  # globally unique trajectory ids
            worker_id=rank,
            verify_clean=config.verify_clean_leases,
            server=stage_config.env_server,
            token=os.environ.get("BIRDRL_ENV_TOKEN") or None,
        )
        if stage_config.env_server is not None:
            notes.append(f"episodes ran on the environment server {stage_config.env_server}")
        if stage_config.reward != "execution":
            notes.append(
                f"stage 4 rewards episodes by execution; reward {stage_config.reward!r} "
                "is used for stage 3 only"
            )
        try:
            yield RolloutInputs({"environment_factory": session.factory}, session.stats)
        finally:
            session.close()
        _note_episodes(session.stats, job.out_dir, notes)


def _note_episodes(stats: EpisodeStats, out_dir: Path, notes: list[str]) -> None:
    """Write this rank's episode counters (``episodes-rankN.json``) and note them."""
    dist = dist_context()
    (out_dir / f"episodes-rank{dist.rank}.json").write_text(
        json.dumps(stats.to_dict(), indent=1), encoding="utf-8"
    )
    where = f"rank {dist.rank}: " if dist.distributed else ""
    notes.append(
        f"{where}episodes {stats.episodes}: submitted {stats.submitted}, solved "
        f"{stats.solved}, tool calls {stats.tool_calls}, looked at the database before "
        f"submitting {stats.explored()}, infrastructure errors {stats.infra_errors}"
    )


def run_grpo_stage(job: StageJob[GRPOStageConfig], rollouts: Rollouts) -> StageOutput:
    """Train ``job.model_path`` with GRPO on ``job.rows``; `rollouts` produces and scores
    the completions (single answers, or episodes in the environment)."""
    from datasets import Dataset

    started = time.monotonic()
    config, stage_config, out_dir, stage = job.config, job.stage_config, job.out_dir, job.stage
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, notes = load_tokenizer(job.model_path)
    notes.insert(0, f"started from {job.model_path}")
    generation = job.generation or RunGeneration(
        config, plan_generation(replace(config, generation_engine="hf"))
    )
    args = _grpo_args(
        config, stage_config, out_dir, rollouts.multi_turn, generation, job.model_path
    )
    plan = rollouts.pool_plan(job)
    dist = dist_context()
    # episodes on an environment server lease and score there: no local pool, no databases
    remote = rollouts.multi_turn and stage_config.env_server is not None
    sessions: AbstractContextManager[tuple[Any, Any]] = (
        nullcontext((None, None))
        if remote
        else scoring_session(
            {row["db_id"]: rollouts.databases[row["db_id"]] for row in job.rows},
            replicas_per_db=plan.replicas_per_db,
            eval_config=rollouts.eval_config,
            prefix=f"birdrl-stage{stage}-",
            pool_root=plan.pool_root,
            workers=plan.workers,
            worker_id=plan.worker_id,
        )
    )
    with sessions as (pool, evaluator):
        with rollouts.attach(job, pool, evaluator, notes) as inputs:
            trainer_class = grpo_trainer_class(
                prefix_sharing=config.prefix_sharing, multi_turn=rollouts.multi_turn
            )
            with generation.building_trainer(job.model_path):
                trainer = trainer_class(
                    model=load_policy(job.model_path, generation.training_precision.weights),
                    args=args,
                    train_dataset=Dataset.from_list(list(job.rows)),
                    processing_class=tokenizer,
                    peft_config=lora_config(config),
                    callbacks=[progress_callback(job.progress, f"stage {stage}")],
                    **inputs.trainer_kwargs,
                )
            diagnostics = diagnostics_callback(
                trainer,
                stage,
                "grpo",
                episode_stats=inputs.episode_stats,
                no_signal_steps=stage_config.no_signal_steps,
                warn=job.progress,
            )
            group_log_callback(
                trainer, out_dir, job.rows, limit=stage_config.log_groups, notes=notes
            )
            generation.attach(trainer)
            notes.append(
                trainer.prefix_sharing_note
                if config.prefix_sharing
                else "GRPO loss: TRL's per-completion path (prefix_sharing = false)"
            )
            rollout_engine = generation.describe("rollouts")
            notes.append(
                f"rollouts generated by {rollout_engine['engine']} in {rollout_engine['dtype']}"
            )
            notes.append(f"importance-sampling correction: {rollout_engine['importance_sampling']}")
            prepare_trainer(trainer, job.on_trainer)
            if trainer.ref_model is not None:
                # under DeepSpeed the reference is an engine, whose `config` is DeepSpeed's
                reference = getattr(trainer.ref_model, "module", trainer.ref_model)
                notes.append(f"KL reference policy: {reference.config._name_or_path}")
            elif stage_config.beta > 0:
                notes.append(
                    "KL reference policy: the stage's starting model (LoRA adapters disabled)"
                )
            trainer.train(resume_from_checkpoint=last_checkpoint(out_dir))
        output = finish_stage(trainer, tokenizer, out_dir, started)
    dist.barrier()  # every rank has closed its partition of a shared pool
    if plan.pool_root is not None and dist.is_main:
        shutil.rmtree(plan.pool_root, ignore_errors=True)
    output.notes[:0] = notes
    precision_note = generation.rollout_note(output.log_history)
    if precision_note is not None:
        output.notes.append(precision_note)
    output.notes.append(weight_note(diagnostics))
    for sentence in verdicts("grpo", summarize("grpo", output.log_history)):
        diagnostics.warn(f"warning: stage {stage}: {sentence}")
    return output
