"""The vLLM agent: a clear error without vLLM; a real run where vLLM (and a GPU) exist."""

from __future__ import annotations

import importlib.util

import pytest

from birdrl.agents.vllm_agent import VLLMAgent, VLLMUnavailable


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_missing_vllm_is_a_clear_error() -> None:
    with pytest.raises(VLLMUnavailable, match="pip install vllm"):
        VLLMAgent("/nonexistent/model")


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM not installed (optional extra, needs a GPU)",
)
def test_vllm_generates(tmp_path) -> None:  # pragma: no cover - GPU machines only
    from birdrl.agents.models import resolve_model

    agent = VLLMAgent(str(resolve_model("embedded")), gpu_memory_utilization=0.3)
    (text,) = agent.generate([[{"role": "user", "content": "Say hi."}]])
    assert isinstance(text, str)
