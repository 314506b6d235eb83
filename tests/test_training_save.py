"""Saving a trained stage where the weights are sharded: a two-process CPU run under
accelerate's FSDP2 (gloo) trains the tiny model through birdrl's SFT stage and saves a model
directory that reloads with ``from_pretrained`` and equals the trained weights, gathered
independently at the end of training (``DTensor.full_tensor`` on every rank).

accelerate selects FSDP only for GPU-like devices (``AcceleratorState`` enables its FSDP
plugin inside the MULTI_GPU / MULTI_XPU / ... branch; a CPU run is MULTI_CPU and
``ACCELERATE_USE_FSDP`` is ignored there). FSDP2 itself (``fully_shard``) runs on CPU over
gloo, so the worker below reports the run as MULTI_GPU to accelerate and keeps the CPU
device; everything after that (sharding, the optimizer step, the gather) is the code a GPU
run executes.

Run as a script, this file is one rank of that run (``accelerate launch --config_file
fsdp.yaml --num_processes 2 THIS WORK``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WORKER_TIMEOUT_S = 240
"""A rank left alone in a collective waits for gloo's timeout (hours): fail well before it,
and before pytest-timeout (300 s) kills the test without stopping the launcher."""


def _force_fsdp_on_cpu() -> None:
    """Make accelerate take its FSDP path on CPU (see the module docstring)."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    original = PartialState.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.MULTI_GPU

    PartialState.__init__ = init  # type: ignore[method-assign]


def _gather_at_train_end(path: Path) -> Any:
    """A callback that gathers every trained parameter (all ranks take part) and writes
    them on rank 0: the reference the saved model must equal."""
    import torch
    from transformers import TrainerCallback

    class Gather(TrainerCallback):
        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
            full = {}
            for name, param in model.named_parameters():
                tensor = param.full_tensor() if hasattr(param, "full_tensor") else param
                full[name] = tensor.detach().to("cpu", torch.float32).clone()
            if int(os.environ.get("RANK", "0")) == 0:
                torch.save(full, path)

    return Gather()


def _train(work: Path, mode: str) -> None:
    """SFT the tiny model for two steps in `mode` and save it through finish_stage; rank 0
    records what the trainer saw (FSDP on, parameters sharded, their dtypes)."""
    from toy_sft import count_rows_samples
    from transformers import TrainerCallback

    from birdrl.training.common import StageJob
    from birdrl.training.config import SFTStageConfig, apply_overrides, load_preset
    from birdrl.training.sft import run_sft_stage

    out = work / mode
    seen: dict[str, Any] = {}

    class Check(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            params = list(kw["model"].parameters())
            seen["sharded"] = all(hasattr(p, "full_tensor") for p in params)
            seen["dtypes"] = sorted({str(p.dtype) for p in params if p.requires_grad})

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            seen["checkpoint"] = sorted(
                p.name for p in Path(args.output_dir, f"checkpoint-{state.global_step}").iterdir()
            )

    def hook(trainer: Any) -> None:
        seen["fsdp"] = trainer.is_fsdp_enabled
        seen["loaded"] = sorted({str(p.dtype) for p in trainer.model.parameters()})
        trainer.add_callback(Check())
        trainer.add_callback(_gather_at_train_end(out / "trained.pt"))

    config = apply_overrides(load_preset("smoke"), ["seed=0", "save_steps=1", *MODES[mode]])
    output = run_sft_stage(
        StageJob(
            stage=1,
            model_path=work / "tiny",
            rows=count_rows_samples(8, "You fix SQL."),
            out_dir=out,
            config=config,
            stage_config=SFTStageConfig(
                max_steps=2, learning_rate=1e-2, batch_size=2, grad_accum=1, max_length=128
            ),
            on_trainer=hook,
        )
    )
    if int(os.environ.get("RANK", "0")) == 0:
        seen["model_dir"] = str(output.model_dir)
        (out / "seen.json").write_text(json.dumps(seen), encoding="utf-8")


def _worker(work: Path) -> None:
    """One rank of the launch: both modes in turn."""
    _force_fsdp_on_cpu()
    for mode in MODES:
        _train(work, mode)


MODES = {
    "full": ["dtype=bfloat16", "lora.enabled=false"],
    "lora": ["dtype=float32", "lora.enabled=true", "lora.r=4", "lora.alpha=8", "lora.dropout=0.0"],
}
"""Full fine-tuning of bf16 weights, LoRA (alpha / r = 2) over float32 weights."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both modes, trained and saved by two processes launched with the shipped fsdp.yaml."""
    pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
    from birdrl.training.distributed import accelerate_configs
    from birdrl.training.tiny import build_tiny_model

    work = tmp_path_factory.mktemp("fsdp")
    build_tiny_model(work / "tiny")
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    cmd += ["--config_file", str(accelerate_configs() / "fsdp.yaml"), "--num_processes", "2"]
    cmd += ["--main_process_port", str(_free_port()), __file__, str(work)]
    tests = str(Path(__file__).parent)
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    proc = subprocess.Popen(
        cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        log, _ = proc.communicate(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the launcher stops its ranks on SIGTERM
        log, _ = proc.communicate(timeout=60)
        pytest.fail(f"the two-process FSDP2 run hung (> {WORKER_TIMEOUT_S} s):\n{log[-3000:]}")
    assert proc.returncode == 0, log[-6000:]
    return work


def _saved(path: Path) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    return {k: v.detach() for k, v in model.named_parameters()}


def test_full_finetuning_saves_the_gathered_weights(fsdp_run: Path) -> None:
    """The policy loads in bf16 (FSDP keeps the float32 masters: accelerate upcasts the
    trainable weights), the saved model equals the trained float32 weights, and training
    moved every one of them from its bf16 start."""
    import torch

    out = fsdp_run / "full"
    seen = json.loads((out / "seen.json").read_text(encoding="utf-8"))
    assert seen["loaded"] == ["torch.bfloat16"]
    assert seen["fsdp"] and seen["sharded"] and seen["dtypes"] == ["torch.float32"]
    assert "pytorch_model_fsdp_0" in seen["checkpoint"]  # fsdp.yaml: each rank its own shard
    trained = torch.load(out / "trained.pt")
    saved = _saved(Path(seen["model_dir"]))
    start = _saved(fsdp_run / "tiny")
    assert sorted(saved) == sorted(trained)
    for name, weight in saved.items():
        assert weight.dtype == torch.float32
        assert torch.equal(weight, trained[name]), name
        assert not torch.equal(weight, start[name].to(torch.bfloat16).float()), name


def _check_lora_merged(work: Path) -> None:
    """The saved model of `work`'s LoRA run is W + 2·B·A of the trained adapters, computed
    here from the parameters gathered at the end of training; the layers without adapters
    are the starting weights."""
    import torch

    out = work / "lora"
    seen = json.loads((out / "seen.json").read_text(encoding="utf-8"))
    trained = torch.load(out / "trained.pt")
    want: dict[str, Any] = {}
    for key, value in trained.items():
        if ".lora_" in key:
            continue
        layer = key.split(".base_layer.")[0]
        if f"{layer}.lora_A.default.weight" in trained and key.endswith(".base_layer.weight"):
            a = trained[f"{layer}.lora_A.default.weight"]
            b = trained[f"{layer}.lora_B.default.weight"]
            value = value + (b @ a) * 2.0
        want[key.removeprefix("base_model.model.").replace(".base_layer", "")] = value
    saved = _saved(Path(seen["model_dir"]))
    start = _saved(work / "tiny")
    assert sorted(saved) == sorted(want)
    merged = [name for name in saved if not torch.equal(saved[name], start[name])]
    assert len(merged) == 14  # q, k, v, o, gate, up, down of both layers
    for name, weight in saved.items():
        torch.testing.assert_close(weight, want[name], rtol=1e-5, atol=1e-6)


def test_lora_saves_the_gathered_adapter_merged(fsdp_run: Path) -> None:
    """Sharded LoRA: the main process merges the gathered adapter on the CPU."""
    seen = json.loads((fsdp_run / "lora" / "seen.json").read_text(encoding="utf-8"))
    assert seen["fsdp"] and seen["sharded"]
    _check_lora_merged(fsdp_run)


def test_one_process_merges_lora_in_memory(tmp_path: Path) -> None:
    """Whole weights (one process): the adapters are merged in memory, the same result."""
    pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
    from birdrl.training.tiny import build_tiny_model

    build_tiny_model(tmp_path / "tiny")
    _train(tmp_path, "lora")
    _check_lora_merged(tmp_path)


def test_shipped_launch_configs_name_only_options_accelerate_knows() -> None:
    """accelerate ignores a misspelled key of a launcher config without a word; ZeRO-3 must
    gather a 16-bit model for a stage to be saved; FSDP is version 2 with a state-dict type
    of FSDP2 (the final model is gathered whole whichever it is)."""
    pytest.importorskip("accelerate", reason="training needs the `train` extra (accelerate)")
    import yaml
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils.constants import FSDP2_STATE_DICT_TYPE

    from birdrl.training.distributed import accelerate_configs

    options = {action.dest for action in launch_command_parser()._actions}
    configs = {p.name: yaml.safe_load(p.read_text()) for p in accelerate_configs().glob("*.yaml")}
    for name, data in configs.items():
        for section in ("deepspeed_config", "fsdp_config"):
            unknown = set(data.get(section) or {}) - options
            assert not unknown, f"{name}: {section} keys accelerate launch does not know"
    assert configs["zero3.yaml"]["deepspeed_config"]["zero3_save_16bit_model"] is True
    fsdp = configs["fsdp.yaml"]["fsdp_config"]
    assert fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_state_dict_type"] in FSDP2_STATE_DICT_TYPE


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
