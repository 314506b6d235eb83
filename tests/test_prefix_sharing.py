"""Prefix sharing (`birdrl.training.prefix_sharing`): a group's prompt run once gives the
log-probabilities, entropies and gradient of TRL's per-completion path, a cut in the shared
prompt's graph is caught, and a GRPO stage's first step logs the same loss and gradient
norm either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="training tests need the `train` extra (trl)")

import torch  # noqa: E402
from toy_sft import count_rows_samples  # noqa: E402

from birdrl.evaluation.evaluator import EvalConfig  # noqa: E402
from birdrl.tasks.model import Task  # noqa: E402
from birdrl.training.common import StageJob  # noqa: E402
from birdrl.training.config import GRPOStageConfig, apply_overrides, load_preset  # noqa: E402
from birdrl.training.grpo import SingleTurnRollouts, run_grpo_stage  # noqa: E402
from birdrl.training.prefix_sharing import shared_prefix_logps  # noqa: E402
from birdrl.training.tiny import build_tiny_model  # noqa: E402

COMPLETION = 24
GROUP = 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("prefix") / "tiny")


def _model(path: Path) -> Any:
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    add_fused_lm_head(model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    return model.train()


def _batch(vocab: int) -> tuple[Any, Any]:
    """Three groups of `GROUP` completions: prompts of 40, 29 and 33 tokens (left-padded to
    40), the first 12 the same in all (a system prompt), completions right-padded by
    different amounts, rows shuffled."""
    generator = torch.Generator().manual_seed(0)
    width = 40
    start = torch.randint(5, vocab, (12,), generator=generator)
    rows, masks = [], []
    for length in (40, 29, 33):
        own = torch.randint(5, vocab, (length - len(start),), generator=generator)
        prompt = torch.cat([start, own])
        for g in range(GROUP):
            completion = torch.randint(5, vocab, (COMPLETION,), generator=generator)
            keep = COMPLETION - 5 * g
            completion[keep:] = 0
            pad = torch.zeros(width - length, dtype=torch.long)
            rows.append(torch.cat([pad, prompt, completion]))
            masks.append(
                torch.cat(
                    [
                        pad,
                        torch.ones(length, dtype=torch.long),
                        (torch.arange(COMPLETION) < keep).long(),
                    ]
                )
            )
    order = torch.randperm(len(rows), generator=generator)
    return torch.stack(rows)[order], torch.stack(masks)[order]


def _trl_path(model: Any, ids: Any, mask: Any) -> tuple[Any, Any]:
    """What TRL's ``_get_per_token_logps_and_entropies`` computes: every row whole."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-COMPLETION] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -COMPLETION:], out.entropy[:, -COMPLETION:]


TEMPERATURE = 0.7
HEADS = {"fused": None, "plain": TEMPERATURE}
"""Shared passes scored by TRL's fused head, or by the model's own logits (a CPU's way)."""


def _run(model: Any, ids: Any, mask: Any, shared: str | None) -> tuple[Any, Any, Any]:
    model.zero_grad()
    if shared:
        logps, entropy = shared_prefix_logps(
            model, ids, mask, COMPLETION, compute_entropy=True, temperature=HEADS[shared]
        )
    else:
        logps, entropy = _trl_path(model, ids, mask)
    keep = mask[:, -COMPLETION:]
    (-(logps * keep).sum() / keep.sum()).backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logps.detach(), entropy.detach(), grad.clone()


def _compare(tiny: Path, head: str) -> tuple[float, float, float]:
    model = _model(tiny)
    ids, mask = _batch(model.config.vocab_size)
    ref_logps, ref_entropy, ref_grad = _run(model, ids, mask, shared=None)
    logps, entropy, grad = _run(model, ids, mask, shared=head)
    keep = mask[:, -COMPLETION:].bool()
    assert float(logps[~keep].abs().max()) == 0.0  # padding scores 0, as in TRL
    return (
        float((logps - ref_logps)[keep].abs().max()),
        float((entropy - ref_entropy)[keep].abs().max()),
        float((grad - ref_grad).norm() / ref_grad.norm()),
    )


@pytest.mark.parametrize("head", list(HEADS))
def test_shared_prefix_equals_the_per_completion_path(tiny: Path, head: str) -> None:
    logp_error, entropy_error, grad_error = _compare(tiny, head)
    assert logp_error < 1e-4 and entropy_error < 1e-4
    assert grad_error < 1e-4


@pytest.mark.parametrize("head", list(HEADS))
def test_a_prefix_cut_from_the_graph_is_caught(tiny: Path, head: str, monkeypatch: Any) -> None:
    """Meta-test: the keys and values detached before they are repeated for a group (so
    no gradient reaches the prompts) leave the log-probabilities equal and the gradient
    check of the test above failing."""
    from transformers.cache_utils import DynamicLayer

    repeat = DynamicLayer.batch_repeat_interleave

    def detached(self: Any, repeats: int) -> None:
        self.keys, self.values = self.keys.detach(), self.values.detach()
        repeat(self, repeats)

    monkeypatch.setattr(DynamicLayer, "batch_repeat_interleave", detached)
    logp_error, _, grad_error = _compare(tiny, head)
    assert logp_error < 1e-4
    assert grad_error > 1e-2


def _smoke(prefix_sharing: bool) -> Any:
    setting = f"prefix_sharing={str(prefix_sharing).lower()}"
    return apply_overrides(load_preset("smoke"), ["seed=0", "save_steps=1000", setting])


def _first_step(
    tiny: Path, root: Path, prefix_sharing: bool, also: Any = None
) -> tuple[dict[str, Any], list[str]]:
    """One GRPO step of the tiny model on two toy prompts, each group's rewards made
    unequal by a reward on the completion's length, so the loss and gradient are not 0;
    `also` is called with the trainer after that."""
    import sqlite3

    root.mkdir(parents=True, exist_ok=True)
    db = root / "toy.sqlite"
    if not db.exists():
        with sqlite3.connect(db) as conn:
            conn.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (3);")
        conn.close()
    tasks = {
        f"toy_{i}": Task(
            instance_id=f"toy_{i}",
            db_id="toy",
            query=f"How many rows does t have? ({i})",
            issue_sql=("SELECT x FROM t",),
            sol_sql=("SELECT COUNT(*) FROM t",),
        )
        for i in range(2)
    }
    rows = [
        {
            "prompt": [{"role": "user", "content": task.query}],
            "instance_id": task.instance_id,
            "db_id": "toy",
        }
        for task in tasks.values()
    ]

    def length_reward(trainer: Any) -> None:
        def reward(completions: list[Any], **_: Any) -> list[float]:
            return [float(len(str(c)) % 7) for c in completions]

        reward.__name__ = "length_reward"
        trainer.reward_funcs = [reward]
        if also is not None:
            also(trainer)

    stage = GRPOStageConfig(
        max_steps=1,
        learning_rate=1e-3,
        batch_size=4,
        grad_accum=2,
        num_generations=4,
        max_completion_length=12,
    )
    output = run_grpo_stage(
        StageJob(
            stage=3,
            model_path=tiny,
            rows=rows,
            out_dir=root / f"grpo-{prefix_sharing}-{also is not None}",
            config=_smoke(prefix_sharing),
            stage_config=stage,
            on_trainer=length_reward,
        ),
        SingleTurnRollouts(tasks=tasks, databases={"toy": db}, eval_config=EvalConfig()),
    )
    return output.log_history[0], output.notes


def _count_prefills(monkeypatch: Any) -> list[int]:
    """Tokens of every shared start or prompt run on its own (so a test sees that sharing
    really happened)."""
    import birdrl.training.prefix_sharing as module

    seen: list[int] = []
    prefill = module._prefill

    def counting(model: Any, ids: Any, cache: Any) -> None:
        seen.append(int(ids.numel()))
        prefill(model, ids, cache)

    monkeypatch.setattr(module, "_prefill", counting)
    return seen


def test_a_grpo_step_is_the_same_with_and_without_sharing(
    tiny: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    prefills = _count_prefills(monkeypatch)
    shared, shared_notes = _first_step(tiny, tmp_path, prefix_sharing=True)
    assert sum(prefills) > 0
    prefills.clear()
    plain, plain_notes = _first_step(tiny, tmp_path, prefix_sharing=False)
    assert prefills == []
    assert "GRPO loss: each group's prompt computed once (prefix sharing)" in shared_notes
    assert any(n.startswith("GRPO loss: TRL's per-completion path") for n in plain_notes)
    # unequal rewards in each group: the gradient is not 0 (the first step's loss value is
    # 0 whatever the log-probabilities: the ratio to the sampling policy is 1)
    assert shared["reward_std"] > 0 and shared["grad_norm"] > 0
    assert shared["reward"] == plain["reward"]  # the same completions
    assert shared["entropy"] == pytest.approx(plain["entropy"], rel=1e-5)
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-3)
    assert shared["diag/weight_change"] == pytest.approx(plain["diag/weight_change"], rel=1e-3)


class _NoisyEngine:
    """TRL's colocated vLLM generation as the importance-sampling correction sees it:
    fixed completions (seeded by row), with sampling log-probabilities that differ from
    the trainer's by seeded noise (a bf16 engine beside an fp32 trainer)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def sync_weights(self) -> None:
        pass

    def generate(self, prompts: list[list[int]], **_: Any) -> tuple[Any, Any, Any, Any]:
        model, temperature = self.trainer.model, self.trainer.temperature
        completions, logprobs = [], []
        for row, prompt in enumerate(prompts):
            seed = torch.Generator().manual_seed(row)
            completion = torch.randint(5, model.config.vocab_size, (5 + row % 4,), generator=seed)
            ids = torch.tensor(prompt + completion.tolist())[None]
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
            own = (logits / temperature).log_softmax(-1).gather(-1, completion[:, None])[:, 0]
            noisy = own + 0.05 * torch.randn(len(completion), generator=seed)
            completions.append(completion.tolist())
            logprobs.append([[float(v)] for v in noisy])
        return None, completions, logprobs, None


def _with_noisy_engine(passes: list[bool]) -> Any:
    """A hook that makes the trainer generate with `_NoisyEngine`, correcting for it, and
    records in `passes` whether each policy log-probability pass had a gradient."""

    def hook(trainer: Any) -> None:
        trainer.use_vllm, trainer.vllm_mode = True, "colocate"
        trainer.vllm_importance_sampling_correction = True
        trainer.vllm_generation, trainer._last_loaded_step = _NoisyEngine(trainer), -1
        scores = trainer._get_per_token_logps_and_entropies

        def counted(model: Any, *args: Any, **kwargs: Any) -> Any:
            passes.append(torch.is_grad_enabled())
            return scores(model, *args, **kwargs)

        trainer._get_per_token_logps_and_entropies = counted

    return hook


@pytest.mark.parametrize("own_pass", [False, True], ids=["from-the-loss", "broken"])
def test_the_sampling_correction_comes_from_the_loss_pass(
    tiny: Path, tmp_path: Path, monkeypatch: Any, own_pass: bool
) -> None:
    """With vLLM sampling in another dtype, the old policy's log-probabilities come from
    the loss pass: no pass of their own, and the step's importance-sampling figures, loss
    and gradient are TRL's (its own no-grad pass, `_old_pass_in_loss` off). Meta-test
    (`broken`): a ratio taken from log-probabilities one step off is caught."""
    from birdrl.training import grpo
    from birdrl.training import prefix_sharing as module

    ours: list[bool] = []
    with monkeypatch.context() as patch:
        if own_pass:  # the meta-test: the ratio as if the weights had moved since sampling
            ratio = module.importance_sampling_ratio
            patch_ratio = lambda old, *rest: ratio(old + 0.05, *rest)  # noqa: E731
            patch.setattr(module, "importance_sampling_ratio", patch_ratio)
        shared, _ = _first_step(tiny, tmp_path, True, _with_noisy_engine(ours))
    trl: list[bool] = []
    with monkeypatch.context() as patch:
        trainer_class = module.prefix_sharing_trainer
        patch.setattr(
            grpo,
            "prefix_sharing_trainer",
            lambda base: type("TRLOldPass", (trainer_class(base),), {"_old_pass_in_loss": _no}),
        )
        reference, _ = _first_step(tiny, tmp_path / "trl", True, _with_noisy_engine(trl))
    assert trl == [False, True, True]  # TRL's old pass, then two micro-batches' loss passes
    assert ours == [True, True]
    key = "sampling/importance_sampling_ratio/mean"
    assert reference[key] != pytest.approx(1.0, abs=1e-3)  # the correction matters here
    checks = {
        name: shared[name] == pytest.approx(reference[name], rel=1e-4, abs=1e-6)
        for name in (
            key,
            "sampling/importance_sampling_ratio/min",
            "sampling/importance_sampling_ratio/max",
            "sampling/sampling_logp_difference/max",
            "loss",
            "grad_norm",
        )
    }
    if own_pass:
        assert not checks[key] and not checks["grad_norm"], checks
    else:
        assert all(checks.values()), {k: (shared[k], reference[k]) for k in checks}


def _no(self: Any) -> bool:
    return False


def test_the_common_start_is_computed_once(tiny: Path, monkeypatch: Any) -> None:
    """The prompts' shared start goes through the model once, each prompt's own part once
    per group, and each completion once: 12 + (28 + 17 + 21 - 3) prompt tokens in all,
    where TRL's path runs 3 x 3 x 40."""
    model = _model(tiny)
    ids, mask = _batch(model.config.vocab_size)
    seen: list[int] = []
    forward = model.forward  # TRL's fused head, set on the instance

    def counting(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("fused_lm_head"):
            seen.append(int(kwargs["input_ids"].numel()))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    with torch.no_grad():
        shared_prefix_logps(model, ids, mask, COMPLETION)
    assert seen[0] == 12 and sorted(seen[1:]) == [16, 20, 27]  # groups in order of first row


def _sft_batch(vocab: int) -> dict[str, Any]:
    """Three right-padded rows sharing a 15-token start; the first 20 tokens of each are
    prompt (label -100), the rest its answer."""
    generator = torch.Generator().manual_seed(1)
    start = torch.randint(5, vocab, (15,), generator=generator)
    rows = [
        torch.cat([start, torch.randint(5, vocab, (n,), generator=generator)]) for n in (30, 22, 26)
    ]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :20] = -100
    positions = torch.arange(width).expand(len(rows), width) * mask
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "position_ids": positions}


@pytest.mark.parametrize("plain_head", [False, True], ids=["fused", "plain"])
def test_sft_shared_start_equals_the_whole_batch(tiny: Path, plain_head: bool) -> None:
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from birdrl.training.prefix_sharing import shared_start_forward

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))  # SFT's: T = 1
    batch = _sft_batch(model.config.vocab_size)
    figures = []
    for shared in (False, True):
        model.zero_grad()
        out = (
            shared_start_forward(model, plain_head=plain_head, **batch)
            if shared
            else model(**batch, fused_lm_head=True)
        )
        (-out.log_probs.sum() / out.label_mask.sum()).backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        figures.append(
            (
                float(out.log_probs.sum()),
                float(out.entropy.sum()),
                int(out.label_mask.sum()),
                grad.clone(),
                out.log_probs.size(1),
                int(out.is_top1.sum()),
            )
        )
    whole, shared = figures
    # the shared start was not run per row; the plain head projects from the first label on
    assert shared[4] == (whole[4] - 19 if plain_head else whole[4] - 15)
    assert shared[5] == whole[5]
    assert shared[2] == whole[2] == int((batch["labels"][:, 1:] != -100).sum())
    assert shared[0] == pytest.approx(whole[0], rel=1e-5)
    assert shared[1] == pytest.approx(whole[1], rel=1e-5)
    assert float((shared[3] - whole[3]).norm() / whole[3].norm()) < 1e-4


def _sft_first_step(
    tiny: Path, root: Path, prefix_sharing: bool
) -> tuple[dict[str, Any], list[str]]:
    from birdrl.training.config import SFTStageConfig
    from birdrl.training.sft import run_sft_stage

    system = "You fix SQL. Answer with one query in an answer block, nothing else."
    rows = count_rows_samples(4, system)
    output = run_sft_stage(
        StageJob(
            stage=2,
            model_path=tiny,
            rows=rows,
            out_dir=root / f"sft-{prefix_sharing}",
            config=_smoke(prefix_sharing),
            stage_config=SFTStageConfig(
                max_steps=1, learning_rate=1e-3, batch_size=4, grad_accum=1, max_length=256
            ),
        )
    )
    return output.log_history[0], output.notes


def test_an_sft_step_is_the_same_with_and_without_sharing(
    tiny: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    prefills = _count_prefills(monkeypatch)
    shared, shared_notes = _sft_first_step(tiny, tmp_path, prefix_sharing=True)
    assert len(prefills) == 1 and prefills[0] > 20  # system prompt and chat markup, once
    prefills.clear()
    plain, plain_notes = _sft_first_step(tiny, tmp_path, prefix_sharing=False)
    assert prefills == []
    assert "SFT loss: the start every sample of a micro-batch shares computed once" in shared_notes
    assert "SFT loss: TRL's path (prefix_sharing = false)" in plain_notes
    assert shared["loss"] > 0
    assert shared["loss"] == pytest.approx(plain["loss"], rel=1e-5)
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-3)
    assert shared["mean_token_accuracy"] == plain["mean_token_accuracy"]


def test_plain_head_scores_like_log_softmax() -> None:
    from birdrl.training.lm_head import score_tokens

    generator = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 5, 11, generator=generator, requires_grad=True)
    targets = torch.randint(0, 11, (2, 5), generator=generator)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    scores = score_tokens(logits, targets, mask, 0.5, entropy=True, top1=True)
    expected = (logits / 0.5).log_softmax(-1).gather(-1, targets[..., None])[..., 0] * mask
    assert torch.allclose(scores.log_probs, expected)
    assert scores.log_probs.requires_grad and not scores.entropy.requires_grad
    assert float(scores.entropy[0, 3:].abs().sum()) == 0.0 and not scores.is_top1[0, 3:].any()
    bonus = score_tokens(logits, targets, mask, 0.5, entropy=True, entropy_grad=True)
    assert bonus.entropy.requires_grad  # TRL's entropy bonus trains on it
    assert torch.allclose(bonus.entropy, scores.entropy)
