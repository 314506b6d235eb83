"""Stages 3 and 4: GRPO with TRL's ``GRPOTrainer``.

* **Stage 3 (single-turn)**: one answer per prompt, scored by a reward function (default:
  the execution reward, the evaluator's test pass rate; text-to-SQL rows mixed in by
  `mix_text2sql` are scored by execution accuracy).
* **Stage 4 (trajectory-level, multi-turn)**: the policy plays whole episodes with
  ``execute_sql`` / ``submit_solution`` in the SQL-Act environment (`SQLActToolEnv` through
  ``environment_factory``); the reward of an episode is its submission's pass rate, and the
  tool results inside the episode are masked from the loss by TRL. The reference policy of
  the KL term is the model the stage starts from, i.e. stage 3's output.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from birdrl.agents.base import Agent
from birdrl.env.sqlact import EnvConfig
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.session import scoring_session
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.training.common import (
    Progress,
    StageOutput,
    TrainerHook,
    common_args,
    finish_stage,
    last_checkpoint,
    lora_config,
    prepare_trainer,
    progress_callback,
)
from birdrl.training.config import ConfigError, CurriculumConfig, GRPOStageConfig
from birdrl.training.diagnostics import (
    diagnostics_callback,
    summarize,
    verdicts,
    weight_note,
)
from birdrl.training.distributed import dist_context, episodes_per_rank
from birdrl.training.environment import ToolEnvSession
from birdrl.training.groups import group_log_callback
from birdrl.training.models import autocast_generation, load_policy, load_tokenizer, use_cuda
from birdrl.training.rewards import make_reward

__all__ = ["mix_text2sql", "run_grpo_stage"]


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


def _check_vllm() -> None:
    """``use_vllm`` needs vLLM and a GPU; say so before TRL fails deep inside."""
    if importlib.util.find_spec("vllm") is None or not use_cuda():
        raise ConfigError(
            "use_vllm = true needs the vllm package and a CUDA GPU "
            f"({'vllm is not installed' if importlib.util.find_spec('vllm') is None else 'no GPU found'}); "
            "install vllm on a GPU machine, or run with --set use_vllm=false (plain generate)"
        )


def _grpo_args(
    config: CurriculumConfig, stage_config: GRPOStageConfig, out_dir: Path, multi_turn: bool
) -> Any:
    from trl import GRPOConfig

    extra: dict[str, Any] = {}
    if multi_turn:
        extra["max_tool_calling_iterations"] = stage_config.max_tool_calls
    if config.use_vllm:
        if config.vllm_mode not in ("colocate", "server"):
            raise ConfigError(f"vllm_mode must be colocate or server, not {config.vllm_mode!r}")
        if config.vllm_mode == "colocate":
            _check_vllm()  # server mode generates in another process
        extra.update(use_vllm=True, vllm_mode=config.vllm_mode)
        if config.vllm_server_url:
            extra["vllm_server_base_url"] = config.vllm_server_url
    return GRPOConfig(
        **common_args(config, out_dir, stage_config),
        num_generations=stage_config.num_generations,
        max_completion_length=stage_config.max_completion_length,
        temperature=stage_config.temperature,
        beta=stage_config.beta,
        remove_unused_columns=False,
        **extra,
    )


def run_grpo_stage(
    *,
    stage: int,
    model_path: Path | str,
    rows: Sequence[dict[str, Any]],
    tasks: Mapping[str, Task | TextToSQLTask],
    databases: Mapping[str, Path],
    out_dir: Path,
    config: CurriculumConfig,
    stage_config: GRPOStageConfig,
    judge: Agent | None = None,
    eval_config: EvalConfig | None = None,
    progress: Progress | None = None,
    on_trainer: TrainerHook | None = None,
) -> StageOutput:
    """Train `model_path` with GRPO on `rows`; stage 4 plays episodes in the environment."""
    from datasets import Dataset
    from trl import GRPOTrainer

    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    multi_turn = stage == 4
    tokenizer, notes = load_tokenizer(model_path)
    notes.insert(0, f"started from {model_path}")
    args = _grpo_args(config, stage_config, out_dir, multi_turn)
    used = {row["db_id"]: databases[row["db_id"]] for row in rows}
    dist = dist_context()
    with scoring_session(
        used,
        replicas_per_db=episodes_per_rank(stage_config) if multi_turn else 1,
        eval_config=eval_config,
        prefix=f"birdrl-stage{stage}-",
        # stage 4: one pool on disk, one partition per rank (worker id = global rank)
        pool_root=out_dir / "pool" if multi_turn else None,
        workers=dist.world_size if multi_turn else 1,
        worker_id=dist.rank if multi_turn else None,
    ) as (pool, evaluator):
        kwargs: dict[str, Any] = {}
        session = None
        reward = None
        if multi_turn:
            debug_tasks = {k: t for k, t in tasks.items() if isinstance(t, Task)}
            env_config = EnvConfig(
                mode="agent",
                max_tool_calls=stage_config.max_tool_calls,
                max_context_tokens=None,  # TRL bounds the episode by max_completion_length
                schema_budget_chars=config.prompt.schema_budget_chars,
                sample_rows=config.prompt.sample_rows,
            )
            session = ToolEnvSession(
                debug_tasks,
                pool,
                evaluator,
                env_config,
                prefix=f"r{dist.rank}-s{stage}",  # globally unique trajectory ids
                worker_id=dist.rank,
                verify_clean=config.verify_clean_leases,
            )
            kwargs["environment_factory"] = session.factory
            if stage_config.reward != "execution":
                notes.append(
                    f"stage 4 rewards episodes by execution; reward {stage_config.reward!r} "
                    "is used for stage 3 only"
                )
        else:
            reward = make_reward(
                stage_config.reward,
                tasks=tasks,
                evaluator=evaluator,
                judge=judge,
            )
            kwargs["reward_funcs"] = [reward]
        trainer = GRPOTrainer(
            model=load_policy(model_path, config.dtype),
            args=args,
            train_dataset=Dataset.from_list(list(rows)),
            processing_class=tokenizer,
            peft_config=lora_config(config),
            callbacks=[progress_callback(progress, f"stage {stage}")],
            **kwargs,
        )
        diagnostics = diagnostics_callback(
            trainer,
            stage,
            "grpo",
            episode_stats=session.stats if session is not None else None,
            no_signal_steps=stage_config.no_signal_steps,
            warn=progress,
        )
        group_log_callback(trainer, out_dir, rows, limit=stage_config.log_groups, notes=notes)
        if config.bf16_generation:
            autocast_generation(trainer.model)
        prepare_trainer(trainer, on_trainer)
        if trainer.ref_model is not None:
            notes.append(f"KL reference policy: {trainer.ref_model.config._name_or_path}")
        elif stage_config.beta > 0:
            notes.append("KL reference policy: the stage's starting model (LoRA adapters disabled)")
        try:
            trainer.train(resume_from_checkpoint=last_checkpoint(out_dir))
        finally:
            if session is not None:
                session.close()
        output = finish_stage(trainer, tokenizer, out_dir, started)
    dist.barrier()  # every rank has closed its partition
    if multi_turn and dist.is_main:
        shutil.rmtree(out_dir / "pool", ignore_errors=True)
    if session is not None:
        s = session.stats
        (out_dir / f"episodes-rank{dist.rank}.json").write_text(
            json.dumps(s.to_dict(), indent=1), encoding="utf-8"
        )
        where = f"rank {dist.rank}: " if dist.distributed else ""
        notes.append(
            f"{where}episodes {s.episodes}: submitted {s.submitted}, solved {s.solved}, "
            f"tool calls {s.tool_calls}, infrastructure errors {s.infra_errors}"
        )
    metrics = getattr(reward, "metrics", None)
    if reward is not None and metrics is not None:
        figures = ", ".join(f"{k} {v:.3g}" for k, v in metrics().items())
        notes.append(f"{reward.__name__}: {figures}")
    output.notes[:0] = notes
    output.notes.append(weight_note(diagnostics))
    for sentence in verdicts("grpo", summarize("grpo", output.log_history)):
        diagnostics.warn(f"warning: stage {stage}: {sentence}")
    return output
