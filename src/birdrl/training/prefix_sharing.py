"""GRPO's log-probabilities with each group's prompt run through the model once.

The G completions of a GRPO group share one prompt. TRL scores every completion as its own
sequence, so the prompt's forward and backward pass is paid G times per group, and on a
CPU its LM head runs over every prompt position as well (TRL's fused head scores only the
completion positions where Triton runs, every position elsewhere). In the tiny preset the
prompt is most of each sequence (about 900 of 1,200 tokens in stage 4), so that is most of
a step.

`shared_prefix_logps` runs a prompt once, all but its last token, keeps the keys and values
(with their autograd graph), repeats them for the group, and runs each completion after it,
with its first input the prompt's last token, through the model's fused LM head. The
log-probabilities are those of the whole sequence: RoPE attention depends on relative
positions only, so dropping the prompt's left padding changes nothing but rounding, and the
gradient reaches the prompt's activations through the shared keys and values, once per
group instead of once per completion. `tests/test_prefix_sharing.py` checks both against
TRL's path.

`prefix_sharing_trainer` adds this to a ``GRPOTrainer`` class, and keeps each generation
batch in its sampler's order (a group's completions next to each other) instead of TRL's
shuffle: every micro-batch of one optimizer step adds to the same gradient, and TRL's
default loss (``dapo``) normalises by the tokens of the whole generation batch, so the order
changes nothing but which rows share a micro-batch. It steps aside (TRL's own path) where
the shortcut does not hold: several processes (DDP expects one forward per backward),
gradient checkpointing (recomputed layers would append to the cache twice), images, MoE
auxiliary losses, and a per-micro-batch loss normalisation (``bnpo``).

It also drops a pass. When vLLM generates in another dtype than the trainer's, TRL corrects
for the mismatch with an importance-sampling ratio, and computes the trainer's ("old")
log-probabilities for it in a no-grad pass over the whole generation batch before the
loss. With one iteration and a generation batch used within one optimizer step, those are
the loss pass's own log-probabilities (the same weights), so the trainer takes the ratio
from the loss pass, detached (`importance_sampling_ratio`, TRL's formula): in a stage-4 step
of the tiny preset that pass was 5 of 43 seconds.
"""

from __future__ import annotations

from typing import Any, ClassVar

from birdrl.training.lm_head import plain_head_wanted, score_tokens

__all__ = [
    "SFT_INPUTS",
    "UNSHUFFLED_LOSSES",
    "importance_sampling_ratio",
    "sampling_metrics",
    "prefix_sharing_sft_trainer",
    "prefix_sharing_trainer",
    "shared_prefix_logps",
    "shared_start_forward",
]

UNSHUFFLED_LOSSES = frozenset({"dapo", "grpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"})
"""TRL losses whose gradient does not depend on which rows share a micro-batch (each is
normalised per sequence, by a constant, or by the whole generation batch's tokens)."""


def _groups(prompt_ids: Any, prompt_mask: Any) -> list[list[int]]:
    """Row indices grouped by identical (unpadded) prompt, in order of first appearance."""
    groups: dict[bytes, list[int]] = {}
    for row in range(prompt_ids.size(0)):
        key = prompt_ids[row][prompt_mask[row].bool()].cpu().numpy().tobytes()
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _common_prefix(prompts: list[Any]) -> int:
    """Tokens every prompt starts with, leaving each at least its last token."""
    import torch

    length = min(p.numel() for p in prompts) - 1
    first = prompts[0]
    for other in prompts[1:]:
        if length <= 0:
            break
        same = (first[:length] == other[:length]).int()
        length = int(torch.cumprod(same, 0).sum())
    return max(length, 0)


def _prefill(model: Any, ids: Any, cache: Any) -> None:
    """Extend `cache` by `ids` (one unpadded sequence), keeping the autograd graph."""
    if ids.numel():
        model(input_ids=ids[None], past_key_values=cache, use_cache=True, logits_to_keep=1)


def _new_cache(model: Any) -> Any:
    """An empty cache for `model` (wrapped by DDP or not)."""
    from transformers import DynamicCache

    return DynamicCache(config=getattr(model, "module", model).config)


def _extend(cache: Any, shared: Any) -> None:
    """Start `cache` with `shared`'s keys and values (the tensors themselves: one graph)."""
    for target, source in zip(cache.layers, shared.layers, strict=False):
        keys = getattr(source, "keys", None)
        if keys is not None and keys.numel():
            target.update(keys, source.values)


def shared_prefix_logps(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    logits_to_keep: int,
    *,
    compute_entropy: bool = False,
    temperature: float | None = None,
    entropy_grad: bool = False,
) -> tuple[Any, Any | None]:
    """Per-token log-probabilities (and entropies) of the last `logits_to_keep` tokens of
    each row, as TRL's ``_get_per_token_logps_and_entropies`` returns them (0 at padded
    completion positions), computing each distinct prompt once, and the start every prompt
    shares (the system prompt and tools) once for all of them.

    `input_ids` / `attention_mask` are TRL's: a left-padded prompt followed by a
    right-padded completion of `logits_to_keep` tokens. `temperature` None scores through
    the model's fused LM head (TRL's ``add_fused_lm_head``, which applies the sampling
    temperature); a number scores the model's own logits of the completion positions,
    divided by it (`birdrl.training.lm_head`, the faster way on a CPU), the entropies with a
    gradient when `entropy_grad` (TRL's entropy bonus)."""
    import torch

    split = input_ids.size(1) - logits_to_keep
    prompt_ids, prompt_mask = input_ids[:, :split], attention_mask[:, :split]
    completion_ids, completion_mask = input_ids[:, split:], attention_mask[:, split:]
    groups = _groups(prompt_ids, prompt_mask)
    prompts = [prompt_ids[rows[0]][prompt_mask[rows[0]].bool()] for rows in groups]
    common = _common_prefix(prompts) if len(groups) > 1 else 0
    shared = _new_cache(model)
    _prefill(model, prompts[0][:common], shared)
    logps: list[Any] = []
    entropies: list[Any] = []
    order: list[int] = []
    for rows, prompt in zip(groups, prompts, strict=True):
        n = len(rows)
        cache = _new_cache(model)
        _extend(cache, shared)
        _prefill(model, prompt[common:-1], cache)
        cache.batch_repeat_interleave(n)
        index = torch.tensor(rows, device=input_ids.device)
        tail = torch.cat([prompt[-1:].expand(n, 1), completion_ids.index_select(0, index)], dim=1)
        tail_mask = torch.cat(
            [torch.ones_like(tail[:, :1]), completion_mask.index_select(0, index)], dim=1
        )
        past = torch.ones_like(tail[:, :1]).expand(n, prompt.numel() - 1)
        if temperature is None:
            outputs = model(
                input_ids=tail,
                attention_mask=torch.cat([past, tail_mask], dim=1),
                past_key_values=cache,
                labels=tail.masked_fill(tail_mask == 0, -100),
                fused_lm_head=True,
            )
            logps.append(outputs.log_probs)
            entropies.append(outputs.entropy)
        else:  # the logits of the positions that predict the completion, and nothing else
            logits = model(
                input_ids=tail[:, :-1],
                attention_mask=torch.cat([past, tail_mask[:, :-1]], dim=1),
                past_key_values=cache,
                logits_to_keep=logits_to_keep,
            ).logits
            scores = score_tokens(
                logits,
                tail[:, 1:],
                tail_mask[:, 1:],
                temperature,
                entropy=compute_entropy,
                entropy_grad=entropy_grad,
            )
            logps.append(scores.log_probs)
            entropies.append(scores.entropy)
        order += rows
    inverse = torch.empty(len(order), dtype=torch.long, device=input_ids.device)
    inverse[torch.tensor(order, device=input_ids.device)] = torch.arange(
        len(order), device=input_ids.device
    )
    out = torch.cat(logps).index_select(0, inverse)
    ent = torch.cat(entropies).index_select(0, inverse) if compute_entropy else None
    return out, ent


def importance_sampling_ratio(
    old: Any,
    sampling: Any,
    mask: Any,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> tuple[Any, Any, Any]:
    """TRL's vLLM importance-sampling ratio of the trainer's log-probabilities `old` to the
    engine's `sampling` ones (``(rows, tokens)``, NaN where the engine gave none, which
    counts as no correction), per token or per sequence (`mode`, as
    ``vllm_importance_sampling_mode``), clipped (``*_truncate``) or zeroed (``*_mask``)
    outside the bounds. Also returns what TRL's metrics are taken from: the absolute
    log-probability differences of the scored tokens and the ratios that apply."""
    import math

    import torch

    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
    per_sequence = mode in ("sequence_mask", "sequence_truncate")
    ratio = torch.exp(diff.sum(-1, keepdim=True) if per_sequence else diff)
    if mode in ("sequence_truncate", "token_truncate"):
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    elif mode in ("sequence_mask", "token_mask"):
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        ratio = ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
    else:
        raise ValueError(f"unknown vllm_importance_sampling_mode {mode!r}")
    keep = mask.bool()
    delta = (old - sampling).abs()[keep & ~torch.isnan(sampling)]
    return ratio, delta, ratio.flatten() if per_sequence else ratio[keep]


def sampling_metrics(deltas: list[Any], ratios: list[Any]) -> dict[str, float]:
    """TRL's ``sampling/...`` metrics over the differences and ratios of several
    micro-batches (`importance_sampling_ratio`'s last two values)."""
    import torch

    out: dict[str, float] = {}
    delta, ratio = torch.cat(deltas), torch.cat(ratios)
    if delta.numel():
        out["sampling/sampling_logp_difference/mean"] = float(delta.mean())
        out["sampling/sampling_logp_difference/max"] = float(delta.max())
    if ratio.numel():
        out["sampling/importance_sampling_ratio/min"] = float(ratio.min())
        out["sampling/importance_sampling_ratio/mean"] = float(ratio.mean())
        out["sampling/importance_sampling_ratio/max"] = float(ratio.max())
    return out


def prefix_sharing_trainer(base: type) -> type:
    """`base` (TRL's ``GRPOTrainer``) with each group's prompt computed once in every
    log-probability pass (policy, reference, old policy) and generation batches kept in
    group order; TRL's own path wherever the shortcut does not hold (module docstring)."""
    from trl.trainer.utils import split_tensor_dict

    class PrefixSharingGRPOTrainer(_SharingTrainer, base):  # type: ignore[misc, valid-type]
        shared_note = "GRPO loss: each group's prompt computed once (prefix sharing)"
        fallback_note = "GRPO loss: TRL's per-completion path"
        _correction_pending: Any = None
        """A micro-batch whose importance-sampling ratio the next loss pass computes."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._correction_seen: list[tuple[Any, Any]] = []
            super().__init__(*args, **kwargs)

        def _get_per_token_logps_and_entropies(  # type: ignore[override]
            self,
            model: Any,
            input_ids: Any,
            attention_mask: Any,
            logits_to_keep: int,
            batch_size: int | None = None,
            compute_entropy: bool = False,
            compute_aux_loss: bool = False,
            **media: Any,
        ) -> tuple[Any, Any | None, Any | None]:
            if (
                not self.prefix_sharing_active
                or compute_aux_loss
                or any(value is not None for value in media.values())
            ):
                logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size,
                    compute_entropy,
                    compute_aux_loss,
                    **media,
                )
            else:
                aux = None
                with self.accelerator.autocast():
                    logps, entropies = shared_prefix_logps(
                        model,
                        input_ids,
                        attention_mask,
                        logits_to_keep,
                        compute_entropy=compute_entropy,
                        temperature=(
                            self.temperature if plain_head_wanted(input_ids.device) else None
                        ),
                        entropy_grad=bool(getattr(self, "_entropy_bonus_enabled", False)),
                    )
            pending, self._correction_pending = self._correction_pending, None
            if pending is not None:  # the loss pass of a batch whose old pass was skipped
                pending["importance_sampling_ratio"] = self._sampling_correction(
                    logps.detach(), pending
                )
            return logps, entropies, aux

        def _old_pass_in_loss(self) -> bool:
            """Whether the old policy's log-probabilities, which TRL computes in a pass of
            their own for the vLLM importance-sampling correction, are the loss pass's own:
            one iteration and every generation batch used within one optimizer step (TRL's
            condition for skipping that pass without vLLM), so the same weights score
            both."""
            every = self.args.steps_per_generation * self.num_iterations
            return bool(
                self.prefix_sharing_active
                and self.use_vllm
                and self.vllm_importance_sampling_correction
                and self.num_iterations == 1
                and self.args.gradient_accumulation_steps % every == 0
            )

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            if not (self.model.training and self._old_pass_in_loss()):
                return super()._generate_and_score_completions(inputs)
            self.vllm_importance_sampling_correction = False  # no old pass; vLLM's
            try:  # sampling log-probabilities are kept either way
                return super()._generate_and_score_completions(inputs)
            finally:
                self.vllm_importance_sampling_correction = True

        def _compute_loss(self, model: Any, inputs: Any) -> Any:
            if (
                self._old_pass_in_loss()
                and "importance_sampling_ratio" not in inputs
                and "sampling_per_token_logps" in inputs
            ):
                self._correction_pending = inputs
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._correction_pending = None

        def _sampling_correction(self, old: Any, inputs: Any) -> Any:
            """TRL's importance-sampling ratio of a micro-batch, from the loss pass's
            detached log-probabilities `old`; its metrics wait for the next log."""
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            args = self.args
            ratio, delta, applied = importance_sampling_ratio(
                old,
                inputs["sampling_per_token_logps"],
                mask,
                args.vllm_importance_sampling_mode,
                args.vllm_importance_sampling_clip_min,
                args.vllm_importance_sampling_clip_max,
            )
            self._correction_seen.append((delta, applied))
            return ratio

        def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
            if self._correction_seen:  # the micro-batches since the last log, as one
                deltas, ratios = zip(*self._correction_seen, strict=True)
                self._correction_seen.clear()
                for name, value in sampling_metrics(list(deltas), list(ratios)).items():
                    self._metrics["train"][name].append(value)
            super().log(logs, *args, **kwargs)

        def _prepare_inputs(self, generation_batch: Any) -> Any:
            if not (self.prefix_sharing_active and self.model.training):
                return super()._prepare_inputs(generation_batch)
            steps = self.args.steps_per_generation
            buffered: list[Any] | None = self._buffered_inputs
            if self._step % (steps * self.num_iterations) == 0 or buffered is None:
                batch = self._generate_and_score_completions(generation_batch)
                buffered = self._buffered_inputs = split_tensor_dict(batch, steps)
            return buffered[self._step % steps]

    return PrefixSharingGRPOTrainer


SFT_INPUTS = frozenset({"input_ids", "attention_mask", "labels", "position_ids", "use_cache"})
"""What a plain (unpacked, text-only) SFT batch gives the model; anything else: TRL's path."""


def shared_start_forward(model: Any, *, plain_head: bool = False, **inputs: Any) -> Any:
    """``model(**inputs, fused_lm_head=True)`` for an SFT micro-batch, with the start all
    its rows share and score nothing on (the system prompt and tools) run once.

    The rows are right-padded; the shared start ends before any row's first scored token,
    so the positions left out are ones TRL's fused head gives 0 and masks, and every figure
    TRL takes from the output (sums of log-probabilities, entropies, top-1 hits and the
    label mask) is unchanged. With `plain_head` (a CPU) only the positions from the first
    scored one on are projected, through the model's own head (`birdrl.training.lm_head`).
    Inputs other than `SFT_INPUTS` go to TRL's head whole."""
    from trl.trainer.utils import FusedCausalLMOutput

    ids, labels = inputs["input_ids"], inputs["labels"]
    mask = inputs.get("attention_mask")
    if not set(inputs) <= SFT_INPUTS or mask is None:
        return model(**inputs, fused_lm_head=True)
    first = int((labels != -100).int().argmax(1).min())  # first scored token of any row
    start = min(_common_prefix(list(ids)), first - 1) if ids.size(0) > 1 else 0
    if start < 2 or not bool(mask[:, :start].all()):
        start = 0
    past: dict[str, Any] = {}
    if start:
        cache = _new_cache(model)
        _prefill(model, ids[0, :start], cache)
        cache.batch_repeat_interleave(ids.size(0))
        past["past_key_values"] = cache
    tail = {k: v[:, start:] for k, v in inputs.items() if k in ("input_ids", "position_ids")}
    tail_labels = labels[:, start:]
    if not plain_head:
        return model(**tail, labels=tail_labels, attention_mask=mask, fused_lm_head=True, **past)
    begin = max(first - 1 - start, 0)  # the tail position that predicts the first label
    logits = model(
        **tail, attention_mask=mask, logits_to_keep=tail_labels.size(1) - begin, **past
    ).logits[:, :-1]
    targets = tail_labels[:, begin + 1 :]
    scored = targets != -100
    scores = score_tokens(logits, targets, scored, entropy=True, top1=True)
    return FusedCausalLMOutput(
        loss=-scores.log_probs.sum() / scored.sum().clamp(min=1),
        log_probs=scores.log_probs,
        entropy=scores.entropy,
        is_top1=scores.is_top1,
        label_mask=scored,
    )


class _SharedStartModel:
    """`model` as the SFT trainer calls it, with fused-head calls going through
    `shared_start_forward`."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __call__(self, *args: Any, fused_lm_head: bool = False, **inputs: Any) -> Any:
        if fused_lm_head and not args:
            device = inputs["input_ids"].device
            return shared_start_forward(self._model, plain_head=plain_head_wanted(device), **inputs)
        return self._model(*args, fused_lm_head=fused_lm_head, **inputs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def prefix_sharing_sft_trainer(base: type) -> type:
    """`base` (TRL's ``SFTTrainer``) computing each training micro-batch's shared start
    once (`shared_start_forward`); TRL's path where that does not hold (`_why_not`)."""

    class PrefixSharingSFTTrainer(_SharingTrainer, base):  # type: ignore[misc, valid-type]
        shared_note = "SFT loss: the start every sample of a micro-batch shares computed once"
        fallback_note = "SFT loss: TRL's path"

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if self.prefix_sharing_active and self.model.training:
                model = _SharedStartModel(model)
            return super().compute_loss(model, inputs, *args, **kwargs)

    return PrefixSharingSFTTrainer


class _SharingTrainer:
    """What both trainers add to TRL's (placed before it in the bases): whether this one
    shares prefixes, decided once it is built, and the stage note that says so or why not."""

    shared_note: ClassVar[str]
    fallback_note: ClassVar[str]
    prefix_sharing_active: bool
    """Whether prefixes are shared (False: why is in `prefix_sharing_note`)."""
    prefix_sharing_note: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        reason = _why_not(self)
        self.prefix_sharing_active = reason is None
        self.prefix_sharing_note = (
            self.shared_note if reason is None else f"{self.fallback_note} ({reason})"
        )


def _why_not(trainer: Any) -> str | None:
    """Why `trainer` must keep TRL's path, or None when prompts can be shared."""
    args = trainer.args
    if args.world_size > 1:
        return f"{args.world_size} processes: DDP expects one forward pass per backward"
    if args.gradient_checkpointing:
        return "gradient checkpointing recomputes layers, which would extend the cache twice"
    if getattr(args, "padding_free", False) or getattr(args, "packing", False):
        return "packed or padding-free batches"
    if getattr(args, "num_generations", None) and args.loss_type not in UNSHUFFLED_LOSSES:
        return f"loss_type {args.loss_type!r} normalises per micro-batch"
    if getattr(trainer, "aux_loss_enabled", False):
        return "the model adds an MoE auxiliary loss"
    text = trainer.model.config.get_text_config()
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return f"attention layers {sorted(kinds)}: only full attention shares a cache"
    return None
