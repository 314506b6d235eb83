"""`birdrl data get` and ``hf:``: the published benchmarks from huggingface_hub's cache.

The cache is laid out as huggingface_hub lays out a dataset repository
(``datasets--ORG--NAME/refs/main`` holding a commit hash, ``blobs/`` holding the files by
content hash, ``snapshots/<hash>/...`` linking to them), with records in the published
shapes (BIRD-CRITIC-SQLite's public fields, SIX-GYM-SQLite's with ``sol_sql`` and
``test_cases``) and real SQLite databases in the published layouts. ``HF_HUB_OFFLINE=1`` and
the hub's API raises if anything asks it; the online path fakes only ``snapshot_download``,
the one remote service.
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
from typer.testing import CliRunner

pytest.importorskip("huggingface_hub", reason="data get needs huggingface_hub")

from birdrl.cli import app  # noqa: E402
from birdrl.tasks import TaskFormatError, load_tasks, resolve_databases  # noqa: E402
from birdrl.tasks.published import (  # noqa: E402
    CATALOG,
    PublishedDataError,
    fetch_published,
    published_set,
)

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
SIX = "birdsql/six-gym-sqlite"
CRITIC = "birdsql/bird-critic-1.0-sqlite"
TEST_CASE = (  # the official SQLite evaluator's signature, as the bundled tasks write it
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
    "    result = ex_base(pred_sqls, sol_sqls, db_path, conn, conditions)\n"
    '    assert result == 1, f"ex_base returned {result}"\n'
)


def public_record(i: int, db_id: str, prefix: str = "SQLite") -> dict[str, Any]:
    """A task as BIRD-CRITIC-SQLite publishes it: no sol_sql, no test_cases."""
    return {
        "instance_id": f"{prefix}_{i}",
        "db_id": db_id,
        "dialect": "SQLite",
        "version": "3",
        "category": "Query",
        "query": f"Why does my count of {db_id} rows come out wrong? ({i})",
        "issue_sql": ["SELECT count(id) FROM items WHERE id > 100"],
        "preprocess_sql": [],
        "clean_up_sql": [],
    }


def training_record(i: int, db_id: str) -> dict[str, Any]:
    """A task as SIX-GYM-SQLite publishes it: with its solution and tests."""
    return {
        **public_record(i, db_id, prefix="TRAIN"),
        "sol_sql": ["SELECT count(id) FROM items"],
        "test_cases": [TEST_CASE],
    }


def sqlite_bytes(tmp: Path, name: str) -> bytes:
    path = tmp / f"{name}.build.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"x{i}") for i in range(5)])
    conn.close()
    return path.read_bytes()


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def lay_out_dataset(cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """Store `files` (repository path -> content) in `cache` as huggingface_hub stores
    dataset `repo_id` at commit `COMMIT`; returns the snapshot folder."""
    repo = cache / f"datasets--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)  # no newline, as the hub writes it
    for relative, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(os.path.relpath(blob, link.parent)))
    return snapshot


def six_gym_files(tmp: Path, dbs: tuple[str, ...] = ("books", "hockey")) -> dict[str, bytes]:
    records = [training_record(i, dbs[i % len(dbs)]) for i in range(4)]
    files = {"train.jsonl": jsonl(records), "README.md": b"---\nlicense: cc-by-sa-4.0\n---\n"}
    for db in dbs:
        files[f"database/{db}/{db}_template.sqlite"] = sqlite_bytes(tmp, db)
    return files


def test_six_gym_is_laid_out_from_the_cache_and_loads_offline(
    offline_cache: Path, tmp_path: Path
) -> None:
    snapshot = lay_out_dataset(offline_cache, SIX, six_gym_files(tmp_path))
    got = fetch_published("six-gym-sqlite", tmp_path / "data")
    folder = tmp_path / "data" / "six-gym-sqlite"
    assert got.folder == folder and got.snapshot == snapshot and got.linked
    assert got.task_files == (folder / "train.jsonl",)
    assert (folder / "train.jsonl").is_symlink()
    assert not (folder / "README.md").exists()  # only the catalog's task and database files
    assert got.db_root == folder / "database"
    assert got.tasks == 4 and got.db_ids == ("books", "hockey")
    assert got.dialects == {"SQLite": 4} and got.missing_withheld == 0 and not got.notes
    loaded = load_tasks(got.task_files[0])
    assert [t.instance_id for t in loaded] == ["TRAIN_0", "TRAIN_1", "TRAIN_2", "TRAIN_3"]
    assert all(t.sol_sql and t.test_cases for t in loaded)
    databases = resolve_databases(loaded, got.db_root)
    assert databases["books"] == folder / "database/books/books_template.sqlite"
    with sqlite3.connect(f"file:{databases['hockey']}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM items").fetchone() == (5,)
    conn.close()
    assert got.next_commands() == [
        f"birdrl tasks validate {folder / 'train.jsonl'} --db-root {folder / 'database'} "
        "--dialect sqlite"
    ]


def test_the_public_critic_file_says_what_is_withheld_and_what_to_run(
    offline_cache: Path, tmp_path: Path
) -> None:
    records = [public_record(0, "financial"), public_record(1, "card_games")]
    files = {"sqlite-00000-of-00001.jsonl": jsonl(records)}
    # the repository's folder for them is not confirmed: one nested, one flat, anywhere
    files["db/financial/financial_template.sqlite"] = sqlite_bytes(tmp_path, "financial")
    files["db/card_games.sqlite"] = sqlite_bytes(tmp_path, "card_games")
    lay_out_dataset(offline_cache, CRITIC, files)
    got = fetch_published("bird-critic-sqlite", tmp_path / "data", copy=True)
    folder = tmp_path / "data" / "bird-critic-sqlite"
    task_file = folder / "sqlite-00000-of-00001.jsonl"
    assert got.task_files == (task_file,) and not task_file.is_symlink() and not got.linked
    assert got.db_root == folder  # known before fetching: a preset can name it
    assert got.missing_withheld == 2
    assert "sol_sql and test_cases withheld in 2 of 2 tasks" in got.notes[0]
    assert "bird.bench25@gmail.com" in got.notes[0]
    loaded = load_tasks(task_file)
    assert [t.instance_id for t in loaded] == ["SQLite_0", "SQLite_1"]
    assert not any(t.sol_sql or t.test_cases for t in loaded)
    assert resolve_databases(loaded, got.db_root) == {
        "financial": folder / "financial/financial_template.sqlite",
        "card_games": folder / "card_games.sqlite",
    }
    root = folder
    assert got.next_commands() == [
        f"birdrl eval --agent AGENT --tasks {task_file} --db-root {root} "
        "--export-predictions preds.jsonl",
        f"birdrl tasks merge-ground-truth {task_file} GROUND_TRUTH.jsonl --out merged.jsonl",
        f"birdrl eval --predictions preds.jsonl --tasks merged.jsonl --db-root {root}",
    ]


def test_an_uncached_set_offline_names_the_repo_the_cache_and_the_command(
    offline_cache: Path, tmp_path: Path
) -> None:
    with pytest.raises(PublishedDataError) as caught:
        fetch_published("six-gym-sqlite", tmp_path / "data")
    message = str(caught.value)
    assert SIX in message and str(offline_cache) in message and "HF_HUB_OFFLINE" in message
    assert "train.jsonl" in message and "database/*/*_template.sqlite" in message
    assert "`birdrl data get six-gym-sqlite`" in message
    assert f"`hf download {SIX} --repo-type dataset`" in message
    assert not (tmp_path / "data").exists()


def test_a_partial_snapshot_names_the_missing_databases(
    offline_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = six_gym_files(tmp_path)
    del files["database/hockey/hockey_template.sqlite"]
    lay_out_dataset(offline_cache, SIX, files)
    with pytest.raises(PublishedDataError, match=r"1 of the 2 databases of birdsql/six-gym-sqlite"):
        fetch_published("six-gym-sqlite", tmp_path / "data")
    del files["train.jsonl"]
    other = offline_cache.parent / "hub2"
    lay_out_dataset(other, SIX, files)
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    with pytest.raises(PublishedDataError, match=r"holds no task file matching train\.jsonl"):
        fetch_published("six-gym-sqlite", tmp_path / "data")


def test_getting_again_follows_a_new_snapshot(offline_cache: Path, tmp_path: Path) -> None:
    lay_out_dataset(offline_cache, SIX, six_gym_files(tmp_path))
    fetch_published("six-gym-sqlite", tmp_path / "data")
    again = fetch_published("six-gym-sqlite", tmp_path / "data")  # links replaced, not refused
    assert load_tasks(again.task_files[0]).tasks


def test_online_asks_the_hub_for_the_catalog_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    asked: dict[str, Any] = {}

    def snapshot_download(repo_id: str, **kwargs: Any) -> str:
        asked.update(kwargs, repo_id=repo_id)
        return str(lay_out_dataset(cache, repo_id, six_gym_files(tmp_path)))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    got = fetch_published("six-gym-sqlite", tmp_path / "data")
    assert got.tasks == 4
    assert asked["repo_id"] == SIX and asked["repo_type"] == "dataset"
    assert asked["local_files_only"] is False and Path(asked["cache_dir"]) == cache
    assert asked["allow_patterns"] == ["train.jsonl", "database/*/*_template.sqlite"]


def test_bird_dev_is_not_on_the_hub_and_is_found_once_unpacked(tmp_path: Path) -> None:
    dest = tmp_path / "data"
    with pytest.raises(PublishedDataError) as caught:
        fetch_published("bird-dev", dest)
    message = str(caught.value)
    assert "not on the Hugging Face hub" in message
    assert "https://bird-bench.oss-cn-beijing.aliyuncs.com/dev.zip" in message
    assert f"{dest}/bird-dev/" in message and "dev_databases.zip" in message
    unpacked = dest / "bird-dev" / "dev"  # the folder name inside the zip is not assumed
    unpacked.mkdir(parents=True)
    question = {"question_id": 0, "db_id": "shop", "question": "How many items?"}
    (unpacked / "dev.json").write_text(json.dumps([{**question, "SQL": "SELECT 1"}]))
    with pytest.raises(PublishedDataError, match=r"no \*_databases/ folder"):
        fetch_published("bird-dev", dest)
    (unpacked / "dev_databases" / "shop").mkdir(parents=True)
    (unpacked / "dev_databases" / "shop" / "shop.sqlite").write_bytes(sqlite_bytes(tmp_path, "s"))
    got = fetch_published("bird-dev", dest)
    assert got.task_files == (unpacked / "dev.json",) and got.db_root == unpacked
    assert got.snapshot is None and got.db_ids == ("shop",)
    assert got.next_commands() == [
        f"birdrl curriculum --dry-run --set text2sql_tasks={unpacked / 'dev.json'} "
        f"--set text2sql_db_root={unpacked}"
    ]
    loaded = load_tasks(got.task_files[0])
    assert resolve_databases(loaded, got.db_root) == {
        "shop": unpacked / "dev_databases/shop/shop.sqlite"
    }


def test_sets_whose_databases_are_elsewhere_say_where(offline_cache: Path, tmp_path: Path) -> None:
    record = {**public_record(0, "financial", prefix="PG"), "dialect": "PostgreSQL"}
    lay_out_dataset(
        offline_cache, "birdsql/bird-critic-1.0-flash-exp",
        {"data/flash-00000-of-00001.jsonl": jsonl([record])},
    )  # fmt: skip
    got = fetch_published("bird-critic-flash", tmp_path / "data")
    assert got.db_root is None and got.dialects == {"PostgreSQL": 1}
    assert any("drive.google.com" in note for note in got.notes)
    assert got.next_commands()[0].startswith("birdrl eval --agent AGENT --tasks ")
    assert "--dialect postgresql --pg-dsn DSN" in got.next_commands()[0]


def test_the_catalog_names_its_sources_honestly() -> None:
    assert published_set("SIX-GYM-SQLITE") is CATALOG["six-gym-sqlite"]
    for spec in CATALOG.values():
        assert spec.tasks and spec.dialect in {"sqlite", "postgresql", "mixed"}
        assert spec.databases or spec.databases_elsewhere, spec.name
        assert not spec.withheld or spec.ground_truth, spec.name
    with pytest.raises(PublishedDataError, match="known: bird-critic-sqlite"):
        published_set("bird-critic-sqlite-2")


def test_cli_get_prints_the_files_and_the_next_command(offline_cache: Path, tmp_path: Path) -> None:
    lay_out_dataset(offline_cache, SIX, six_gym_files(tmp_path))
    dest = tmp_path / "data"
    result = CliRunner().invoke(app, ["data", "get", "six-gym-sqlite", "--dir", str(dest)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"tasks: {dest / 'six-gym-sqlite' / 'train.jsonl'} (4 tasks)" in text
    assert f"databases: {dest / 'six-gym-sqlite' / 'database'} (2 databases)" in text
    assert "birdrl tasks validate " in text
    refused = CliRunner().invoke(app, ["data", "get", "nope", "--dir", str(dest)])
    assert refused.exit_code == 1
    assert refused.output.startswith("error: no published set named 'nope'; known: ")


# --- hf: -------------------------------------------------------------------------------


def dataset_folder(root: Path, splits: dict[str, list[dict[str, Any]]]) -> Path:
    """A dataset as the published cards lay theirs out: ``data/<split>-00000-of-00001.jsonl``,
    from which ``datasets`` names the splits."""
    for split, records in splits.items():
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "data" / f"{split}-00000-of-00001.jsonl").write_bytes(jsonl(records))
    return root


def test_hf_takes_the_only_split_and_names_them_when_there_are_several(tmp_path: Path) -> None:
    pytest.importorskip("datasets", reason="hf: needs the `datasets` extra")
    one = dataset_folder(tmp_path / "flash", {"flash": [public_record(0, "shop")]})
    assert [t.instance_id for t in load_tasks(f"hf:{one}")] == ["SQLite_0"]  # not "train"
    two = dataset_folder(
        tmp_path / "open", {"flash": [public_record(0, "shop")], "open": [public_record(1, "x")]}
    )
    with pytest.raises(
        TaskFormatError, match=r"has the splits (flash, open|open, flash); name one"
    ):
        load_tasks(f"hf:{two}")
    assert [t.instance_id for t in load_tasks(f"hf:{two}:open")] == ["SQLite_1"]


def test_hf_offline_says_the_cache_cannot_give_it(tmp_path: Path) -> None:
    """In a process where HF_HUB_OFFLINE=1 was set before ``datasets`` was imported."""
    pytest.importorskip("datasets", reason="hf: needs the `datasets` extra")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_CACHE", None)
    code = (
        "from birdrl.tasks import load_tasks\n"
        "try:\n    load_tasks('hf:birdsql/not-cached-anywhere')\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.startswith("TaskFormatError hf:birdsql/not-cached-anywhere: "), out
    assert "HF_HUB_OFFLINE is set" in out.stdout and "`birdrl data get`" in out.stdout


def test_the_paper_preset_names_the_roots_data_get_lays_out(
    offline_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``birdrl data get NAME --dir data`` leaves each source where paper-sqlite looks."""
    from birdrl.training.config import load_preset

    lay_out_dataset(offline_cache, SIX, six_gym_files(tmp_path))
    critic = {"sqlite-00000-of-00001.jsonl": jsonl([public_record(0, "financial")])}
    critic["dbs/financial/financial_template.sqlite"] = sqlite_bytes(tmp_path, "financial")
    lay_out_dataset(offline_cache, CRITIC, critic)
    train = tmp_path / "work" / "data" / "bird-train" / "train"  # train.zip's folder
    (train / "train_databases" / "shop").mkdir(parents=True)
    (train / "train_databases" / "shop" / "shop.sqlite").write_bytes(sqlite_bytes(tmp_path, "s"))
    bird = [{"db_id": "shop", "question": "How many items?", "evidence": "", "SQL": "SELECT 1"}]
    (train / "train.json").write_text(json.dumps(bird))
    monkeypatch.chdir(tmp_path / "work")
    got = {name: fetch_published(name, "data") for name in CATALOG if name in
           ("six-gym-sqlite", "bird-critic-sqlite", "bird-train")}  # fmt: skip
    preset = load_preset("paper-sqlite")
    assert Path(preset.tasks) == got["six-gym-sqlite"].task_files[0]
    assert Path(preset.db_root or "") == got["six-gym-sqlite"].db_root
    assert Path(preset.eval_db_root or "") == got["bird-critic-sqlite"].db_root
    assert Path(preset.text2sql_tasks or "") == got["bird-train"].task_files[0]
    assert Path(preset.text2sql_db_root or "") == got["bird-train"].db_root
