"""The numbers of a model's architecture that its memory follows from: parameter counts
(whole, per layer, a LoRA adapter's), KV cache and activations per token.

`model_shape` reads them from the model's ``config.json`` when it is on this machine and
otherwise from the public architectures of the GPU presets' models (`KNOWN_MODELS`);
parameter counts are computed from the architecture, never copied from a model card.
Nothing here downloads, and nothing imports torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from birdrl.agents.models import is_hub_id
from birdrl.errors import BirdrlError
from birdrl.hub import hub_cache_dir

__all__ = [
    "KNOWN_MODELS",
    "LORA_MODULES",
    "ModelShape",
    "UnknownArchitectureError",
    "model_shape",
    "shape_from_config",
]

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a decoder layer (``all-linear``: peft leaves the output head out)."""


class UnknownArchitectureError(BirdrlError):
    """A model whose architecture cannot be read here (no local config.json, not in
    `KNOWN_MODELS`, a layout or LoRA target the arithmetic does not know)."""


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer (Llama/Qwen2 layout: attention with
    grouped KV heads, a gated MLP, two RMSNorms per layer) that its memory follows from."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    attention_bias: bool = False
    """Biases on the q, k and v projections (Qwen2)."""
    head_dim: int | None = None
    """None: ``hidden_size / num_heads``."""
    context_length: int | None = None
    source: str = "built-in table"
    """Where the numbers come from (a config.json, the built-in table)."""

    @property
    def q_dim(self) -> int:
        return self.num_heads * (self.head_dim or self.hidden_size // self.num_heads)

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * (self.head_dim or self.hidden_size // self.num_heads)

    def _linear_shapes(self) -> dict[str, tuple[int, int]]:
        h, q, kv, i = self.hidden_size, self.q_dim, self.kv_dim, self.intermediate_size
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer: linear weights, q/k/v biases, two norms."""
        weights = sum(a * b for a, b in self._linear_shapes().values())
        bias = self.q_dim + 2 * self.kv_dim if self.attention_bias else 0
        return weights + bias + 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        """The input embedding and, when not tied to it, the output head."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    @property
    def params(self) -> int:
        return self.num_layers * self.layer_params + self.embedding_params + self.hidden_size

    def lora_params(self, r: int, target_modules: str | list[str]) -> int:
        """Adapter parameters of LoRA rank `r` on `target_modules` (``all-linear`` or
        module names): ``r × (in + out)`` per adapted linear layer."""
        shapes = self._linear_shapes()
        names = list(shapes) if target_modules == "all-linear" else target_modules
        if isinstance(names, str):
            names = [names]
        unknown = [n for n in names if n not in shapes]
        if unknown:
            raise UnknownArchitectureError(
                f"lora.target_modules {unknown} are not linear layers the memory plan knows "
                f"({', '.join(LORA_MODULES)} or all-linear)"
            )
        return self.num_layers * sum(r * sum(shapes[n]) for n in names)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache of one token over all layers (keys and values)."""
        return 2 * self.num_layers * self.kv_dim * dtype_bytes

    def activation_bytes_per_token(
        self, checkpointing: bool, dtype_bytes: int = 2, lora_dropout: bool = False
    ) -> float:
        """Activations kept for the backward pass, per token (an estimate). One layer keeps
        about 16 h + 3 kv + 4 i values: the attention's inputs, q, k, v and output, the
        gated MLP's four i-wide tensors, and the RMSNorms' float32 intermediates; LoRA
        dropout adds a dropped copy of each adapted layer's input (6 h + i). With
        checkpointing, every layer keeps its input and one layer at a time is recomputed,
        its backward holding two i-wide gradients besides."""
        h, kv, i = self.hidden_size, self.kv_dim, self.intermediate_size
        layer = (16 * h + 3 * kv + 4 * i + ((6 * h + i) if lora_dropout else 0)) * dtype_bytes
        if checkpointing:
            return self.num_layers * h * dtype_bytes + layer + 2 * i * dtype_bytes
        return self.num_layers * layer


def _qwen25(name: str, hidden: int, layers: int, heads: int, kv: int, inter: int) -> ModelShape:
    return ModelShape(
        name, hidden, layers, heads, kv, inter, vocab_size=152064, tie_embeddings=False,
        attention_bias=True, context_length=32768,
    )  # fmt: skip


KNOWN_MODELS: Mapping[str, ModelShape] = {
    shape.name.lower(): shape
    for shape in (
        _qwen25("Qwen/Qwen2.5-Coder-7B-Instruct", 3584, 28, 28, 4, 18944),
        _qwen25("Qwen/Qwen2.5-Coder-14B-Instruct", 5120, 48, 40, 8, 13824),
    )
}
"""The public architecture numbers of the GPU presets' models (their config.json on the
hub), used when the model's own config.json is not on this machine."""


def shape_from_config(config: Mapping[str, Any], name: str, source: str) -> ModelShape:
    """A `ModelShape` from a Hugging Face ``config.json`` (its ``text_config`` when nested)."""
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config

    def need(key: str) -> int:
        if not isinstance(text.get(key), int):
            raise UnknownArchitectureError(
                f"{source}: no integer {key!r}, so the memory plan cannot size {name}"
            )
        return int(text[key])

    heads = need("num_attention_heads")
    bias = text.get("attention_bias", text.get("model_type") == "qwen2")
    context = text.get("max_position_embeddings")
    return ModelShape(
        name=name,
        hidden_size=need("hidden_size"),
        num_layers=need("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=int(text.get("num_key_value_heads") or heads),
        intermediate_size=need("intermediate_size"),
        vocab_size=need("vocab_size"),
        # transformers' default is tied; a config that does not say is counted untied
        # (the larger model) unless the top level says so
        tie_embeddings=bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings"))),
        attention_bias=bool(bias),
        head_dim=int(text["head_dim"]) if isinstance(text.get("head_dim"), int) else None,
        context_length=int(context) if isinstance(context, int) else None,
        source=source,
    )


def _cached_hub_config(repo_id: str) -> Path | None:
    """``config.json`` of hub model `repo_id` when huggingface_hub's cache has it (never
    downloads)."""
    try:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.errors import HFValidationError
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir())
    except HFValidationError:
        return None
    return Path(found) if isinstance(found, str) else None


def model_shape(spec: str) -> ModelShape:
    """The architecture of model `spec`: read from its config.json when it is on this machine
    (``embedded``, ``tiny-random``, a local directory, a hub id in huggingface_hub's cache),
    else from `KNOWN_MODELS`. Planning never downloads."""
    text = spec.strip()
    local = Path(text).expanduser()
    if is_hub_id(text) and not local.exists():
        cached = _cached_hub_config(text)
        if cached is not None:
            data = json.loads(cached.read_text(encoding="utf-8"))
            return shape_from_config(data, text, f"config.json in the hub cache ({cached})")
        known = KNOWN_MODELS.get(text.lower())
        if known is not None:
            return known
        known_names = ", ".join(s.name for s in KNOWN_MODELS.values())
        raise UnknownArchitectureError(
            f"cannot plan the memory of {text}: its config.json is not in the hub cache and it "
            f"is none of the built-in architectures ({known_names})"
        )
    from birdrl.training.models import resolve_training_model

    path = Path(resolve_training_model(text)) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnknownArchitectureError(f"cannot read {path}: {exc}") from exc
    return shape_from_config(data, text, f"config.json at {path}")
