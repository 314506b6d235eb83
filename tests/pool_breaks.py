"""A broken replica pool for meta-tests: a pool that forgets a replica changed, so a
contamination check that still passes with it cannot catch anything."""

from __future__ import annotations

from typing import Any

import pytest

from birdrl.db import ReplicaPool


def disable_change_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every `ReplicaPool` mark a released replica available without a reset."""

    def leaky_finish(self: Any, lease: Any, *, reclaimed: bool) -> None:
        lease.close_connection()
        with self._cond:  # forget the replica changed: never reset
            lease.replica.is_available = True
            self._cond.notify_all()

    monkeypatch.setattr(ReplicaPool, "_finish", leaky_finish)
