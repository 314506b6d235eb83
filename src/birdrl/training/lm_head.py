"""Per-token log-probabilities from a model's own logits, for the positions that are scored.

TRL's fused LM head (``add_fused_lm_head``) saves memory on a GPU, where Triton kernels
project only the scored positions. Elsewhere it projects every position of every row,
prompt included, and runs its tile loop (online log-sum-exp, entropy, recomputation in the
backward pass) as a dozen torch operations over each tile of the vocabulary: in a stage-4
step of the tiny preset on a 2-core CPU that was about a third of the step. On a CPU the
logits of the scored positions alone fit in memory (320 positions x 8 rows x 49,152 tokens
is 0.5 GB), and one ``log_softmax`` is several times faster, so the prefix-sharing passes
(`birdrl.training.prefix_sharing`) ask the model for just those logits (its own forward,
with its own scaling and soft-capping, and ``logits_to_keep``) and score them here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TokenScores", "plain_head_wanted", "score_tokens"]


def plain_head_wanted(device: Any) -> bool:
    """Whether to score through `score_tokens` rather than TRL's fused head: on a CPU,
    where the fused head has no kernel and projects every position."""
    return getattr(device, "type", str(device)) == "cpu"


@dataclass(frozen=True)
class TokenScores:
    """Per-token figures of the scored positions, 0 where `mask` is false."""

    log_probs: Any
    """log p(target), with the autograd graph of the logits."""
    entropy: Any | None
    """Entropy of each next-token distribution, when asked for."""
    is_top1: Any | None
    """Whether the target is the most likely token, when asked for."""


def score_tokens(
    logits: Any,
    targets: Any,
    mask: Any,
    temperature: float = 1.0,
    *,
    entropy: bool = False,
    entropy_grad: bool = False,
    top1: bool = False,
) -> TokenScores:
    """Score `targets` (``(rows, n)``) under `logits` (``(rows, n, vocab)``) divided by
    `temperature`, as TRL's fused head does; masked positions score 0. The entropy carries
    a gradient only with `entropy_grad` (TRL's entropy bonus trains on it)."""
    import torch

    z = logits.float() / temperature
    log_all = z.log_softmax(-1)
    keep = mask.bool()
    picked = log_all.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    log_probs = picked.masked_fill(~keep, 0.0)
    ent = top = None
    if entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = (-(log_all.exp() * log_all).sum(-1)).masked_fill(~keep, 0.0)
    if top1:
        top = (z.detach().argmax(-1) == targets) & keep
    return TokenScores(log_probs, ent, top)
