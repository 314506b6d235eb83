"""Loading the policy for training: where a model spec points, its dtype, and a tokenizer
whose chat template can render tool calls (TRL needs one for tool-use SFT and multi-turn
GRPO, and the trained model is later prompted the same way)."""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from birdrl.agents.chat import align_eos
from birdrl.agents.hardware import Bf16Capability, DtypeChoice, choose_generation_dtype
from birdrl.agents.models import MissingDependencyError, ModelError, resolve_model
from birdrl.cache import cache_root

if TYPE_CHECKING:
    from birdrl.training.config import CurriculumConfig

__all__ = [
    "TRAIN_EXTRA",
    "TrainingPrecision",
    "autocast_generation",
    "load_policy",
    "load_tokenizer",
    "master_weights_source",
    "policy_precision",
    "prepare_tokenizer",
    "require_training",
    "resolve_training_model",
    "torch_dtype",
    "training_precision",
    "use_cuda",
]

TRAIN_EXTRA = 'pip install -e ".[train]"'
TINY_RANDOM = "tiny-random"
"""A randomly initialised tiny Qwen2-style model with an offline tokenizer (CI, smoke runs)."""


def require_training() -> None:
    """Raise `MissingDependencyError` naming the install command when the training extra
    (torch, transformers, trl, peft, datasets) is absent."""
    wanted = ("torch", "transformers", "trl", "peft", "datasets", "accelerate")
    missing = [m for m in wanted if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependencyError(
            f"training needs {', '.join(missing)}, not installed; install the `train` extra "
            f"with `{TRAIN_EXTRA}`"
        )


def resolve_training_model(spec: str) -> Path:
    """The local directory of the model to train: ``embedded`` (the bundled SmolLM2),
    ``tiny-random`` (built offline into the cache), a local directory, or a hub id
    ``ORG/NAME`` (its snapshot in huggingface_hub's cache; `resolve_model`)."""
    if spec.strip().lower() == TINY_RANDOM:
        from birdrl.training.tiny import build_tiny_model

        return build_tiny_model(cache_root() / "models" / TINY_RANDOM)
    return resolve_model(spec)


def use_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def torch_dtype(name: str) -> Any:
    """``auto``: bfloat16 on a GPU, float32 on CPU (bf16 training on CPU is slow and lossy)."""
    import torch

    if name == "auto":
        return torch.bfloat16 if use_cuda() else torch.float32
    if name not in ("float32", "bfloat16", "float16"):
        raise ModelError(f"dtype must be auto, float32, bfloat16 or float16, not {name!r}")
    return getattr(torch, name)


@dataclass(frozen=True)
class TrainingPrecision:
    """How the trainer computes: its weights' dtype, and whether its forward and backward
    passes run under bf16 autocast (TRL's ``bf16``; float32 weights and optimizer state
    stay the master copy)."""

    weights: str
    """The dtype the policy is loaded in: ``float32``, ``bfloat16`` or ``float16``."""
    autocast: DtypeChoice
    """``bf16_training``'s choice and the capability it saw."""
    master: str | None = None
    """Why the weights load in float32 although ``dtype`` is bfloat16 (full fine-tuning
    keeps float32 master weights; `master_weights_source`); None: they load in ``dtype``."""

    @property
    def bf16(self) -> bool:
        """TRL's ``bf16`` argument: autocast chosen, weights that are bf16 already, or
        float32 master weights of a bf16 run."""
        return self.autocast.bf16 or self.weights == "bfloat16" or self.master is not None

    def describe(self) -> str:
        """For the report's generation table, e.g. ``float32 + bf16 autocast``."""
        if self.bf16 and self.weights != "bfloat16":
            return f"{self.weights} + bf16 autocast"
        return self.weights

    @property
    def reason(self) -> str:
        """One line for the report: the precision and why."""
        return f"{self.describe()} ({self.master or self.autocast.why})"


def master_weights_source(environ: Mapping[str, str] | None = None) -> str | None:
    """What keeps float32 master weights of bf16 parameters in this launch, from the
    variables ``accelerate launch`` sets; None: nothing but the weights themselves.

    DeepSpeed's bf16 optimizer (ZeRO 1-3) keeps a float32 copy of its partition. accelerate's
    FSDP (1 and 2) upcasts every trainable bf16 parameter to float32 whenever mixed
    precision is on, which TRL's ``bf16`` (set for bf16 weights) always turns on, whatever
    ``mixed_precision`` the launcher's config says. DDP (``accelerate launch`` with
    multi-gpu.yaml, torchrun) and a single process train the parameters as loaded."""
    env = os.environ if environ is None else environ
    if env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return "DeepSpeed's bf16 optimizer keeps float32 master weights"
    if env.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return "FSDP upcasts trainable bf16 parameters to float32 under mixed precision"
    return None


def training_precision(
    dtype: str,
    bf16_training: bool | str,
    capability: Bf16Capability | None = None,
    *,
    full_finetune: bool = False,
    environ: Mapping[str, str] | None = None,
) -> TrainingPrecision:
    """The precision of training with weights in `dtype` and ``bf16_training`` =
    `bf16_training` (``auto``: autocast only where `capability`, default `detect_bf16()`,
    says bf16 is native).

    Full fine-tuning (`full_finetune`) of bf16 weights loads them in float32 and trains
    under bf16 autocast unless the launch keeps float32 masters itself
    (`master_weights_source`, read from `environ`): an optimizer step on bf16 weights
    rounds every update below about |w|/256 away, and lr 1e-6..1e-5 updates are that
    small. LoRA needs nothing: peft keeps its adapters in float32 over a bf16 base."""
    weights = str(torch_dtype(dtype)).removeprefix("torch.")
    choice = choose_generation_dtype(bf16_training, capability, name="bf16_training")
    if full_finetune and weights == "bfloat16" and master_weights_source(environ) is None:
        why = (
            "full fine-tuning in bf16 without DeepSpeed or FSDP: float32 master weights, "
            "as bf16 weights would round lr-sized updates away"
        )
        return TrainingPrecision("float32", choice, master=why)
    return TrainingPrecision(weights, choice)


def policy_precision(
    config: CurriculumConfig, capability: Bf16Capability | None = None
) -> TrainingPrecision:
    """`training_precision` of `config`'s trainer in this launch (its ``dtype``,
    ``bf16_training``, and full fine-tuning when LoRA is off)."""
    return training_precision(
        config.dtype, config.bf16_training, capability, full_finetune=not config.lora.enabled
    )


def prepare_tokenizer(tokenizer: Any, where: str) -> list[str]:
    """Make `tokenizer` ready for training in place; returns notes on what was changed.

    A chat template that cannot render tool calls is replaced by the Qwen2.5 template when
    the vocabulary has the ChatML tokens that template uses (SmolLM2, Qwen); otherwise the
    model cannot be trained on tool use and this raises."""
    from trl.chat_template_utils import supports_tool_calling

    notes = []
    if not supports_tool_calling(tokenizer):
        vocab = tokenizer.get_vocab()
        if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
            from birdrl.training.tiny import qwen_chat_template

            tokenizer.chat_template = qwen_chat_template()
            notes.append(
                f"the chat template of {where} cannot render tool calls; it was replaced by "
                "the Qwen2.5 template (same ChatML tokens)"
            )
        else:
            raise ModelError(
                f"the chat template of {where} cannot render tool calls and the vocabulary "
                "lacks ChatML tokens; give the tokenizer a tool-capable chat template"
            )
    eos_note = align_eos(tokenizer, where)
    if eos_note is not None:
        notes.append(eos_note)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return notes


def load_tokenizer(path: Path | str) -> tuple[Any, list[str]]:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the tokenizer of {path}: {exc}") from exc
    return tokenizer, prepare_tokenizer(tokenizer, str(path))


def autocast_generation(model: Any) -> None:
    """Make `model.generate` run under bfloat16 autocast on the training device. TRL's GRPO
    generates through ``unwrapped_model.generate``, so rollouts get faster while the
    trainer's own forward and backward passes stay in the weights' dtype."""
    import torch

    original = model.generate
    device = "cuda" if use_cuda() else "cpu"

    @functools.wraps(original)
    def generate(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device, dtype=torch.bfloat16):
            return original(*args, **kwargs)

    model.generate = generate


def load_policy(path: Path | str, dtype: str = "auto") -> Any:
    """The causal LM at `path`, in the training dtype, on the training device."""
    from transformers import AutoModelForCausalLM

    try:
        model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype(dtype))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the model in {path}: {exc}") from exc
    return model.to("cuda") if use_cuda() else model
