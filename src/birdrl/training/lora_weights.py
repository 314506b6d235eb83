"""A LoRA model's merged weights for an inference engine, computed beside the trained model
instead of in it.

TRL pushes a PEFT model to vLLM by merging the adapters into the base weights, reading
them, then unmerging. In bf16 that round trip does not give the base weights back
(``W + d - d`` rounds twice), and with sleep mode it runs before every generate call: up
to once per tool turn in stage 4, about a thousand times in a run. The drift reaches the
trainer, the KL reference (the adapters switched off) and every saved model.
`merged_weights` instead yields, layer by layer, a new tensor ``W + d`` for each adapted
weight (the same arithmetic as PEFT's merge, so the engine gets the weights a merge would
give it) and the untouched base tensor for every other one; the model is only read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from birdrl.errors import BirdrlError

__all__ = ["LoraSyncError", "merged_weights"]


class LoraSyncError(BirdrlError, RuntimeError):
    """An adapter this sync cannot merge outside the model (a LoRA variant, a LoRA bias)."""


def _adapted(model: Any) -> dict[str, tuple[Any, list[str]]]:
    """Parameter name of each adapted base weight -> its LoRA layer and active adapters."""
    from peft.tuners.lora import LoraLayer

    adapted: dict[str, tuple[Any, list[str]]] = {}
    for module_name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or module.disable_adapters:
            continue
        if module.merged:
            raise LoraSyncError(
                f"{module_name}: the adapters are merged into the base weights already; "
                "the sync reads an unmerged model"
            )
        adapters = []
        for adapter in module.active_adapters:
            if adapter not in module.lora_A and adapter not in module.lora_embedding_A:
                continue
            if adapter in getattr(module, "lora_variant", {}) or module.lora_bias.get(adapter):
                raise LoraSyncError(
                    f"{module_name}: adapter {adapter!r} is a LoRA variant (DoRA, ...) or has a "
                    "LoRA bias, which this sync cannot merge outside the model"
                )
            adapters.append(adapter)
        if adapters:
            adapted[f"{module_name}.base_layer.weight"] = (module, adapters)
    return adapted


def merged_weights(model: Any, rename: Callable[[str], str]) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` for every weight of the PEFT `model` as a merge would leave it,
    under the base model's parameter names passed through `rename` (the engine's names);
    adapter parameters and the originals of ``modules_to_save`` are left out. Tensors of
    adapted weights are new; the model's parameters are never written."""
    import torch

    adapted = _adapted(model)
    prefix = getattr(model, "prefix", "lora_")
    for name, param in model.named_parameters():
        if prefix in name or "original_module" in name:
            continue
        weight = param.data
        if name in adapted:  # one layer's copy at a time, as PEFT's merge adds it
            layer, adapters = adapted[name]
            with torch.no_grad():  # (not around the yield: the caller keeps its grad mode)
                weight = weight.clone()
                for adapter in adapters:
                    weight += layer.get_delta_weight(adapter)
        base = name.removeprefix("base_model.model.").replace(".base_layer", "")
        yield rename(base.replace("modules_to_save.default.", "")), weight
