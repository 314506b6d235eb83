"""PostgreSQL is optional: the core install imports and runs without psycopg, and asking for
PostgreSQL without it is a clear error naming the extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.dialects.postgres.server import PostgresServer, require_psycopg
from birdrl.errors import BirdrlError


def _hide_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name.split(".")[0] == "psycopg" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_psycopg_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_psycopg(monkeypatch)
    with pytest.raises(BirdrlError, match=r"birdrl\[postgresql\]"):
        require_psycopg()
    with pytest.raises(BirdrlError, match=r"birdrl\[postgresql\]"):
        PostgresServer("host=127.0.0.1").backend()
    result = CliRunner().invoke(app, ["eval", "--dialect", "postgresql", "--agent", "gold"])
    assert result.exit_code != 0
    assert "birdrl[postgresql]" in result.output


def test_core_modules_do_not_import_psycopg() -> None:
    code = (
        "import sys\n"
        "import birdrl.cli, birdrl.evaluation.evaluator, birdrl.evaluation.runner\n"
        "import birdrl.evaluation.dialects, birdrl.bench.run, birdrl.env.sqlact\n"
        "assert 'psycopg' not in sys.modules, sorted(m for m in sys.modules if 'psycopg' in m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
