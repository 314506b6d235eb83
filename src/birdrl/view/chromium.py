"""Headless Chromium for looking at the viewer the way a person does (tests, benchmarks):
the system browser (Debian's ``chromium``, or ``$BIRDRL_CHROMIUM``) driven by Playwright,
never a browser that Playwright downloads. The flags keep it off the network (a closed
network otherwise costs refused connections at every start) and allow running as root."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["CHROMIUM_FLAGS", "chromium_path", "missing_browser"]

CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium_path() -> Path:
    return Path(os.environ.get("BIRDRL_CHROMIUM", "/usr/bin/chromium"))


def missing_browser() -> str | None:
    """Why a headless browser cannot be launched here, or None when it can."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[test]')"
    if not chromium_path().is_file():
        return f"no Chromium at {chromium_path()} (apt-get install chromium chromium-driver)"
    return None
