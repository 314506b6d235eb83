"""Hub ids (``ORG/NAME``) resolve to the snapshot directory of huggingface_hub's cache before
any engine or trainer reads a config: `resolve_model`, `resolve_training_model` (and with
it a Qwen preset's model), and ``birdrl eval --agent hf:ORG/NAME``.

The cache is laid out as huggingface_hub lays it out (``models--ORG--NAME/refs/main``
holding a commit hash, ``blobs/`` holding the files, ``snapshots/<hash>/`` linking to them),
filled with the offline tiny-random model; ``HF_HUB_OFFLINE=1`` and the hub's API raises
if anything asks it, so nothing can come from the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("huggingface_hub", reason="hub ids need huggingface_hub (the `hf` extra)")
pytest.importorskip("trl", reason="the tiny model is built with the `train` extra")

from birdrl.agents.models import (  # noqa: E402
    HUB_MODEL_FILES,
    ModelNotFoundError,
    is_hub_id,
    model_label,
    resolve_model,
)
from birdrl.training.config import load_preset  # noqa: E402
from birdrl.training.models import resolve_training_model  # noqa: E402

REPO = "birdrl-test/tiny-chat"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lay_out(cache: Path, repo_id: str, model: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """Put the files of `model` into `cache` as huggingface_hub stores repo `repo_id` at
    commit `COMMIT` (content-addressed blobs, relative links); returns the snapshot."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)  # no newline, as the hub writes it
    for source in sorted(model.iterdir()):
        if not source.is_file() or source.name in skip:
            continue
        data = source.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / source.name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snapshot


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from birdrl.training.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_a_cached_hub_id_resolves_to_its_snapshot_offline(tiny: Path, offline_cache: Path) -> None:
    snapshot = lay_out(offline_cache, REPO, tiny)
    path = resolve_model(REPO)
    assert path == snapshot.resolve()
    assert json.loads((path / "config.json").read_text())["architectures"]
    assert model_label(REPO, path) == REPO  # not the commit hash the snapshot is named by


def test_an_uncached_hub_id_offline_names_the_cache_and_the_command(offline_cache: Path) -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_model("birdrl-test/absent")
    message = str(caught.value)
    assert str(offline_cache) in message and "HF_HUB_OFFLINE" in message
    assert "`hf download birdrl-test/absent`" in message


def test_a_snapshot_without_weights_is_refused(tiny: Path, offline_cache: Path) -> None:
    weights = tuple(p.name for p in tiny.glob("*.safetensors"))
    assert weights
    lay_out(offline_cache, REPO, tiny, skip=weights)
    with pytest.raises(ModelNotFoundError, match=r"no safetensors weights.*hf download"):
        resolve_model(REPO)


def test_a_local_directory_wins_over_a_hub_id(
    tiny: Path, offline_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lay_out(offline_cache, REPO, tiny)
    local = tmp_path / "work" / REPO
    local.mkdir(parents=True)
    (local / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path / "work")
    assert resolve_model(REPO) == Path(REPO)
    assert model_label(REPO, Path(REPO)) == "tiny-chat"


def test_hub_id_spelling() -> None:
    assert is_hub_id("Qwen/Qwen2.5-Coder-7B-Instruct") and is_hub_id("a/b")
    for spec in ("gpt2", "/abs/dir", "./rel/dir", "../up", "a/b/c", "a/../b", "~/m", "a/"):
        assert not is_hub_id(spec), spec
    with pytest.raises(ModelNotFoundError, match="no model directory"):
        resolve_model("./no/such")


def test_online_resolution_downloads_only_model_files(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Online, the snapshot is fetched (the hub itself faked: the one remote service) with
    the files a model needs and nothing else."""
    import huggingface_hub

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    asked: dict[str, Any] = {}

    def snapshot_download(repo_id: str, **kwargs: Any) -> str:
        asked.update(kwargs, repo_id=repo_id)
        return str(lay_out(cache, repo_id, tiny))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert resolve_model(REPO) == cache / f"models--{REPO.replace('/', '--')}/snapshots/{COMMIT}"
    assert asked["repo_id"] == REPO and asked["local_files_only"] is False
    assert Path(asked["cache_dir"]) == cache
    from fnmatch import fnmatch

    def fetched(name: str) -> bool:
        return any(fnmatch(name, pattern) for pattern in asked["allow_patterns"])

    assert asked["allow_patterns"] == list(HUB_MODEL_FILES)
    for name in ("config.json", "model-00001-of-00004.safetensors", "tokenizer.json",
                 "model.safetensors.index.json", "merges.txt", "generation_config.json"):  # fmt: skip
        assert fetched(name), name
    for name in ("pytorch_model.bin", "model.gguf", "README.md", "original/consolidated.pth"):
        assert not fetched(name), name


def test_a_qwen_presets_model_resolves_to_a_directory(tiny: Path, offline_cache: Path) -> None:
    """What a run does before its stage-0 evaluation: the preset's hub id becomes a local
    directory whose config.json the vLLM engine and the trainer can read."""
    config = load_preset("qwen2.5-coder-7b")
    assert config.model == "Qwen/Qwen2.5-Coder-7B-Instruct"
    snapshot = lay_out(offline_cache, config.model, tiny)
    model = resolve_training_model(config.model)
    assert isinstance(model, Path) and model.is_dir() and model == snapshot.resolve()
    assert (model / "config.json").is_file()


def test_eval_runs_an_hf_agent_named_by_a_cached_hub_id(tiny: Path, tmp_path: Path) -> None:
    """The command a user types, in a process of its own whose environment says offline
    and where the cache is. The tasks are on a one-table database: the bundled schemas do
    not fit the tiny model's 4096-token context."""
    cache = tmp_path / "hub"
    lay_out(cache, REPO, tiny)
    db_root = tmp_path / "dbs"
    db_root.mkdir()
    with sqlite3.connect(db_root / "users.sqlite") as conn:
        conn.executescript("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT);"
                           "INSERT INTO users(name) VALUES ('a'), ('b');")  # fmt: skip
    conn.close()
    tasks = tmp_path / "tasks.jsonl"
    records = [
        {"instance_id": f"u{i}", "db_id": "users", "query": "How many users are there?",
         "issue_sql": ["SELECT count(*) FROM user"], "sol_sql": ["SELECT count(*) FROM users"]}
        for i in range(2)
    ]  # fmt: skip
    tasks.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = tmp_path / "report.json"
    args = [
        "eval", "--tasks", str(tasks), "--db-root", str(db_root),
        "--agent", f"hf:{REPO}", "--max-new-tokens", "8", "--max-tool-calls", "1",
        "--concurrency", "2", "--workers", "1", "--json", str(report),
    ]  # fmt: skip
    script = f"from birdrl.cli import app\napp({args!r}, standalone_mode=False)\n"
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    episodes = json.loads(report.read_text(encoding="utf-8"))["episodes"]
    assert len(episodes) == 2
    assert all(e["turns"] and e["infra_error"] is None for e in episodes), episodes
    assert f"hf:{REPO}" in result.stdout
