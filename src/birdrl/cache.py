"""Where birdrl caches what it builds (bundled databases, prepared models)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """``$BIRDRL_CACHE`` if set, else ``$XDG_CACHE_HOME/birdrl`` (when absolute), else
    ``~/.cache/birdrl``. Not created here: callers create what they write."""
    if root := os.environ.get("BIRDRL_CACHE"):
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "birdrl"
    return Path.home() / ".cache" / "birdrl"
