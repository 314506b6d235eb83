"""LoRA weights reach the inference engine without a merge/unmerge on the trained model: on a
small bf16 Llama with trained (non-zero) adapters, the run's sync yields what PEFT's merge
gives, bit for bit, and after 100 syncs every parameter of the trained model is bit-identical;
TRL's in-place merge/unmerge, which the sync replaced, drifts the base weights within a few
round trips. (The engine's outputs against the adapted model: tests/test_vllm.py.)"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="training needs the `train` extra")
pytest.importorskip("peft", reason="LoRA needs the `train` extra (peft)")
pytest.importorskip("trl", reason="the sync subclasses TRL's VLLMGeneration (`train` extra)")

SYNCS = 100


def _lora_model() -> Any:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    with torch.no_grad():  # a trained adapter: B is zero only at initialisation
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)
    return peft


def _snapshot(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _changed(model: Any, before: dict[str, Any]) -> list[str]:
    return [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]


def _run_sync(model: Any, engines: str) -> Any:
    """The run's weight walk over `model` as TRL calls it in a single process (nothing to
    gather): the run's shared engine's (`shared`) or TRL's engine per rank (`per-rank`)."""
    from trl.generation.vllm_generation import VLLMGeneration

    from birdrl.training.generation import _lora_merged_beside, _shared_generation_class

    if engines == "shared":
        cls = _shared_generation_class(VLLMGeneration, engine=None)
    else:
        cls = _lora_merged_beside(VLLMGeneration)
    sync = object.__new__(cls)
    sync.model = model
    sync._dist = SimpleNamespace(  # one process: TRL's gather is a no-op
        gather_params=lambda params: contextlib.nullcontext(), is_fsdp=False
    )
    return sync


@pytest.mark.parametrize("engines", ["shared", "per-rank"])
def test_the_sync_gives_the_merged_weights_without_touching_the_model(engines: str) -> None:
    model = _lora_model()
    before = _snapshot(model)
    sync = _run_sync(model, engines)
    ours = {name: weight.clone() for name, weight in sync._iter_named_params()}
    for _ in range(SYNCS - 1):
        for _name, _weight in sync._iter_named_params():
            pass
    assert _changed(model, before) == [], "a sync wrote into the trained model"

    model.merge_adapter()  # what TRL's sync gave the engine
    merged = {
        n.removeprefix("base_model.model.").replace(".base_layer", ""): p.detach().clone()
        for n, p in model.named_parameters()
        if "lora_" not in n
    }
    assert set(ours) == set(merged)
    assert "model.layers.0.self_attn.q_proj.weight" in ours  # vLLM's names, no PEFT prefix
    differ = [n for n in merged if not torch.equal(ours[n], merged[n])]
    assert differ == [], f"not what PEFT's merge gives: {differ[:3]}"
    base = "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    assert not torch.equal(ours["model.layers.0.self_attn.q_proj.weight"], before[base])  # adapted


def test_an_in_place_merge_and_unmerge_drifts_the_bf16_base_weights() -> None:
    """Why the sync merges beside the model: the round trip TRL runs at every sync does not
    give bf16 weights back."""
    model = _lora_model()
    before = _snapshot(model)
    for _ in range(5):
        model.merge_adapter()
        model.unmerge_adapter()
    drifted = _changed(model, before)
    assert drifted and all("base_layer" in n for n in drifted), drifted


def test_a_lora_variant_is_refused_with_its_layer() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from birdrl.training.lora_weights import LoraSyncError, merged_weights

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2,
    )  # fmt: skip
    dora = get_peft_model(
        LlamaForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj"], use_dora=True)
    )
    with pytest.raises(LoraSyncError, match=r"q_proj: adapter 'default' is a LoRA variant"):
        list(merged_weights(dora, str))
