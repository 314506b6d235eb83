"""Rollouts from another precision than the trainer's: on every vLLM path TRL corrects with
the configured ``vllm_importance_sampling`` mode (token-level and truncated by default; the
sequence-level default of TRL drops nearly every long episode, docs/training.md); the
transformers path, whose bf16-autocast ``generate`` TRL does not correct, logs how far its
rollouts are from the float32 trainer; and the RL stages train with dropout off, LoRA's
included, so the old-policy, reference and loss passes of a completion see one network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="GRPO needs the `train` extra (trl)")
pytest.importorskip("peft", reason="LoRA needs the `train` extra (peft)")

from toy_grpo import toy_rows, toy_tasks  # noqa: E402

from birdrl.agents import hardware  # noqa: E402
from birdrl.agents.hardware import Bf16Capability  # noqa: E402
from birdrl.training import generation as generation_module  # noqa: E402
from birdrl.training.config import (  # noqa: E402
    GRPOStageConfig,
    apply_overrides,
    load_preset,
)
from birdrl.training.generation import RunGeneration, plan_generation  # noqa: E402

NATIVE = Bf16Capability("cpu", True, "test CPU with native bf16")


@pytest.mark.parametrize(
    ("world", "mode", "rollouts"),
    [(1, "colocate", "vllm"), (2, "colocate", "trl-colocate"), (1, "server", "trl-server")],
)
@pytest.mark.parametrize("setting", [None, "sequence_mask"], ids=["default", "set"])
def test_the_mode_reaches_grpo_config(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    world: int,
    mode: str,
    rollouts: str,
    setting: str | None,
) -> None:
    from birdrl.training.grpo import _grpo_args

    monkeypatch.setattr(generation_module, "vllm_installed", lambda: True)
    overrides = ["generation_engine=vllm", f"vllm_mode={mode}", "dtype=float32"]
    if setting is not None:
        overrides.append(f'vllm_importance_sampling="{setting}"')
    config = apply_overrides(load_preset("smoke"), overrides)
    plan = plan_generation(config, world, NATIVE)  # bf16 rollouts, float32 trainer
    assert plan.rollouts == rollouts
    generation = RunGeneration(config, plan)
    args = _grpo_args(config, config.stage4, tmp_path, True, generation)
    assert args.use_vllm and args.vllm_importance_sampling_correction
    assert args.vllm_importance_sampling_mode == (setting or "token_truncate")
    assert generation.describe("rollouts")["importance_sampling"] == (setting or "token_truncate")


@pytest.fixture(scope="module")
def hf_bf16_stage(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One GRPO step with LoRA on transformers' ``generate`` under bf16 autocast (the
    capability faked as native) for a float32 trainer; the built trainer's dropout modules
    are read in the stage's trainer hook."""
    from birdrl.evaluation.evaluator import EvalConfig
    from birdrl.training.common import StageJob
    from birdrl.training.grpo import SingleTurnRollouts, run_grpo_stage
    from birdrl.training.models import resolve_training_model

    root = tmp_path_factory.mktemp("is")
    db, tasks = toy_tasks(root)
    rows = toy_rows(tasks)
    patch = pytest.MonkeyPatch()
    patch.setattr(hardware, "detect_bf16", lambda device="auto": NATIVE)
    config = apply_overrides(
        load_preset("smoke"),
        [
            "generation_engine=hf",
            "dtype=float32",
            "bf16_training=false",
            "lora.enabled=true",
            "save_steps=1000",
        ],
    )
    generation = RunGeneration(config, plan_generation(config, 1, NATIVE))
    stage = GRPOStageConfig(
        max_steps=1, learning_rate=1e-3, batch_size=4, grad_accum=1, num_generations=2,
        max_completion_length=16, temperature=1.0, beta=0.0,
    )  # fmt: skip
    seen: dict[str, Any] = {}

    def hook(trainer: Any) -> None:
        import torch

        seen["dropout"] = {
            name: module.p
            for name, module in trainer.model.named_modules()
            if isinstance(module, torch.nn.Dropout)
        }

    try:
        output = run_grpo_stage(
            StageJob(
                3, resolve_training_model("tiny-random"), rows, root / "stage3", config, stage,
                None, hook, generation,
            ),
            SingleTurnRollouts(tasks=tasks, databases={"toy": db}, eval_config=EvalConfig(workers=1)),
        )  # fmt: skip
    finally:
        patch.undo()
    return {"output": output, "seen": seen, "generation": generation}


def test_dropout_is_off_in_a_grpo_trainer(hf_bf16_stage: dict[str, Any]) -> None:
    dropout = hf_bf16_stage["seen"]["dropout"]
    assert any("lora_dropout" in name for name in dropout), "no LoRA dropout module found"
    assert {name: p for name, p in dropout.items() if p != 0} == {}


def test_bf16_autocast_rollouts_are_measured(hf_bf16_stage: dict[str, Any]) -> None:
    """The transformers path is not corrected (TRL corrects vLLM rollouts only), so how far
    its bf16-autocast rollouts are from the float32 trainer is logged and noted."""
    from birdrl.training.generation import ROLLOUT_PRECISION_METRICS

    output, generation = hf_bf16_stage["output"], hf_bf16_stage["generation"]
    assert generation.describe("rollouts")["importance_sampling"] == "measured"
    (step,) = [e for e in output.log_history if "reward" in e]
    difference, tokens, sequences = (step[key] for key in ROLLOUT_PRECISION_METRICS)
    assert 0 < difference < 1  # bf16 differs, but not wildly
    assert 0 <= tokens <= 1 and 0 <= sequences <= 1
    assert "importance-sampling correction: measured" in output.notes
    assert any(n.startswith("bf16-autocast rollouts vs the float32 trainer") for n in output.notes)
