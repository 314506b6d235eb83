"""Waiting for an environment server's leases: a closed session releases its replica on
the server's side, after the client has returned."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from birdrl.serve.server import ServedEnv


def leased(served: ServedEnv, expected: int, timeout: float = 10.0) -> bool:
    """Wait until `served` holds `expected` leases; False if it still does not after
    `timeout` seconds."""
    assert served.service is not None
    deadline = time.monotonic() + timeout
    while served.service.stats()["leased"] != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
