"""A database root per task source, and the paper-sqlite preset on data in the published
shapes and layouts: SIX-GYM-SQLite training tasks on ``{db}/{db}_template.sqlite``,
BIRD-CRITIC-SQLite tasks (public fields plus the merged ground truth) on ``{db}/{db}.sqlite``
and ``{db}.sqlite``, BIRD's text-to-SQL ``train.json`` (a JSON array, as published) on
``train_databases/{db}/{db}.sqlite``. Resolved through ``birdrl curriculum --dry-run`` from
a temporary working directory, as a researcher runs it; no network."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.tasks.benchmark import Benchmark
from birdrl.tasks.load import LoadedTasks, MissingDatabaseError, load_tasks
from birdrl.tasks.model import TextToSQLTask
from birdrl.training.config import (
    ConfigError,
    CurriculumConfig,
    apply_overrides,
    config_to_dict,
    load_preset,
)
from birdrl.training.sources import (
    RunSource,
    check_mixable,
    eval_source,
    run_sources,
    split_sources,
    text2sql_source,
    training_source,
)

TEST_CASE = (  # the official SQLite evaluator's signature, as the bundled tasks write it
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
    "    result = ex_base(pred_sqls, sol_sqls, db_path, conn, conditions)\n"
    '    assert result == 1, f"ex_base returned {result}"\n'
)


def make_db(path: Path, table: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE {table}(id INTEGER PRIMARY KEY, name TEXT, amount REAL)")
        conn.executemany(
            f"INSERT INTO {table}(name, amount) VALUES (?, ?)", [("a", 1.5), ("b", 2.0)]
        )
    conn.close()
    return path


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def six_gym(n: int, db_id: str) -> dict:
    """A SIX-GYM-SQLite training task: BIRD-CRITIC's fields with its solution and tests."""
    return {
        "instance_id": f"SQLite_{n}",
        "db_id": db_id,
        "dialect": "SQLite",
        "version": "3",
        "category": "Query",
        "query": f"My total over {db_id} is wrong ({n}).",
        "issue_sql": [f"SELECT sum(amount) FROM {db_id}_t WHERE id > {n}"],
        "preprocess_sql": [],
        "clean_up_sql": [],
        "sol_sql": [f"SELECT total(amount) FROM {db_id}_t WHERE id > {n}"],
        "test_cases": [TEST_CASE],
    }


def bird_critic(n: int, db_id: str) -> dict:
    """A BIRD-CRITIC-SQLite task: the public fields, then sol_sql and test_cases merged in
    by instance_id (the authors send them on request)."""
    public = {
        "instance_id": f"SQLite_{n}",
        "db_id": db_id,
        "dialect": "SQLite",
        "version": "SQLite 3.45",
        "category": "Query",
        "query": f"Why does my query on {db_id} return nothing? ({n})",
        "issue_sql": [f"SELECT name FROM {db_id}_t WHERE amount = '1.5' AND id > {n - 100}"],
        "preprocess_sql": [],
        "clean_up_sql": [],
    }
    return {
        **public,
        "sol_sql": [f"SELECT name FROM {db_id}_t WHERE amount = 1.5 AND id > {n - 100}"],
        "test_cases": [TEST_CASE],
    }


def bird_text2sql(n: int, db_id: str) -> dict:
    """A question of BIRD's train.json, as published (no question_id there)."""
    return {
        "db_id": db_id,
        "question": f"How many rows does {db_id} hold? ({n})",
        "evidence": "a row is one record",
        "SQL": f"SELECT count(*) FROM {db_id}_t",
    }


@pytest.fixture
def public_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``data/`` as the paper-sqlite preset reads it, in a temporary working directory."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    gym, critic, bird = data / "six-gym-sqlite", data / "bird-critic-sqlite", data / "bird-train"
    for db in ("debit_card", "works_cycles"):  # SIX-GYM: database/<db>/<db>_template.sqlite
        make_db(gym / "database" / db / f"{db}_template.sqlite", f"{db}_t")
    write_jsonl(
        gym / "train.jsonl", [six_gym(i, ("debit_card", "works_cycles")[i % 2]) for i in range(6)]
    )
    make_db(critic / "financial" / "financial.sqlite", "financial_t")  # {db}/{db}.sqlite
    make_db(critic / "formula_1.sqlite", "formula_1_t")  # flat {db}.sqlite
    write_jsonl(
        critic / "merged.jsonl",
        [bird_critic(i, ("financial", "formula_1")[i % 2]) for i in range(4)],
    )
    for db in ("movie_platform", "books"):  # BIRD: train/train_databases/<db>/<db>.sqlite
        make_db(bird / "train" / "train_databases" / db / f"{db}.sqlite", f"{db}_t")
    questions = [bird_text2sql(i, ("movie_platform", "books")[i % 2]) for i in range(5)]
    (bird / "train" / "train.json").write_text(json.dumps(questions, indent=1), encoding="utf-8")
    return data


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, " ".join(result.output.split())


def test_bird_train_json_loads_unchanged(public_data: Path) -> None:
    loaded = load_tasks(public_data / "bird-train" / "train" / "train.json")
    assert len(loaded) == 5 and all(isinstance(t, TextToSQLTask) for t in loaded)
    first = loaded.tasks[0]
    assert isinstance(first, TextToSQLTask)
    assert (first.db_id, first.sql, first.evidence) == (
        "movie_platform",
        "SELECT count(*) FROM movie_platform_t",
        "a row is one record",
    )


def test_paper_preset_dry_run_resolves_every_source_and_its_databases(public_data: Path) -> None:
    code, out = invoke("curriculum", "--preset", "paper-sqlite", "--dry-run")
    assert code == 0, out
    assert (
        "tasks (training): data/six-gym-sqlite/train.jsonl: 6 tasks on 2 databases from "
        "db_root = data/six-gym-sqlite/database" in out
    )
    assert (
        "eval_tasks (held-out): data/bird-critic-sqlite/merged.jsonl: 4 tasks on 2 databases "
        "from eval_db_root = data/bird-critic-sqlite" in out
    )
    assert (
        "text2sql_tasks (text-to-SQL): data/bird-train/train/train.json: 5 tasks on 2 "
        "databases from text2sql_db_root = data/bird-train/train" in out
    )
    # the distributed plan counts the training databases only (what stage 4 leases)
    assert "2 databases" in out and "run directory: runs/paper-sqlite" in out


def test_a_missing_database_names_the_source_its_root_and_the_layouts(public_data: Path) -> None:
    (public_data / "bird-critic-sqlite" / "formula_1.sqlite").unlink()
    code, out = invoke("curriculum", "--preset", "paper-sqlite", "--dry-run")
    assert code == 1
    assert out.startswith(
        "error: eval_tasks = 'data/bird-critic-sqlite/merged.jsonl', databases from "
        "eval_db_root = 'data/bird-critic-sqlite': "
    ), out
    assert "no database for 'formula_1'" in out and "formula_1/formula_1_template.sqlite" in out
    # one root for everything (before: the only choice) cannot hold the three sets' layouts
    code, out = invoke(
        "curriculum", "--preset", "paper-sqlite", "--dry-run",
        "--set", "eval_db_root=data/six-gym-sqlite/database",
    )  # fmt: skip
    assert code == 1 and "no database for 'financial'" in out


def test_bundled_text2sql_keeps_its_own_databases_beside_a_users_root(public_data: Path) -> None:
    """The GPU presets' 3:1 mix from bundled:text2sql-train on the user's own training data:
    its databases come from the bundled cache, not from db_root (before: "no database for
    'chinook'" under the user's root)."""
    config = apply_overrides(
        load_preset("qwen2.5-coder-7b"),
        [
            "tasks='data/six-gym-sqlite/train.jsonl'",
            "db_root='data/six-gym-sqlite/database'",
            "eval_tasks='data/bird-critic-sqlite/merged.jsonl'",
            "eval_db_root='data/bird-critic-sqlite'",
        ],
    )
    text2sql = text2sql_source(config)
    assert text2sql == RunSource(
        "text2sql_tasks", "bundled:text2sql-train", None, None, "text-to-SQL"
    )
    bench = text2sql.open()
    assert "chinook" in bench.databases and not str(bench.databases["chinook"]).startswith(
        str(public_data)
    )
    assert [s.setting for s in run_sources(config)] == ["tasks", "eval_tasks", "text2sql_tasks"]
    train = training_source(config, config.tasks).open()
    check_mixable(training_source(config, config.tasks), train, bench)  # no shared db_id


def test_a_joined_source_opens_each_part_on_its_own_databases(public_data: Path) -> None:
    config = apply_overrides(
        load_preset("tiny"),
        ["stage4.tasks='bundled:train-explore+data/six-gym-sqlite/train.jsonl'",
         "db_root='data/six-gym-sqlite/database'"],
    )  # fmt: skip
    source = training_source(config, config.stage_tasks(4))
    assert (source.setting, source.root_setting) == ("stage4.tasks", "db_root")
    bench = source.open()
    assert bench.databases["debit_card"].name == "debit_card_template.sqlite"
    assert "data/six-gym-sqlite" not in str(bench.databases["chinook"])
    assert sum(t.instance_id.startswith("SQLite_") for t in bench.debugging_tasks()) == 6


def test_roots_fall_back_from_a_split_to_eval_db_root_to_db_root() -> None:
    base = [
        "tasks='train.jsonl'", "eval_tasks='eval.jsonl'", "easy_eval_tasks='easy.jsonl'",
        "evaluation.splits=[{label='own', tasks='a.jsonl', db_root='A'}, "
        "{label='inherits', tasks='b.jsonl'}, {label='bundled', tasks='bundled:test'}]",
        "text2sql_tasks='t2s.json'", "db_root='D'",
    ]  # fmt: skip
    config = apply_overrides(CurriculumConfig(), base)  # stage 3 mixes text-to-SQL 3:1
    splits = split_sources(config)
    assert {k: (s.db_root, s.root_setting) for k, s in splits.items()} == {
        "easy": ("D", "db_root"),
        "own": ("A", "evaluation.splits[0].db_root"),
        "inherits": ("D", "db_root"),
        "bundled": (None, None),
    }
    text2sql = text2sql_source(config)
    assert text2sql is not None and (eval_source(config).db_root, text2sql.db_root) == ("D", "D")
    config = apply_overrides(config, ["eval_db_root='E'", "text2sql_db_root='T'"])
    splits = split_sources(config)
    assert [splits[k].db_root for k in ("easy", "own", "inherits")] == ["E", "A", "E"]
    text2sql = text2sql_source(config)
    assert text2sql is not None and (text2sql.db_root, text2sql.root_setting) == (
        "T",
        "text2sql_db_root",
    )
    assert eval_source(config).root_setting == "eval_db_root"
    assert training_source(config, "train.jsonl").db_root == "D"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["eval_tasks='eval.jsonl'"],
            r"eval_tasks = 'eval.jsonl' names task files: set eval_db_root or db_root",
        ),
        (
            ["text2sql_tasks='t2s.json'"],
            "text2sql_tasks = 't2s.json' names task files: set text2sql_db_root or db_root",
        ),
        (["tasks='train.jsonl'"], "tasks = 'train.jsonl' names task files: set db_root to"),
        (
            ["evaluation.splits=[{label='x', tasks='x.jsonl'}]"],
            r"evaluation.splits\[0\].tasks = 'x.jsonl' names task files: set "
            r"evaluation.splits\[0\].db_root or eval_db_root or db_root",
        ),
        (["eval_db_root='E'"], "eval_db_root is set but eval_tasks = 'bundled:test' is bundled"),
        (["text2sql_db_root='T'"], "text2sql_db_root is set but text2sql_tasks = "),
        (["db_root='D'"], "db_root is set but every task source of this run is bundled"),
    ],
)
def test_a_source_without_a_root_or_a_root_for_nothing_is_refused(
    overrides: list[str], message: str
) -> None:
    config = apply_overrides(CurriculumConfig(), overrides)  # stage 3 mixes text-to-SQL 3:1
    with pytest.raises(ConfigError, match=message):
        run_sources(config)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval_db_root=''", "eval_db_root must name a directory or be left out"),
        ("db_root=' '", "db_root must name a directory or be left out"),
        (
            "evaluation.splits=[{label='x', tasks='x.jsonl', db_root=''}]",
            r"evaluation.splits\[0\].db_root must name a directory",
        ),
        ("eval_db_root=3", "eval_db_root: expected str"),
    ],
)
def test_bad_roots_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        apply_overrides(load_preset("tiny"), [override])


def test_stage3_refuses_one_db_id_with_two_files(tmp_path: Path) -> None:
    """Stage 3 scores training and text-to-SQL prompts on one map by db_id: a db_id that
    is another file in each set is refused, naming both."""
    a, b = make_db(tmp_path / "a" / "x.sqlite", "t"), make_db(tmp_path / "b" / "x.sqlite", "t")
    train = training_source(load_preset("tiny"), "bundled:train-easy")
    with pytest.raises(ConfigError, match=r"db_id 'x' is .*a/x.sqlite for tasks but .*b/x.sqlite"):
        check_mixable(
            train, Benchmark("t", LoadedTasks(), {"x": a}), Benchmark("s", LoadedTasks(), {"x": b})
        )
    check_mixable(
        train, Benchmark("t", LoadedTasks(), {"x": a}), Benchmark("s", LoadedTasks(), {"x": a})
    )


def test_a_run_from_before_the_split_roots_resumes(tmp_path: Path) -> None:
    """A run's config.json whose splits lack ``db_root`` (written before it existed) is
    the same configuration, so --resume accepts it."""
    from birdrl.training.curriculum import _check_run_dir

    config = load_preset("tiny")
    old = config_to_dict(config)
    for split in old["evaluation"]["splits"]:
        del split["db_root"]
    for key in ("eval_db_root", "text2sql_db_root"):
        del old[key]
    (tmp_path / "config.json").write_text(json.dumps(old))
    (tmp_path / "stage1").mkdir()
    _check_run_dir(tmp_path, config, resume=True)
    (tmp_path / "config.json").write_text(json.dumps(old))
    splits = [replace(s, db_root="elsewhere") for s in config.evaluation.splits]
    moved = replace(config, evaluation=replace(config.evaluation, splits=splits))
    with pytest.raises(ConfigError, match="changed: evaluation"):
        _check_run_dir(tmp_path, moved, resume=True)


def test_a_missing_root_folder_is_named_with_its_setting(public_data: Path) -> None:
    config = apply_overrides(load_preset("paper-sqlite"), ["text2sql_db_root='data/nowhere'"])
    source = text2sql_source(config)
    assert source is not None
    with pytest.raises(
        MissingDatabaseError,
        match="text2sql_tasks = .*text2sql_db_root = 'data/nowhere': database root not found",
    ):
        source.open()
