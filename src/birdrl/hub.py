"""How huggingface_hub is configured right now: offline or not, and where its cache is.

Read at call time rather than from huggingface_hub's constants alone, because those are
fixed when it is imported and a caller (or a test) may set the environment later. Shared by
hub models (`birdrl.agents.models`) and published task sets (`birdrl.tasks.published`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["hub_cache_dir", "hub_offline"]


def _is_true(value: str | None) -> bool:
    """huggingface_hub's reading of a boolean environment variable."""
    return value is not None and value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """Whether huggingface_hub is offline: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``)
    as it read them at import, or as the environment says now."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return bool(constants.HF_HUB_OFFLINE) or _is_true(env)


def hub_cache_dir() -> Path:
    """huggingface_hub's cache: ``$HF_HUB_CACHE`` as set now, else the directory it chose
    at import (``$HF_HOME/hub``, ``~/.cache/huggingface/hub``)."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE).expanduser()
