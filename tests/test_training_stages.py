"""The curriculum on a tiny randomly initialised model with an offline tokenizer (the
``smoke`` preset): every stage takes real optimizer steps through TRL, each starts from the
previous stage's output, masks keep prompt and tool tokens out of the loss, stage 4's KL
reference is stage 3's model, and ``--resume`` skips finished stages."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="training tests need the `train` extra (trl)")
pytest.importorskip("peft", reason="training tests need the `train` extra (peft)")

import torch  # noqa: E402

from birdrl.training.config import ConfigError, apply_overrides, load_preset  # noqa: E402
from birdrl.training.curriculum import run_curriculum  # noqa: E402

RESULT_VALUE = "123000"
"""The observation of the scripted ``SELECT 123*1000``: appears only in the tool result."""


def _scripted_generate(trainer: Any, seen: dict[str, Any]) -> None:
    """Make stage 4's policy call ``execute_sql`` first and ``submit_solution`` after a tool
    result, so the episode has a tool turn whose tokens must be masked."""
    tokenizer = trainer.processing_class
    model = trainer.model
    call = '<tool_call>\n{"name": "execute_sql", "arguments": {"sql": "SELECT 123*1000"}}\n</tool_call>'
    submit = (
        '<tool_call>\n{"name": "submit_solution", "arguments": {"sql": "SELECT 1"}}\n</tool_call>'
    )

    def generate(input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        rows = []
        for ids in input_ids:
            text = tokenizer.decode(ids)
            reply = submit if "<tool_response>" in text else call
            rows.append(tokenizer(reply + "<|im_end|>")["input_ids"])
        width = max(len(r) for r in rows)
        pad = tokenizer.pad_token_id
        tail = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=input_ids.dtype)
        seen["generate_calls"] = seen.get("generate_calls", 0) + 1
        return torch.cat([input_ids, tail], dim=1)

    model.generate = generate
    original = trainer.compute_loss

    def compute_loss(model: Any, inputs: dict[str, Any], *args: Any, **kw: Any) -> Any:
        seen.setdefault("batches", []).append(
            {
                k: inputs[k].detach().clone()
                for k in ("completion_ids", "completion_mask", "tool_mask")
                if k in inputs
            }
        )
        return original(model, inputs, *args, **kw)

    trainer.compute_loss = compute_loss


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run_dir = tmp_path_factory.mktemp("run") / "smoke"
    seen: dict[int, dict[str, Any]] = {1: {}, 2: {}, 3: {}, 4: {}}

    def hook(stage: int, trainer: Any) -> None:
        info = seen[stage]
        info["start"] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        if stage == 2:
            info["sample"] = dict(trainer.train_dataset[0])
            info["tokenizer"] = trainer.processing_class
        if stage == 4:
            info["ref"] = trainer.ref_model
            info["ref_state"] = {
                k: v.detach().clone() for k, v in trainer.ref_model.state_dict().items()
            }
            info["tokenizer"] = trainer.processing_class
            _scripted_generate(trainer, info)

    config = load_preset("smoke")
    messages: list[str] = []
    result = run_curriculum(config, run_dir, progress=messages.append, on_trainer=hook)
    return {"result": result, "seen": seen, "config": config, "messages": messages}


def test_every_stage_trains_and_is_recorded(smoke: dict[str, Any]) -> None:
    result = smoke["result"]
    assert [r.stage for r in result.records] == [0, 1, 2, 3, 4]
    for record in result.records[1:]:
        model_dir = Path(record.model_dir)
        assert (model_dir / "config.json").is_file() and (model_dir / "tokenizer.json").is_file()
        steps = [e for e in record.log_history if "loss" in e]
        assert len(steps) == 2, record.stage  # max_steps = 2 in the smoke preset
        assert all(math.isfinite(e["loss"]) for e in steps)
        assert record.evaluation is not None and record.evaluation["n"] == 2
        assert json.loads((result.run_dir / f"stage{record.stage}" / "record.json").read_text())
    sft = [e["loss"] for r in result.records[1:3] for e in r.log_history if "loss" in e]
    assert all(loss > 0 for loss in sft)  # cross-entropy of a random model: clearly positive
    assert result.report.is_file() and "Success rate" in result.report.read_text()
    assert any("step 2/2" in m for m in smoke["messages"])  # progress is printed per step


def test_grpo_groups_are_logged_with_rewards_and_advantages(smoke: dict[str, Any]) -> None:
    run_dir = smoke["result"].run_dir
    config = smoke["config"]
    for stage in (3, 4):
        stage_config = getattr(config, f"stage{stage}")
        lines = (run_dir / f"stage{stage}" / "groups.jsonl").read_text().splitlines()
        groups = [json.loads(line) for line in lines]
        assert {g["step"] for g in groups} == {1, 2}, stage  # one batch per step, no repeat
        for group in groups:
            assert group["instance_id"], stage  # the prompt was traced back to its task
            members = group["completions"]
            assert len(members) == stage_config.num_generations
            rewards = [m["reward"] for m in members]
            advantages = [m["advantage"] for m in members]
            assert all(isinstance(r, float) for r in rewards), stage
            mean = sum(rewards) / len(rewards)
            # an advantage is the reward's distance from its group's mean, in its sign
            for r, a in zip(rewards, advantages, strict=True):
                assert (
                    a == pytest.approx(0, abs=1e-6)
                    if r == pytest.approx(mean)
                    else (a > 0) == (r > mean)
                )
            assert all(m["completion"] for m in members), stage


def test_the_run_directory_gets_its_viewer(smoke: dict[str, Any]) -> None:
    site = smoke["result"].run_dir / "view"
    text = (site / "data" / "index.js").read_text(encoding="utf-8")
    index = json.loads(text[text.index(",") + 1 : text.rindex(");")])
    (source,) = index["sources"]
    assert [c["stage"] for c in source["columns"]] == [0, 1, 2, 3, 4]
    assert [c["groups"] > 0 for c in source["columns"]] == [False, False, False, True, True]
    assert len(index["tasks"]["id"]) == smoke["result"].records[0].evaluation["n"]
    assert (site / "index.html").is_file() and (site / "data" / "groups" / "c4.js").is_file()


def test_each_stage_starts_from_the_previous_output(smoke: dict[str, Any]) -> None:
    records = smoke["result"].records
    for previous, record in zip(records[:-1], records[1:], strict=True):
        assert record.notes[0] == f"started from {previous.model_dir}"
    seen = smoke["seen"]
    from safetensors.torch import load_file

    for stage in (2, 3, 4):
        saved = load_file(str(Path(records[stage - 1].model_dir) / "model.safetensors"))
        start = seen[stage]["start"]
        shared = [k for k in saved if k in start]
        assert shared and all(torch.equal(saved[k], start[k]) for k in shared), stage


def test_stage4_reference_policy_is_stage3(smoke: dict[str, Any]) -> None:
    records = smoke["result"].records
    stage3 = records[3].model_dir
    assert smoke["config"].stage4.beta > 0
    assert f"KL reference policy: {stage3}" in records[4].notes
    from safetensors.torch import load_file

    saved = load_file(str(Path(stage3) / "model.safetensors"))
    ref = smoke["seen"][4]["ref_state"]
    assert all(torch.equal(saved[k], ref[k]) for k in saved if k in ref)
    kl = [e["kl"] for e in records[4].log_history if "kl" in e]
    assert kl and all(math.isfinite(v) for v in kl)


def test_sft_loss_covers_only_assistant_tokens(smoke: dict[str, Any]) -> None:
    info = smoke["seen"][2]
    sample, tokenizer = info["sample"], info["tokenizer"]
    ids = sample["input_ids"]
    mask = (
        sample["assistant_masks"]
        if "assistant_masks" in sample
        else [label != -100 for label in sample["labels"]]
    )
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    masked = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    assert '"name": "execute_sql"' in trained and '"name": "submit_solution"' in trained
    assert "expert SQLite engineer" in masked and "User issue" in masked  # system + user
    assert "<tool_response>" in masked and "<tool_response>" not in trained
    assert "expert SQLite engineer" not in trained


def test_grpo_episode_masks_tool_results(smoke: dict[str, Any]) -> None:
    info = smoke["seen"][4]
    tokenizer = info["tokenizer"]
    assert info.get("generate_calls", 0) >= 2  # a second turn after the tool result
    found = False
    for batch in info["batches"]:
        for ids, cmask, tmask in zip(
            batch["completion_ids"], batch["completion_mask"], batch["tool_mask"], strict=True
        ):
            model_tokens = [int(t) for t, c, m in zip(ids, cmask, tmask, strict=True) if c and m]
            tool_tokens = [int(t) for t, c, m in zip(ids, cmask, tmask, strict=True) if c and not m]
            if not tool_tokens:
                continue
            found = True
            assert RESULT_VALUE in tokenizer.decode(tool_tokens)
            trained = tokenizer.decode(model_tokens)
            assert RESULT_VALUE not in trained
            assert "execute_sql" in trained and "submit_solution" in trained
    assert found, "no episode had a tool result"
    assert any(re.search(r"submitted [1-9]", n) for n in smoke["result"].records[4].notes)
    # the learning-signal diagnostics count the same episodes as the environment
    diag = smoke["result"].records[4].diagnostics
    counts = next(n for n in smoke["result"].records[4].notes if n.startswith("episodes "))
    episodes, submitted, calls = (
        int(re.search(rf"{word} (\d+)", counts).group(1))
        for word in ("episodes", "submitted", "tool calls")
    )
    assert diag["episodes"] == episodes > 0
    assert diag["submissions_per_episode"] == pytest.approx(submitted / episodes)
    assert diag["valid_tool_calls_per_episode"] == pytest.approx(calls / episodes)
    assert submitted > 0 and calls > episodes  # the script calls execute_sql, then submits
    assert diag["episodes_with_tool_call"] == 1.0


def test_resume_skips_finished_stages(smoke: dict[str, Any], tmp_path: Path) -> None:
    run_dir = smoke["result"].run_dir
    again = run_curriculum(smoke["config"], run_dir, resume=True)
    assert again.skipped == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="--resume"):
        run_curriculum(smoke["config"], run_dir)
    changed = apply_overrides(smoke["config"], ["stage3.max_steps=3"])
    with pytest.raises(ConfigError, match="changed: stage3"):
        run_curriculum(changed, run_dir, resume=True)
    # a run written before a setting existed resumes when the setting is at its default
    saved = run_dir / "config.json"
    written = json.loads(saved.read_text(encoding="utf-8"))
    del written["bf16_training"]
    saved.write_text(json.dumps(written), encoding="utf-8")
    assert run_curriculum(smoke["config"], run_dir, resume=True).skipped == [0, 1, 2, 3, 4]
    saved.write_text(json.dumps(written), encoding="utf-8")
    bf16 = apply_overrides(smoke["config"], ["bf16_training=true"])
    with pytest.raises(ConfigError, match="changed: bf16_training"):
        run_curriculum(bf16, run_dir, resume=True)


def test_resume_may_reconfigure_stages_not_started(smoke: dict[str, Any], tmp_path: Path) -> None:
    config = smoke["config"]
    run_dir = tmp_path / "partial"
    first = run_curriculum(config, run_dir, stages=[1])
    assert [r.stage for r in first.records] == [0, 1]
    later = apply_overrides(config, ["stage2.learning_rate=0.002", "stage3.enabled=false"])
    with pytest.raises(ConfigError, match="changed: stage1"):
        run_curriculum(apply_overrides(later, ["stage1.max_steps=1"]), run_dir, resume=True)
    second = run_curriculum(later, run_dir, stages=[1, 2], resume=True)
    assert second.skipped == [0, 1]
    assert [r.stage for r in second.records] == [0, 1, 2]
    assert second.records[2].notes[0] == f"started from {first.records[1].model_dir}"


def test_a_later_stage_never_silently_skips_a_lost_model(
    smoke: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run whose stage-1 record names a model that is not there (a relative path
    read from another directory) refuses to train stage 2 from the base model instead."""
    config = smoke["config"]
    run_dir = tmp_path / "moved"
    run_curriculum(config, run_dir, stages=[1])
    record_path = run_dir / "stage1" / "record.json"
    record = json.loads(record_path.read_text(encoding="utf-8"))
    record["model_dir"] = "runs/elsewhere/stage1/model"
    record_path.write_text(json.dumps(record), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="stage 1 finished earlier .* is not there"):
        run_curriculum(config, run_dir, stages=[2], resume=True)
    assert not (run_dir / "stage2" / "record.json").exists()


def test_vllm_server_mode_reaches_trls_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from birdrl.training import generation as generation_module
    from birdrl.training.generation import RunGeneration, plan_generation
    from birdrl.training.grpo import _grpo_args

    monkeypatch.setattr(generation_module, "vllm_installed", lambda: True)
    config = apply_overrides(
        load_preset("smoke"),
        ["generation_engine=vllm", "vllm_mode=server", 'vllm_server_url="http://gen:8000"'],
    )
    run = RunGeneration(config, plan_generation(config, 1))
    args = _grpo_args(config, config.stage3, tmp_path, False, run)
    assert args.use_vllm and args.vllm_mode == "server"
    assert args.vllm_server_base_url == "http://gen:8000"
