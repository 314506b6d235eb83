"""An agent backed by the vLLM offline engine (optional extra: ``pip install vllm``, GPU).

vLLM applies the model's chat template itself (``LLM.chat``), generates the whole batch
at once, and is the fast path for evaluation and rollouts on a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from birdrl.agents.base import GenerationConfig
from birdrl.env.types import Message
from birdrl.errors import BirdrlError

__all__ = ["VLLMAgent", "VLLMUnavailable"]


class VLLMUnavailable(BirdrlError):
    """vLLM is not installed (or cannot start on this machine)."""


class VLLMAgent:
    """`Agent` over ``vllm.LLM``: `model` is a local model directory."""

    def __init__(
        self, model: str, generation: GenerationConfig | None = None, **engine_args: Any
    ) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise VLLMUnavailable(
                "the vLLM agent needs vLLM (a GPU build): pip install vllm"
            ) from exc
        self.name = f"vllm:{model}"
        self.generation = generation or GenerationConfig()
        self._llm = LLM(model=model, **engine_args)
        g = self.generation
        self._params = SamplingParams(
            max_tokens=g.max_new_tokens, temperature=g.temperature, top_p=g.top_p, seed=g.seed
        )

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        outputs = self._llm.chat(
            [list(c) for c in conversations],
            self._params,
            tools=list(tools) if tools else None,
            use_tqdm=False,
        )
        return [out.outputs[0].text for out in outputs]
