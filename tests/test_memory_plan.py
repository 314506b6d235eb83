"""The memory plan: parameter counts from the architecture, the precision and sharding
arithmetic, every shipped GPU preset fitting the hardware it names, and a run that cannot
fit refused with the numbers before anything is loaded (no GPU needed: the hardware is
given or faked)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.training import memory
from birdrl.training.architecture import KNOWN_MODELS, UnknownArchitectureError, model_shape
from birdrl.training.config import HardwareSettings, apply_overrides, list_presets, load_preset
from birdrl.training.memory import (
    GIB,
    InsufficientMemoryError,
    check_memory,
    plan_memory,
    sharding_from_env,
)

ROOT = Path(__file__).resolve().parent.parent
Q7 = KNOWN_MODELS["qwen/qwen2.5-coder-7b-instruct"]
Q14 = KNOWN_MODELS["qwen/qwen2.5-coder-14b-instruct"]
ONE_GPU = HardwareSettings(gpus=1, gpu_memory_gib=79.0, sharding="ddp")
EIGHT_ZERO3 = HardwareSettings(gpus=8, gpu_memory_gib=79.0, sharding="zero3")
GPU_PRESETS = [name for name in list_presets() if load_preset(name).hardware.gpus > 0]
QWEN7_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
}


def test_parameter_counts_follow_from_the_architecture() -> None:
    # the published sizes: 7.61B and 14.7B; LoRA r=64 on every linear layer
    assert Q7.params == pytest.approx(7.6156e9, rel=1e-3)
    assert Q14.params == pytest.approx(14.770e9, rel=1e-3)
    assert Q7.lora_params(64, "all-linear") == pytest.approx(161.5e6, rel=1e-3)
    assert Q14.lora_params(64, ["q_proj", "v_proj"]) < Q14.lora_params(64, "all-linear")
    with pytest.raises(UnknownArchitectureError, match="lm_head"):
        Q7.lora_params(64, ["lm_head"])


def test_a_local_config_json_is_read(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN7_CONFIG), encoding="utf-8")
    shape = model_shape(str(tmp_path))
    assert shape.params == Q7.params  # the same numbers as the built-in table's
    assert str(tmp_path / "config.json") in shape.source


def test_a_hub_id_reads_the_hub_cache_and_never_downloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # laid out as huggingface_hub lays out its cache
    repo = tmp_path / "models--acme--coder-7b"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    small = {**QWEN7_CONFIG, "num_hidden_layers": 2}
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps(small), encoding="utf-8")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shape = model_shape("acme/coder-7b")
    assert shape.num_layers == 2 and "hub cache" in shape.source
    # not cached and not in the table: no guess
    with pytest.raises(UnknownArchitectureError, match="acme/other"):
        model_shape("acme/other")
    config = apply_overrides(load_preset("qwen2.5-coder-14b"), ['model="acme/other"'])
    warnings: list[str] = []
    assert check_memory(config, hardware=ONE_GPU, warn=warnings.append) is None
    assert warnings and "not planned" in warnings[0]


def test_precision_and_sharding_arithmetic() -> None:
    p = Q7.params
    full = apply_overrides(load_preset("qwen2.5-coder-7b"), [])
    ddp = plan_memory(full, ONE_GPU).stages[0]
    # fp32 master weights without ZeRO/FSDP: 4 + 4 + 8 B/param on the GPU
    assert ddp.weights + ddp.gradients + ddp.optimizer == pytest.approx(16 * p / GIB)
    zero3 = plan_memory(full, EIGHT_ZERO3).stages[3]
    # bf16 weights and gradients, fp32 master + two moments, all sharded 8 ways
    assert zero3.gradients == pytest.approx(2 * p / 8 / GIB)
    assert zero3.optimizer == pytest.approx(12 * p / 8 / GIB)
    assert zero3.weights > 2 * p / 8 / GIB  # plus the layers gathered at a time
    assert zero3.reference == pytest.approx(2 * p / 8 / GIB)  # beta > 0: a sharded copy
    zero2 = plan_memory(full, replace(EIGHT_ZERO3, sharding="zero2")).stages[3]
    assert zero2.weights == pytest.approx(2 * p / GIB)  # ZeRO-2 keeps whole weights
    lora = plan_memory(load_preset("qwen2.5-coder-7b-lora"), ONE_GPU).stages[3]
    adapter = Q7.lora_params(64, "all-linear")
    assert lora.weights == pytest.approx((2 * p + 4 * adapter) / GIB)
    assert lora.optimizer == pytest.approx(8 * adapter / GIB)
    assert lora.reference == 0  # the adapter is disabled instead


def test_activations_and_the_engine_follow_the_settings() -> None:
    config = load_preset("qwen2.5-coder-14b")
    plan = plan_memory(config, ONE_GPU)
    stage4 = plan.stages[3]
    off = plan_memory(replace(config, gradient_checkpointing=False), ONE_GPU).stages[3]
    assert off.activations > 5 * stage4.activations
    # vLLM takes utilization x memory when awake: its bf16 weights and the KV cache
    share = config.vllm_gpu_memory_utilization * 79.0
    assert stage4.vllm_weights == pytest.approx(2 * Q14.params / GIB)
    assert stage4.vllm_weights + stage4.vllm_kv + memory.VLLM_RUNTIME_GIB == pytest.approx(share)
    assert stage4.vllm_training == 0  # asleep while the stage trains
    awake = plan_memory(replace(config, vllm_sleep_mode=False), ONE_GPU).stages[3]
    assert awake.training == pytest.approx(stage4.training + share)
    halves = plan_memory(replace(config, vllm_tensor_parallel_size=2), EIGHT_ZERO3).stages[3]
    assert halves.vllm_weights == pytest.approx(stage4.vllm_weights / 2)
    assert "ESTIMATE" in " ".join(plan.assumptions)


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_every_shipped_gpu_preset_fits_the_hardware_it_names(name: str) -> None:
    config = load_preset(name)
    hardware = config.hardware
    plan = plan_memory(config)
    assert len(plan.stages) == 4
    assert plan.fits, plan.refusal()
    assert check_memory(config, hardware=hardware) is not None
    # the header comment names the same hardware
    path = ROOT / "src" / "birdrl" / "training" / "presets" / f"{name}.toml"
    header = " ".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    header = re.sub(r"[#\s]+", " ", header)
    gpus = "one GPU" if hardware.gpus == 1 else f"{hardware.gpus} GPUs"
    assert f"Made for {gpus} of 80 GB" in header
    if hardware.sharding != "ddp":
        assert {"zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp": "FSDP"}[hardware.sharding] in header


def test_the_gpu_presets_are_planned() -> None:
    assert {
        "qwen2.5-coder-7b",
        "qwen2.5-coder-7b-lora",
        "qwen2.5-coder-14b",
        "qwen2.5-coder-14b-full",
    } <= set(GPU_PRESETS)


def test_a_run_that_cannot_fit_is_refused_with_the_numbers() -> None:
    # 14B LoRA at the old 0.3 share: vLLM's 23.7 GiB cannot hold 27.5 GiB of weights
    config = apply_overrides(load_preset("qwen2.5-coder-14b"), ["vllm_gpu_memory_utilization=0.3"])
    with pytest.raises(InsufficientMemoryError) as info:
        check_memory(config, hardware=ONE_GPU)
    message = str(info.value)
    assert "vLLM cannot start" in message and "23.7 GiB" in message and "(27.5 GiB" in message
    # 7B full fine-tuning on one GPU: 16 B/param is 113 GiB before anything else
    with pytest.raises(InsufficientMemoryError) as info:
        check_memory(load_preset("qwen2.5-coder-7b"), hardware=ONE_GPU)
    message = str(info.value)
    assert "stage 1 (reasoning SFT)" in message and "training step needs" in message
    assert "weights 28.4, gradients 28.4, optimizer 56.7" in message
    # only the stages that run are checked
    assert check_memory(config, stages=(), hardware=ONE_GPU) is not None


def test_the_run_is_refused_before_it_loads_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from birdrl.training.curriculum import run_curriculum

    # a GPU run as `detect_hardware` would see it (one 79 GiB GPU, no launcher)
    monkeypatch.setattr(memory, "detect_hardware", lambda environ=None: ONE_GPU)
    with pytest.raises(InsufficientMemoryError, match="does not fit 1 GPU"):
        run_curriculum(load_preset("qwen2.5-coder-7b"), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # not even the run directory


def test_a_cpu_run_is_not_planned() -> None:
    config = load_preset("tiny")
    assert check_memory(config, hardware=config.hardware) is None
    plan = plan_memory(config)
    assert plan.stages == () and "CPU" in plan.assumptions[0]


@pytest.mark.parametrize(
    ("environ", "sharding"),
    [
        ({}, "ddp"),
        ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, "zero3"),
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, "zero2"),  # accelerate's default stage
        ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "1"}, "ddp"),
        ({"ACCELERATE_USE_FSDP": "True"}, "fsdp"),
        ({"ACCELERATE_USE_DEEPSPEED": "false", "ACCELERATE_USE_FSDP": "false"}, "ddp"),
    ],
)
def test_sharding_is_read_from_the_launcher(environ: dict[str, str], sharding: str) -> None:
    assert sharding_from_env(environ) == sharding


def test_the_cli_prints_the_plan() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["curriculum", "--preset", "qwen2.5-coder-14b", "--plan"])
    assert result.exit_code == 0, result.output
    assert "activations (estimate)" in result.output and "stage 4" in result.output
    result = runner.invoke(
        app,
        ["curriculum", "--preset", "qwen2.5-coder-7b", "--plan", "--gpus", "1", "--sharding",
         "ddp", "--gpu-gib", "80", "--plan-format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["hardware"] == {"gpus": 1, "gpu_memory_gib": 80.0, "sharding": "ddp"}
    assert data["fits"] is False and not data["stages"][0]["fits"]
    result = runner.invoke(app, ["curriculum", "--preset", "tiny", "--plan"])
    assert result.exit_code == 0 and "CPU run" in result.output
    result = runner.invoke(app, ["curriculum", "--preset", "tiny", "--plan", "--sharding", "zero4"])
    assert result.exit_code == 1 and "hardware.sharding" in result.output


def _markdown_table(args: list[str]) -> list[str]:
    result = CliRunner().invoke(app, ["curriculum", *args, "--plan", "--plan-format", "markdown"])
    assert result.exit_code == 0, result.output
    return [line.strip() for line in result.output.splitlines() if line.startswith("|")]


@pytest.mark.parametrize(
    "args",
    [
        ["--preset", "qwen2.5-coder-7b-lora"],
        ["--preset", "qwen2.5-coder-14b"],
        ["--preset", "qwen2.5-coder-7b"],
        ["--preset", "qwen2.5-coder-14b-full"],
    ],
)
def test_docs_show_the_tables_the_command_prints(args: list[str]) -> None:
    docs = [line.strip() for line in (ROOT / "docs" / "scaling.md").read_text().splitlines()]
    table = _markdown_table(args)
    starts = [i for i, line in enumerate(docs) if line == table[0]]
    assert any(docs[i : i + len(table)] == table for i in starts), (
        f"docs/scaling.md lacks the table of `birdrl curriculum {' '.join(args)} --plan`; "
        "paste its --plan-format markdown output"
    )
