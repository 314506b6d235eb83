"""A local Hugging Face causal LM as an `Agent`: chat template (`birdrl.agents.chat`),
left-padded batches, greedy or seeded sampling, and the tool-call text protocol.

torch and transformers are imported when an agent is built, not when this module is:
``import birdrl.agents.hf`` works on the core install and the constructor raises
`MissingDependencyError` with the install command.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from birdrl.agents.base import GenerationConfig
from birdrl.agents.chat import ChatFormat, context_length_of, fallback_tool_messages
from birdrl.agents.models import ModelError, model_label, require_hf, resolve_model
from birdrl.env.types import Message

__all__ = ["ContextOverflowError", "HFAgent", "fallback_tool_messages"]

_DTYPES = ("auto", "float32", "bfloat16", "float16")


class ContextOverflowError(ModelError):
    """A prompt does not fit the model's context window."""


class HFAgent:
    """An `Agent` backed by a local Hugging Face causal LM.

    `model` is a spec `resolve_model` accepts: a local model directory, ``"embedded"`` or a
    hub id ``ORG/NAME`` (its snapshot in huggingface_hub's cache).
    `device` is ``"auto"`` (cuda when available, else cpu) or a torch device string;
    `dtype` is ``"auto"`` (the checkpoint's own dtype) or one of float32, bfloat16,
    float16. Conversations are generated `batch_size` at a time.
    """

    name: str

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        generation: GenerationConfig | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        name: str | None = None,
    ) -> None:
        require_hf("torch", "transformers")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in _DTYPES:
            raise ModelError(f"dtype must be one of {', '.join(_DTYPES)}, not {dtype!r}")
        path = resolve_model(model)
        resolved_device = _pick_device(device)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            lm = AutoModelForCausalLM.from_pretrained(
                str(path), dtype="auto" if dtype == "auto" else getattr(torch, dtype)
            )
        except (OSError, ValueError, ImportError) as exc:
            raise ModelError(f"cannot load the model in {path}: {exc}") from exc
        lm.to(resolved_device)
        self._setup(lm, tokenizer, generation, batch_size, name or f"hf:{model_label(model, path)}")
        self.path: Path | None = path

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        generation: GenerationConfig | None = None,
        batch_size: int = 8,
        name: str = "hf:in-memory",
    ) -> HFAgent:
        """An agent around a model and tokenizer already in memory (a trainer's policy).
        The model stays on its device and in its dtype."""
        require_hf("torch", "transformers")
        agent = cls.__new__(cls)
        agent._setup(model, tokenizer, generation, batch_size, name)
        agent.path = None
        return agent

    def _setup(
        self,
        model: Any,
        tokenizer: Any,
        generation: GenerationConfig | None,
        batch_size: int,
        name: str,
    ) -> None:
        import torch

        if batch_size < 1:
            raise ModelError(f"batch_size must be at least 1, not {batch_size}")
        if getattr(tokenizer, "chat_template", None) is None:
            raise ModelError(
                f"the tokenizer of {name} has no chat template; use an instruct/chat model"
            )
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.generation = generation or GenerationConfig()
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.chat = ChatFormat(tokenizer)
        self._rng: torch.Generator | None = None
        if self.generation.seed is not None:
            self._rng = torch.Generator().manual_seed(self.generation.seed)

    @property
    def context_length(self) -> int | None:
        """The model's context window (``max_position_embeddings``), if its config says."""
        return context_length_of(self.model.config)

    @property
    def native_tools(self) -> bool:
        """Whether the chat template renders tools itself (else the fallback is used)."""
        return self.chat.native_tools

    def render(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text the model sees for `messages`, ending with the assistant header."""
        return self.chat.render(messages, tools)

    def count_tokens(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> int:
        """Length in tokens of the chat-templated prompt (what `generate` feeds the model)."""
        return len(self.chat.prompt_ids(messages, tools))

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """One assistant text per conversation, in order (new tokens only, special tokens
        skipped). Raises `ContextOverflowError` when a prompt fills the context window."""
        prompts = [self.chat.prompt_ids(c, tools) for c in conversations]
        limit = self.context_length
        for i, ids in enumerate(prompts):
            if limit is not None and len(ids) >= limit:
                raise ContextOverflowError(
                    f"conversation {i} is {len(ids)} tokens, which fills {self.name}'s "
                    f"context of {limit} tokens"
                )
        # Similar lengths together: less padding. Results go back in input order.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[str] = [""] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            texts = self._generate_batch([prompts[i] for i in chunk])
            for i, text in zip(chunk, texts, strict=True):
                out[i] = text
        return out

    def _generate_batch(self, prompts: list[list[int]]) -> list[str]:
        import torch

        cfg = self.generation
        width = max(len(p) for p in prompts)
        pad = int(self.tokenizer.pad_token_id)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):  # left padding
            if ids:
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention[row, width - len(ids) :] = 1
        max_new = cfg.max_new_tokens
        if self.context_length is not None:
            max_new = max(1, min(max_new, self.context_length - width))
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": attention.to(self.device),
            "max_new_tokens": max_new,
            "pad_token_id": pad,
        }
        if cfg.temperature > 0:
            kwargs.update(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            if self._rng is not None and cfg.temperature > 0:
                # A fresh seed per batch, drawn from the agent's own generator: reproducible
                # across runs, different across calls, and the global RNG is left as it was.
                seed = int(torch.randint(0, 2**62, (1,), generator=self._rng))
                devices = [self.device] if self.device.type == "cuda" else []
                with torch.random.fork_rng(devices=devices):
                    torch.manual_seed(seed)
                    output = self.model.generate(**kwargs)
            else:
                output = self.model.generate(**kwargs)
        new_tokens = output[:, width:]
        return [str(t) for t in self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]


def _pick_device(device: str) -> Any:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as exc:
        raise ModelError(f"unknown device {device!r}: {exc}") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} asked for, but torch sees no CUDA device")
    return resolved
