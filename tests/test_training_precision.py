"""``bf16_training``: the trainer's matrix products run under bf16 autocast only when the
setting (or, with ``auto``, the hardware) says so, and the weights stay float32."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="training tests need the `train` extra (trl)")

import torch  # noqa: E402
from toy_sft import count_rows_samples  # noqa: E402

from birdrl.training.common import StageJob, common_args  # noqa: E402
from birdrl.training.config import SFTStageConfig, apply_overrides, load_preset  # noqa: E402
from birdrl.training.tiny import build_tiny_model  # noqa: E402


def _config(setting: str) -> Any:
    return apply_overrides(
        load_preset("smoke"), ["seed=0", "save_steps=1000", "dtype=float32", setting]
    )


@pytest.mark.parametrize(("setting", "bf16"), [("true", True), ("false", False)])
def test_trainer_arguments_follow_the_setting(tmp_path: Path, setting: str, bf16: bool) -> None:
    config = _config(f"bf16_training={setting}")
    assert common_args(config, tmp_path, config.stage2)["bf16"] is bf16


@pytest.mark.parametrize(("setting", "want"), [("true", torch.bfloat16), ("false", torch.float32)])
def test_an_sft_step_computes_in_the_chosen_precision(
    tmp_path: Path, setting: str, want: torch.dtype
) -> None:
    """One SFT step of the tiny model: a projection's output dtype inside the training
    forward pass is bf16 exactly when ``bf16_training`` is on; the saved weights are
    float32 either way."""
    from birdrl.training.sft import run_sft_stage

    seen: list[torch.dtype] = []

    def watch(trainer: Any) -> None:
        layer = trainer.model.model.layers[0].mlp.down_proj
        layer.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))

    rows = count_rows_samples(2, "You fix SQL.")
    output = run_sft_stage(
        StageJob(
            stage=2,
            model_path=build_tiny_model(tmp_path / "tiny"),
            rows=rows,
            out_dir=tmp_path / "sft",
            config=_config(f"bf16_training={setting}"),
            stage_config=SFTStageConfig(
                max_steps=1, learning_rate=1e-3, batch_size=2, grad_accum=1, max_length=128
            ),
            on_trainer=watch,
        )
    )
    assert seen and set(seen) == {want}
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(output.model_dir)
    assert {p.dtype for p in saved.parameters()} == {torch.float32}
    assert output.log_history[0]["loss"] > 0
