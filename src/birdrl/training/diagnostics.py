"""Learning-signal diagnostics: did a stage have anything to learn from, and did it move?

Every stage gets a `DiagnosticsCallback` (a transformers ``TrainerCallback``). At each
logged step it adds to the trainer's log entry (so to ``log_history``, the stage record
and the tensorboard logs):

* ``diag/weight_change``: ‖θ − θ₀‖ / ‖θ₀‖ since the stage started (`WeightTracker`);
* GRPO: ``diag/groups``, the number of GRPO groups (prompts) scored this step; TRL itself
  logs ``reward``, ``reward_std`` (across all completions of the step),
  ``frac_reward_zero_std`` (the share of groups whose completions all got the same reward:
  zero advantage, no gradient from them) and ``completions/clipped_ratio`` (the share of
  completions that hit ``max_completion_length``); these are reused, not recomputed;
* stage 4: ``episodes/*`` from the environment's `EpisodeStats` (episodes, valid tool calls
  and submissions per episode, the share of episodes with a tool call, solved per episode)
  next to TRL's ``tools/call_frequency`` (parsed tool calls per episode, failed ones
  included) and ``tools/failure_frequency``.

It warns as soon as a GRPO stage has had no signal (every group's rewards equal) for
``no_signal_steps`` consecutive steps. `summarize` turns a stage's ``log_history`` into
the per-stage summary kept in ``record.json`` and `verdicts` into the plain sentences of
the report ("all 24 groups had equal rewards: no gradient; weights unchanged").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "DEFAULT_NO_SIGNAL_STEPS",
    "DiagnosticsCallback",
    "WeightTracker",
    "diagnostics_callback",
    "summarize",
    "verdicts",
    "weight_note",
]

logger = logging.getLogger(__name__)

DEFAULT_NO_SIGNAL_STEPS = 3
"""Warn after this many consecutive GRPO steps in which every group had equal rewards."""
MAX_FULL_COPY = 2_000_000_000
"""Full fine-tuning: above this many trainable elements no CPU copy is kept (no figure)."""
WEIGHT_KEY = "diag/weight_change"
GROUPS_KEY = "diag/groups"
EPISODE_KEYS = (
    "episodes/count",
    "episodes/valid_tool_calls_per_episode",
    "episodes/submissions_per_episode",
    "episodes/with_tool_call",
    "episodes/looked_first",
    "episodes/solved_per_episode",
)


class WeightTracker:
    """‖θ − θ₀‖ / ‖θ₀‖ over the weights that train, θ₀ taken when the tracker is built.

    * Full fine-tuning: every parameter with ``requires_grad``; θ₀ is a CPU copy.
    * LoRA (peft): the *effective* weights of the adapted layers, W + s·B·A: the change is
      s·(B·A − B₀·A₀) and the norm is that of W + s·B₀·A₀ (frozen layers are left out);
      only the small A₀, B₀ are copied (on the adapters' device, where the products are
      computed). Other trainable parameters (``modules_to_save``)
      count as in full fine-tuning.

    `basis` says which of the two was measured; `change()` is None when nothing could be
    measured (sharded parameters, or more than `MAX_FULL_COPY` elements to copy)."""

    def __init__(self, model: Any) -> None:
        import torch

        self.basis = "full"
        self.skipped: str | None = None
        self._lora: list[tuple[Any, Any, float, Any, Any]] = []  # (A, B, scale, A0, B0)
        self._plain: list[tuple[Any, Any]] = []  # (param, CPU copy)
        norm2 = 0.0
        lora_params: set[int] = set()
        with torch.no_grad():
            for module in model.modules():
                a_dict = getattr(module, "lora_A", None)
                b_dict: Any = getattr(module, "lora_B", None)  # peft's ModuleDict, as lora_A
                if not isinstance(a_dict, torch.nn.ModuleDict) or not a_dict:
                    continue
                base = getattr(module, "base_layer", module)
                weight = getattr(base, "weight", None)
                if weight is None or weight.dim() != 2:
                    continue
                effective = weight.detach().float().clone()
                for name in a_dict:
                    a: Any = a_dict[name].weight  # a Parameter (torch types it Tensor | Module)
                    b: Any = b_dict[name].weight
                    if a.dim() != 2 or not a.requires_grad:
                        continue
                    scale = float(module.scaling[name])
                    a0, b0 = a.detach().float().clone(), b.detach().float().clone()  # small
                    delta = (b0 @ a0) * scale
                    if getattr(module, "fan_in_fan_out", False):
                        delta = delta.T
                    effective += delta.to(effective.device)
                    self._lora.append((a, b, scale, a0, b0))
                    lora_params.update((id(a), id(b)))
                norm2 += float(effective.norm() ** 2)
            plain = [p for p in model.parameters() if p.requires_grad and id(p) not in lora_params]
            if self._lora:
                self.basis = "lora-effective"
            total = sum(p.numel() for p in plain)
            if any(p.numel() == 0 for p in plain):
                self.skipped = "parameters are sharded across processes"
            elif total > MAX_FULL_COPY:
                self.skipped = f"{total:,} trainable elements: too many to keep a CPU copy"
            else:
                for p in plain:
                    copy = p.detach().float().cpu().clone()
                    norm2 += float(copy.norm() ** 2)
                    self._plain.append((p, copy))
        self._norm = math.sqrt(norm2)

    def check_tracked(self, model: Any) -> None:
        """Mark the measurement skipped when `model`'s parameters are no longer the tracked
        ones: FSDP2 replaces each parameter by a sharded DTensor when the trainer prepares
        the model, and the stale copies would read 0.0 (a false "weights unchanged")."""
        if self.skipped or not self._plain:
            return
        current = {id(p) for p in model.parameters()}
        if any(id(p) not in current for p, _ in self._plain):
            self.skipped = "parameters were replaced by sharded ones (FSDP)"

    def change(self) -> float | None:
        """‖θ − θ₀‖ / ‖θ₀‖ now (0.0: the weights did not move at all)."""
        import torch

        if self.skipped or self._norm == 0:
            return None
        total = 0.0
        with torch.no_grad():
            for a, b, scale, a0, b0 in self._lora:
                now = b.detach().float() @ a.detach().float()  # on the adapters' device
                total += float(((now - b0 @ a0) * scale).norm() ** 2)
            for p, copy in self._plain:
                total += float((p.detach().float().cpu() - copy).norm() ** 2)
        return math.sqrt(total) / self._norm


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite number (not a bool), else None."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


class DiagnosticsCallback:
    """Adds the diagnostics to each log entry and warns about GRPO steps without signal.

    Built by `diagnostics_callback` (which makes it a ``TrainerCallback``); `warn` receives
    each warning as one line (``warning: ...``)."""

    def __init__(
        self,
        stage: int,
        kind: str,
        tracker: WeightTracker | None,
        *,
        groups_per_step: int | None = None,
        episode_stats: Any = None,
        no_signal_steps: int = DEFAULT_NO_SIGNAL_STEPS,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.stage = stage
        self.kind = kind
        self.tracker = tracker
        self.groups_per_step = groups_per_step
        self.episode_stats = episode_stats
        self.no_signal_steps = max(1, no_signal_steps)
        self.warn = warn or logger.warning
        self.warnings: list[str] = []
        self._quiet_run = 0
        self._seen: dict[str, int] = {}
        """The episode counters at the last log (none before the first)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        model = kw.get("model")
        if self.tracker is not None and model is not None:  # prepared (sharded) by now
            self.tracker.check_tracked(model)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if not logs or "loss" not in logs:  # the end-of-training summary, evaluations
            return
        extra: dict[str, float] = {}
        if self.tracker is not None:
            change = self.tracker.change()
            if change is not None:
                extra[WEIGHT_KEY] = change
        if self.kind == "grpo":
            if self.groups_per_step:
                extra[GROUPS_KEY] = float(self.groups_per_step)
            extra.update(self._episodes())
        logs.update(extra)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(extra)  # Trainer.log appended a copy of `logs`
        if self.kind == "grpo":
            self._check_signal(state.global_step, logs)

    def _episodes(self) -> dict[str, float]:
        stats = self.episode_stats
        if stats is None:
            return {}
        looked = stats.explored()
        with stats.lock:
            now = {
                "episodes": stats.episodes,
                "tool_calls": stats.tool_calls,
                "submitted": stats.submitted,
                "solved": stats.solved,
                "with_tool": stats.with_tool_call,
                "looked": looked,
            }
        new = {k: now[k] - self._seen.get(k, 0) for k in now}
        self._seen = now
        n = new["episodes"]
        if n <= 0:
            return {}
        return {
            "episodes/count": float(n),
            "episodes/valid_tool_calls_per_episode": new["tool_calls"] / n,
            "episodes/submissions_per_episode": new["submitted"] / n,
            "episodes/with_tool_call": new["with_tool"] / n,
            "episodes/looked_first": new["looked"] / n,
            "episodes/solved_per_episode": new["solved"] / n,
        }

    def _check_signal(self, step: int, logs: Mapping[str, Any]) -> None:
        zero = finite_number(logs.get("frac_reward_zero_std"))
        if zero is None:
            return
        if zero < 1.0 - 1e-9:
            self._quiet_run = 0
            return
        self._quiet_run += 1
        if self._quiet_run != self.no_signal_steps:
            return
        reward = finite_number(logs.get("reward"))
        clipped = finite_number(logs.get("completions/clipped_ratio"))
        why = f"every completion got reward {reward:.3g}" if reward is not None else ""
        if clipped is not None and clipped >= 1.0 - 1e-9:
            why += ("; " if why else "") + "all completions hit max_completion_length"
        message = (
            f"warning: stage {self.stage} has had no learning signal for {self._quiet_run} "
            f"consecutive steps (to step {step}): within every group all rewards were equal, "
            "so every advantage is 0 and the policy gets no gradient"
            + (f" ({why})" if why else "")
            + "; see docs/training.md, 'Learning-signal diagnostics'"
        )
        self.warnings.append(message)
        self.warn(message)


def diagnostics_callback(
    trainer: Any,
    stage: int,
    kind: str,
    *,
    episode_stats: Any = None,
    no_signal_steps: int = DEFAULT_NO_SIGNAL_STEPS,
    warn: Callable[[str], None] | None = None,
) -> DiagnosticsCallback:
    """Build the callback for a constructed trainer (θ₀ is taken now, before training and
    before any checkpoint is loaded, so a resumed stage still measures from its start),
    add it first (so reporting callbacks such as tensorboard see its numbers) and return it."""
    from transformers import TrainerCallback

    groups = None
    if kind == "grpo":  # TRL's generation batch is global (all processes)
        args = trainer.args
        batch = getattr(args, "generation_batch_size", None) or (
            args.per_device_train_batch_size
            * args.gradient_accumulation_steps
            * max(1, getattr(args, "world_size", 1))
        )
        groups = max(1, batch // max(1, args.num_generations))

    class _Callback(DiagnosticsCallback, TrainerCallback):
        pass

    callback = _Callback(
        stage,
        kind,
        WeightTracker(trainer.model),
        groups_per_step=groups,
        episode_stats=episode_stats,
        no_signal_steps=no_signal_steps,
        warn=warn,
    )
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback


def weight_note(callback: DiagnosticsCallback) -> str:
    """The stage note saying over what the weight change was measured."""
    tracker = callback.tracker
    if tracker is None or tracker.skipped:
        why = tracker.skipped if tracker is not None else "no tracker"
        return f"weight change ‖Δθ‖/‖θ‖ not measured ({why})"
    if tracker.basis == "lora-effective":
        return (
            "weight change ‖Δθ‖/‖θ‖ measured over the effective (merged) weights W + s·B·A "
            "of the LoRA-adapted layers (frozen layers left out)"
        )
    return "weight change ‖Δθ‖/‖θ‖ measured over all trainable parameters (full fine-tuning)"


# -- per-stage summary ---------------------------------------------------------------------


def _values(log: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [v for v in (finite_number(e.get(key)) for e in log if "loss" in e) if v is not None]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _longest_run(flags: Sequence[bool]) -> int:
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def summarize(kind: str, log_history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stage's diagnostics from its ``log_history`` (the per-step numbers above);
    None where a figure was not logged."""
    steps = [e for e in log_history if "loss" in e]
    weights = _values(steps, WEIGHT_KEY)
    out: dict[str, Any] = {
        "steps": len(steps),
        "weight_change": weights[-1] if weights else None,
    }
    if kind != "grpo":
        losses = _values(steps, "loss")
        out.update(
            loss_first=losses[0] if losses else None, loss_last=losses[-1] if losses else None
        )
        return out
    rewards = _values(steps, "reward")
    zero = [
        (v, finite_number(e.get(GROUPS_KEY)))
        for e in steps
        if (v := finite_number(e.get("frac_reward_zero_std"))) is not None
    ]
    groups = [g for _, g in zero if g is not None]
    counted = len(groups) == len(zero) and bool(zero)
    out.update(
        reward_mean=_mean(rewards),
        reward_first=rewards[0] if rewards else None,
        reward_last=rewards[-1] if rewards else None,
        reward_std_mean=_mean(_values(steps, "reward_std")),
        no_signal_share=_mean([v for v, _ in zero]),
        groups=round(sum(groups)) if counted else None,
        groups_no_signal=round(sum(v * g for v, g in zero if g is not None)) if counted else None,
        steps_no_signal=sum(v >= 1.0 - 1e-9 for v, _ in zero),
        longest_no_signal_run=_longest_run([v >= 1.0 - 1e-9 for v, _ in zero]),
        truncated_share=_mean(_values(steps, "completions/clipped_ratio")),
        tool_calls_per_episode=_mean(_values(steps, "tools/call_frequency")),
        tool_failure_share=_mean(_values(steps, "tools/failure_frequency")),
    )
    counts = _values(steps, "episodes/count")
    if counts:
        n = sum(counts)

        def weighted(key: str) -> float | None:
            pairs = [
                (c, v)
                for e in steps
                if (c := finite_number(e.get("episodes/count")))
                and (v := finite_number(e.get(key))) is not None
            ]
            return sum(c * v for c, v in pairs) / n if pairs else None

        out.update(
            episodes=round(n),
            valid_tool_calls_per_episode=weighted("episodes/valid_tool_calls_per_episode"),
            submissions_per_episode=weighted("episodes/submissions_per_episode"),
            episodes_with_tool_call=weighted("episodes/with_tool_call"),
            episodes_looked_first=weighted("episodes/looked_first"),
            solved_per_episode=weighted("episodes/solved_per_episode"),
        )
    return out


def verdicts(kind: str, summary: Mapping[str, Any]) -> list[str]:
    """Plain sentences for what kept a stage from learning (empty when nothing did)."""
    out: list[str] = []
    change = finite_number(summary.get("weight_change"))
    unchanged = change == 0.0
    if kind == "grpo":
        groups, quiet = summary.get("groups"), summary.get("groups_no_signal")
        share = finite_number(summary.get("no_signal_share"))
        tail = "; weights unchanged" if unchanged else ""
        if share is not None and share >= 1.0 - 1e-9:
            what = f"all {groups} groups" if isinstance(groups, int) else "every group"
            reward = finite_number(summary.get("reward_mean"))
            value = (
                f" ({reward:.3g})"
                if reward is not None and finite_number(summary.get("reward_std_mean")) == 0
                else ""
            )
            out.append(f"{what} had equal rewards{value}: no gradient{tail}.")
        elif share is not None and share >= 0.5:
            what = (
                f"{quiet} of {groups} groups"
                if isinstance(groups, int)
                else f"{share:.0%} of groups"
            )
            out.append(f"{what} had equal rewards (no signal from them).")
        truncated = finite_number(summary.get("truncated_share"))
        if truncated is not None and truncated >= 1.0 - 1e-9:
            out.append("100% of completions were truncated at max_completion_length.")
        elif truncated is not None and truncated >= 0.5:
            out.append(f"{truncated:.0%} of completions were truncated at max_completion_length.")
        episodes = summary.get("episodes")
        if isinstance(episodes, int) and episodes > 0:
            calls = finite_number(summary.get("valid_tool_calls_per_episode"))
            subs = finite_number(summary.get("submissions_per_episode"))
            if calls == 0:
                out.append(f"none of {episodes} episodes made a valid tool call.")
            if subs == 0:
                out.append(f"none of {episodes} episodes submitted a solution.")
        if unchanged and not any("weights unchanged" in s for s in out):
            out.append("weights unchanged.")
    elif unchanged:
        out.append("weights unchanged: no optimizer step moved them.")
    return [s[0].upper() + s[1:] for s in out]
