"""Full fine-tuning keeps float32 master weights: with ``dtype = "bfloat16"`` and LoRA off,
a launch without DeepSpeed or FSDP (which keep float32 masters themselves) loads the policy
in float32 and trains under bf16 autocast, so an lr-1e-6 step moves the weights instead of
being rounded away by bf16 (whose spacing near |w| is |w|/128)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="training tests need the `train` extra (trl)")

import torch  # noqa: E402
from toy_sft import count_rows_samples  # noqa: E402

from birdrl.agents.hardware import Bf16Capability  # noqa: E402
from birdrl.training.common import StageJob, common_args  # noqa: E402
from birdrl.training.config import SFTStageConfig, apply_overrides, load_preset  # noqa: E402
from birdrl.training.models import (  # noqa: E402
    master_weights_source,
    policy_precision,
    training_precision,
)
from birdrl.training.tiny import build_tiny_model  # noqa: E402

EMULATED = Bf16Capability("cpu", False, "CPU AVX2 (AVX512-BF16 no, AMX no)")
DEEPSPEED = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_MIXED_PRECISION": "bf16"}
FSDP = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "ACCELERATE_MIXED_PRECISION": "bf16"}


def _config(*overrides: str) -> Any:
    return apply_overrides(load_preset("smoke"), ["seed=0", "save_steps=1000", *overrides])


@pytest.mark.parametrize(
    ("dtype", "full", "environ", "weights", "described"),
    [
        ("bfloat16", True, {}, "float32", "float32 + bf16 autocast"),  # the fix
        ("bfloat16", True, DEEPSPEED, "bfloat16", "bfloat16"),  # ZeRO keeps fp32 masters
        ("bfloat16", True, FSDP, "bfloat16", "bfloat16"),  # accelerate's FSDP upcasts
        ("bfloat16", False, {}, "bfloat16", "bfloat16"),  # LoRA: peft's adapters are fp32
        ("float32", True, {}, "float32", "float32"),
    ],
)
def test_master_weights_where_nothing_else_keeps_them(
    dtype: str, full: bool, environ: dict[str, str], weights: str, described: str
) -> None:
    precision = training_precision(dtype, False, EMULATED, full_finetune=full, environ=environ)
    assert precision.weights == weights
    assert precision.describe() == described
    assert precision.bf16 is (dtype == "bfloat16")  # TRL's bf16: autocast on in every case
    assert (precision.master is not None) is (weights != dtype)
    if precision.master:
        assert "master weights" in precision.reason
    assert (master_weights_source(environ) is None) is (not environ)


def test_the_config_decides_through_lora(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(name, raising=False)
    full = _config("dtype=bfloat16", "lora.enabled=false")
    assert policy_precision(full, EMULATED).weights == "float32"
    assert common_args(full, tmp_path, full.stage2)["bf16"] is True
    lora = _config("dtype=bfloat16", "lora.enabled=true")
    assert policy_precision(lora, EMULATED).weights == "bfloat16"
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert policy_precision(full, EMULATED).weights == "bfloat16"


def _bf16_checkpoint(dest: Path) -> Path:
    """The tiny model saved in bf16, as hub checkpoints are: its weights are exact bf16
    values, so any change after training is the training's, not a rounding at load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = build_tiny_model(dest.parent / "tiny-fp32")
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(source).save_pretrained(dest)
    return dest


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return {k: v.detach() for k, v in model.named_parameters()}


def test_an_lr_1e6_step_moves_bf16_weights_under_full_finetuning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One AdamW step at lr 1e-6 through the SFT stage (a single process: no DeepSpeed, no
    FSDP): the weights train in float32 under bf16 autocast, and the step moves most of
    them. With bf16 weights the same step leaves almost all of them where they were."""
    from birdrl.training.sft import run_sft_stage

    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(name, raising=False)
    start = _bf16_checkpoint(tmp_path / "tiny-bf16")
    seen: dict[str, Any] = {}

    def watch(trainer: Any) -> None:
        seen["weights"] = {p.dtype for p in trainer.model.parameters()}
        layer = trainer.model.model.layers[0].mlp.down_proj
        layer.register_forward_hook(lambda _m, _i, out: seen.update(compute=out.dtype))

    output = run_sft_stage(
        StageJob(
            stage=1,
            model_path=start,
            rows=count_rows_samples(4, "You fix SQL."),
            out_dir=tmp_path / "sft",
            config=_config("dtype=bfloat16", "lora.enabled=false"),
            stage_config=SFTStageConfig(
                max_steps=1, learning_rate=1e-6, batch_size=4, grad_accum=1, max_length=128
            ),
            on_trainer=watch,
        )
    )
    assert seen["weights"] == {torch.float32}
    assert seen["compute"] == torch.bfloat16  # autocast: the products run in bf16
    before, after = _weights(start), _weights(output.model_dir)
    moved = sum(int((after[k] != before[k]).sum()) for k in before)
    total = sum(v.numel() for v in before.values())
    changed = [k for k in before if not torch.equal(after[k], before[k])]
    assert len(changed) == len(before)  # every tensor moved
    assert moved / total > 0.5, f"only {moved} of {total} weights moved"
