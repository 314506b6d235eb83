"""Learning-signal diagnostics: the weight-change figure (full and LoRA), the per-step
entries and the no-signal warning of the callback, the per-stage summary, its sentences,
and the report's "Learning signal" section."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="diagnostics need torch")

from birdrl.training.diagnostics import (  # noqa: E402
    GROUPS_KEY,
    WEIGHT_KEY,
    DiagnosticsCallback,
    WeightTracker,
    summarize,
    verdicts,
)
from birdrl.training.environment import EpisodeStats  # noqa: E402
from birdrl.training.report import StageRecord, write_report  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(6, 4)
        self.out = torch.nn.Linear(4, 3)


def test_full_fine_tuning_change_is_relative_to_the_start() -> None:
    net = _Net()
    net.out.weight.requires_grad_(False)  # frozen: not part of θ
    tracker = WeightTracker(net)
    assert tracker.basis == "full" and tracker.change() == 0.0
    trainable = [p for p in net.parameters() if p.requires_grad]
    start = torch.cat([p.detach().flatten() for p in trainable])
    with torch.no_grad():
        net.lin.weight.add_(0.1)
        net.out.weight.add_(5.0)  # frozen weights do not count
    now = torch.cat([p.detach().flatten() for p in trainable])
    assert tracker.change() == pytest.approx(float((now - start).norm() / start.norm()))


def test_replaced_parameters_are_not_measured_as_unchanged() -> None:
    """FSDP2 swaps every parameter for a sharded one when the trainer prepares the model
    (after the tracker was built): the stale copies would read 0.0 and warn "weights
    unchanged"; at train begin the callback marks the measurement skipped instead."""
    net = _Net()
    tracker = WeightTracker(net)
    callback = DiagnosticsCallback(1, "sft", tracker)
    callback.on_train_begin(None, None, None, model=net)  # the same parameters: measured
    assert tracker.change() == 0.0
    with torch.no_grad():
        net.lin.weight = torch.nn.Parameter(net.lin.weight + 1.0)  # as fully_shard does
    callback.on_train_begin(None, None, None, model=net)
    assert tracker.change() is None
    assert "sharded" in (tracker.skipped or "")


def test_lora_change_is_over_the_effective_weights() -> None:
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(
        _Net(), peft.LoraConfig(r=2, lora_alpha=4, target_modules=["lin"], init_lora_weights=True)
    )
    base = model.base_model.model.lin.base_layer.weight.detach().clone()
    tracker = WeightTracker(model)
    assert tracker.basis == "lora-effective" and tracker.change() == 0.0  # B starts at 0
    with torch.no_grad():
        model.base_model.model.lin.lora_B["default"].weight.normal_()
        model.base_model.model.lin.lora_A["default"].weight.mul_(3)
    merged = model.merge_and_unload().lin.weight.detach()
    # ‖W_merged − W₀‖ / ‖W₀‖ over the adapted layer; the other layer is frozen
    expected = float((merged - base).norm() / base.norm())
    assert tracker.change() == pytest.approx(expected, rel=1e-5)


def _state(step: int) -> Any:
    entry: dict[str, Any] = {"step": step}
    return SimpleNamespace(global_step=step, log_history=[entry]), entry


def test_callback_logs_per_step_and_warns_after_n_steps_without_signal() -> None:
    net = _Net()
    stats = EpisodeStats()
    said: list[str] = []
    callback = DiagnosticsCallback(
        4,
        "grpo",
        WeightTracker(net),
        groups_per_step=6,
        episode_stats=stats,
        no_signal_steps=2,
        warn=said.append,
    )
    entries = []
    for step, (zero, episodes, calls, submitted) in enumerate(
        [(0.5, 4, 6, 2), (1.0, 4, 0, 0), (1.0, 4, 0, 0), (1.0, 4, 0, 0)], start=1
    ):
        stats.episodes += episodes
        stats.tool_calls += calls
        stats.with_tool_call += min(calls, episodes)
        stats.submitted += submitted
        state, entry = _state(step)
        logs = {"loss": 0.0, "reward": 0.0, "frac_reward_zero_std": zero}
        entry.update(logs)
        callback.on_log(None, state, None, logs)
        entries.append(entry)
        assert len(said) == (0 if step < 3 else 1), said  # once, when the run reaches 2
    first = entries[0]
    assert first[WEIGHT_KEY] == 0.0 and first[GROUPS_KEY] == 6.0
    assert first["episodes/count"] == 4 and first["episodes/valid_tool_calls_per_episode"] == 1.5
    assert first["episodes/submissions_per_episode"] == 0.5
    assert entries[1]["episodes/valid_tool_calls_per_episode"] == 0.0
    assert said[0].startswith("warning: stage 4 has had no learning signal for 2 consecutive")
    assert "every completion got reward 0" in said[0]
    assert callback.warnings == said

    summary = summarize("grpo", entries)
    assert summary["groups"] == 24 and summary["groups_no_signal"] == 21
    assert summary["steps_no_signal"] == 3 and summary["longest_no_signal_run"] == 3
    assert summary["episodes"] == 16 and summary["valid_tool_calls_per_episode"] == 6 / 16
    assert summary["submissions_per_episode"] == 2 / 16
    assert summary["weight_change"] == 0.0
    assert verdicts("grpo", summary) == [
        "21 of 24 groups had equal rewards (no signal from them).",
        "Weights unchanged.",
    ]


def test_sentences_for_a_stage_that_could_not_learn() -> None:
    log = [
        {
            "step": s,
            "loss": 0.0,
            "reward": 0.0,
            "reward_std": 0.0,
            "frac_reward_zero_std": 1.0,
            "completions/clipped_ratio": 1.0,
            GROUPS_KEY: 8.0,
            WEIGHT_KEY: 0.0,
            "episodes/count": 4.0,
            "episodes/valid_tool_calls_per_episode": 0.0,
            "episodes/submissions_per_episode": 0.0,
        }
        for s in (1, 2, 3)
    ]
    summary = summarize("grpo", log)
    assert verdicts("grpo", summary) == [
        "All 24 groups had equal rewards (0): no gradient; weights unchanged.",
        "100% of completions were truncated at max_completion_length.",
        "None of 12 episodes made a valid tool call.",
        "None of 12 episodes submitted a solution.",
    ]
    sft = summarize("sft", [{"step": 1, "loss": 2.0, WEIGHT_KEY: 0.0}])
    assert verdicts("sft", sft) == ["Weights unchanged: no optimizer step moved them."]
    healthy = summarize("sft", [{"step": 1, "loss": 2.0, WEIGHT_KEY: 1e-3}])
    assert verdicts("sft", healthy) == [] and healthy["weight_change"] == 1e-3
    # nothing logged: no figure, and no sentence invented
    assert verdicts("grpo", summarize("grpo", [{"step": 1, "loss": 0.1}])) == []


def test_record_carries_the_summary_and_the_report_shows_it(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (the train extra)")
    log = [
        {
            "step": s,
            "loss": 0.0,
            "reward": 0.25 * s,
            "reward_std": 0.4,
            "frac_reward_zero_std": 0.25,
            "completions/clipped_ratio": 0.5,
            GROUPS_KEY: 4.0,
            WEIGHT_KEY: 1e-3 * s,
        }
        for s in (1, 2)
    ]
    flat = [{**e, "frac_reward_zero_std": 1.0, "reward": 0.0, WEIGHT_KEY: 0.0} for e in log]
    records = [
        StageRecord(3, "single-turn GRPO", "grpo", "/m/3", 5.0, log, None, []),
        StageRecord(4, "multi-turn GRPO", "grpo", "/m/4", 5.0, flat, None, []),
    ]
    assert records[0].diagnostics is not None and records[0].diagnostics["groups"] == 8
    data = json.loads(json.dumps(records[0].to_dict()))
    assert data["diagnostics"]["no_signal_share"] == 0.25
    assert StageRecord.from_dict(data) == records[0]
    del data["diagnostics"]  # a record written before diagnostics existed
    assert StageRecord.from_dict(data).diagnostics == records[0].diagnostics

    text = write_report(tmp_path, records, title="t", config_summary={}).read_text()
    section = text.split("## Learning signal\n", 1)[1].split("\n## ", 1)[0]
    assert "| 3 | single-turn GRPO | 2.00e-03 | 0.375 ± 0.400 | 2/8 (25.0%) | 50.0% |" in section
    assert "| 4 | multi-turn GRPO | 0 (unchanged) |" in section
    assert "**stage 4 (multi-turn GRPO)**: All 8 groups had equal rewards" in section
    assert "weights unchanged" in section
    assert (tmp_path / "plots" / "stage3_frac_reward_zero_std.png").is_file()
    assert (tmp_path / "plots" / "stage3_diag-weight_change.png").is_file()
