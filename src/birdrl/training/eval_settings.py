"""The settings a curriculum evaluates its models with, as one `AgentEvalSettings`: the
preset's prompt (``[prompt]``), the tool schemas stages 2 and 4 train with, the
``[evaluation]`` limits and greedy decoding. The run writes them beside every model it saves
and evaluates from the same object (`birdrl.training.curriculum.evaluate_policy_splits`),
so ``birdrl eval --agent hf:RUN/stageN/model`` reproduces the stage's episodes.
"""

from __future__ import annotations

from pathlib import Path

from birdrl.agents.eval_settings import AgentEvalSettings
from birdrl.agents.vllm_engine import model_context
from birdrl.training.config import CurriculumConfig, load_preset
from birdrl.training.environment import tool_schemas
from birdrl.training.generation import RunGeneration, derive_max_model_len
from birdrl.training.models import torch_dtype

__all__ = ["curriculum_eval_settings", "preset_eval_settings", "run_eval_settings"]


def curriculum_eval_settings(
    config: CurriculumConfig,
    *,
    max_context_tokens: int | None = None,
    dtype: str = "auto",
    written_by: str = "",
) -> AgentEvalSettings:
    """The settings `config`'s held-out evaluations use. The context budget
    (`max_context_tokens`, None: the model's own) and the generation `dtype` depend on the engine the run plans, which `run_eval_settings` knows."""
    settings = config.evaluation
    return AgentEvalSettings(
        mode="agent",
        max_tool_calls=settings.max_tool_calls,
        schema_budget_chars=config.prompt.schema_budget_chars,
        sample_rows=config.prompt.sample_rows,
        max_context_tokens=max_context_tokens,
        token_count="approx",
        max_new_tokens=settings.max_new_tokens,
        temperature=0.0,
        seed=config.seed,
        batch_size=settings.batch_size,
        dtype=dtype,
        tools=tuple(tool_schemas()),  # the tools stages 2 and 4 trained with, word for word
        semantics=config.eval_semantics,
        written_by=written_by or f"birdrl curriculum, preset {config.name!r}",
    )


def run_eval_settings(
    config: CurriculumConfig, generation: RunGeneration, model_dir: Path | str, written_by: str = ""
) -> AgentEvalSettings:
    """`curriculum_eval_settings` for the model at `model_dir` on the run's `generation`
    engine: the context its agent has (the model's own under transformers; the engine's
    length, capped at the model's, under vLLM) and the dtype it generates in."""
    plan = generation.plan
    own = model_context(model_dir)
    if plan.evaluation == "vllm":
        derived = derive_max_model_len(config)
        context = derived if own is None else min(derived, own)
        dtype = plan.dtype.dtype
    else:  # `RunGeneration.agent`: bf16 where the plan chose it, else the training dtype
        context = own
        chosen = plan.dtype.dtype if plan.dtype.bf16 else torch_dtype(config.dtype)
        dtype = str(chosen).removeprefix("torch.")
        if dtype not in ("float32", "bfloat16"):  # float16 weights: not a choice of the CLI's
            dtype = "auto"
    return curriculum_eval_settings(
        config, max_context_tokens=context, dtype=dtype, written_by=written_by
    )


def preset_eval_settings(name: str) -> tuple[AgentEvalSettings, str]:
    """The settings a run of preset `name` (a shipped name or a TOML path) evaluates with,
    and a label: its prompt, tools, limits and decoding; the context is the model's own and
    the dtype ``auto`` (as a run generating with transformers on this machine)."""
    config = load_preset(name)
    return curriculum_eval_settings(config, written_by=f"preset {name!r}"), f"preset {name!r}"
