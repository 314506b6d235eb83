"""The data behind `birdrl view`: every field of an episode reaches its page, odd and
missing pieces become notes, bad inputs get one clear error."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from viewer_runs import make_run

from birdrl.cli import app
from birdrl.view.build import build_view, make_server
from birdrl.view.sources import ViewError, load_source


def read_data(site: Path, name: str) -> Any:
    """The JSON a data script hands to the page (``birdrlData(name, {...});``)."""
    text = (site / "data" / f"{name}.js").read_text(encoding="utf-8")
    match = re.fullmatch(r'birdrlData\("([^"]+)",(.*)\);\n', text, re.DOTALL)
    assert match and match.group(1) == name, text[:80]
    return json.loads(match.group(2))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("viewer"))


@pytest.fixture(scope="module")
def site(run: Path) -> Path:
    return build_view([run]).parent


def episode(site: Path, column: int, instance_id: str) -> dict[str, Any]:
    index = read_data(site, "index")
    row = index["tasks"]["id"].index(instance_id)
    chunk = index["cells"][column]["chunk"][row]
    return read_data(site, f"ep/c{column}-{chunk}")[str(row)]


def test_every_field_of_a_trajectory_reaches_its_episode_page(run: Path, site: Path) -> None:
    assert site == run / "view" and (site / "index.html").is_file()
    for stage in (0, 1, 2, 3):
        lines = (run / f"stage{stage}" / "eval_trajectories.jsonl").read_text().splitlines()
        for line in lines:
            raw = json.loads(line)
            shown = episode(site, stage, raw["instance_id"])
            for key, value in raw.items():
                assert shown[key] == value, (stage, raw["instance_id"], key)
            assert shown["outcome"] in read_data(site, "index")["outcomes"]


def test_index_has_one_row_per_task_and_a_cell_per_stage(run: Path, site: Path) -> None:
    index = read_data(site, "index")
    (source,) = index["sources"]
    assert [c["key"] for c in source["columns"]] == [f"stage{i}" for i in range(5)]
    ids = index["tasks"]["id"]
    assert len(ids) == len(set(ids)) == 9
    assert all(index["tasks"]["query"])  # searchable by text
    solved = index["outcomes"].index("solved")
    base, explorer = index["cells"][0], index["cells"][1]
    assert solved not in base["outcome"] and set(explorer["outcome"]) == {solved}
    not_run = index["outcomes"].index("not run")
    assert set(index["cells"][4]["outcome"]) == {not_run}  # stage 4 never finished
    curves = source["columns"][3]["curves"]
    assert curves["reward"] == [[1.0, 0.1], [2.0, 0.2]] and "kl" in curves
    assert source["columns"][3]["group_steps"] == [1, 2]
    assert len(read_data(site, "groups/c3")) == 4


def test_unparseable_turns_and_infrastructure_errors_are_kept_with_their_reason(
    run: Path, site: Path
) -> None:
    rows = [
        json.loads(x) for x in (run / "stage2" / "eval_trajectories.jsonl").read_text().splitlines()
    ]
    failed = next(r for r in rows if r["infra_error"])
    shown = episode(site, 2, failed["instance_id"])
    assert shown["outcome"] == "infra error" and "endpoint timed out" in shown["infra_error"]
    played = next(r for r in rows if not r["infra_error"])
    shown = episode(site, 2, played["instance_id"])
    assert "could not read the tool call JSON" in shown["turn_log"][0]["parse_error"]
    assert shown["turn_log"][1]["calls"][0]["name"] == "execute_sql"
    assert shown["outcome"] == "solved" and shown["tests"]["passed"] == shown["tests"]["expected"]


def test_missing_stages_and_empty_runs_become_notes(run: Path, tmp_path: Path) -> None:
    source = load_source(run)
    assert any("has not finished" in n for n in source.columns[4].notes)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    site = build_view([empty]).parent
    index = read_data(site, "index")
    assert index["tasks"]["id"] == []
    assert any("no stage has finished" in n for n in index["sources"][0]["notes"])
    grpo = tmp_path / "nogroups"
    (grpo / "stage3").mkdir(parents=True)
    (grpo / "stage3" / "record.json").write_text(
        json.dumps(
            {"stage": 3, "name": "GRPO", "kind": "grpo", "log_history": [], "evaluation": None}
        )
    )
    notes = load_source(grpo).columns[0].notes
    assert any("no GRPO groups logged" in n for n in notes)
    assert any("not evaluated" in n for n in notes)


def test_old_records_get_their_task_sql_from_the_task_set(run: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    strip = ("query", "issue_sql", "sol_sql", "tests")
    with open(old, "w") as f:
        for line in (run / "stage1" / "eval_trajectories.jsonl").read_text().splitlines():
            f.write(
                json.dumps({k: v for k, v in json.loads(line).items() if k not in strip}) + "\n"
            )
    bare = load_source(old).columns[0]
    ep = next(iter(bare.episodes.values()))
    assert not ep.get("sol_sql") and ep["query"]  # the issue read back out of the prompt
    result = CliRunner().invoke(
        app, ["view", str(old), "--tasks", "bundled:test", "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 0, result.output
    assert "viewer written to" in result.output
    filled = episode(tmp_path / "v", 0, ep["instance_id"])
    assert filled["sol_sql"] and filled["issue_sql"]


def test_a_predictions_report_shows_scores_submissions_and_test_errors(tmp_path: Path) -> None:
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "chinook_012", "pred_sqls": ["SELECT 1"]}) + "\n")
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        app, ["eval", "--predictions", str(preds), "--tasks", "bundled:test", "--json", str(report)]
    )
    assert result.exit_code == 0, result.output
    site = build_view([report], tmp_path / "site").parent
    shown = episode(site, 0, "chinook_012")
    assert shown["submission"] == ["SELECT 1"] and shown["outcome"] == "failed"
    assert shown["tests"]["failed_tests"] and shown["tests"]["errors"]
    missing = episode(site, 0, "chinook_025")  # no prediction: scored as an empty one
    assert missing["submission"] is None


def test_eval_writes_a_viewer_with_view(tmp_path: Path) -> None:
    out = tmp_path / "view"
    args = ["eval", "--agent", "gold", "--tasks", "bundled:test", "--view", str(out)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1 and "--view needs --agent and --trajectories" in refused.output
    result = CliRunner().invoke(app, [*args, "--trajectories", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 0, result.output
    index = read_data(out, "index")
    assert len(index["tasks"]["id"]) == 48
    assert set(index["cells"][0]["outcome"]) == {index["outcomes"].index("solved")}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nope", "no such file or directory"),
        (lambda p: (p / "d").mkdir() or p / "d", "not a curriculum run directory"),
        (
            lambda p: (
                (p / "x.jsonl").write_text('{"instance_id": "a"}\n{"instance_id": \n')
                and p / "x.jsonl"
            ),
            "x.jsonl, line 2, column",
        ),
        (
            lambda p: (p / "x.jsonl").write_text("[1]\n") and p / "x.jsonl",
            "expected a JSON object per line",
        ),
        (
            lambda p: (p / "x.jsonl").write_text('{"reward": 1}\n') and p / "x.jsonl",
            "an episode without an instance_id",
        ),
        (
            lambda p: (p / "r.json").write_text('{"a": 1}') and p / "r.json",
            "not a birdrl eval --json report",
        ),
        (
            lambda p: (
                (p / "r.json").write_text(
                    '{"sqlite": {"reports": []}, "postgresql": {"reports": []}}'
                )
                and p / "r.json"
            ),
            "multi-dialect report",
        ),
        (lambda p: (p / "r.txt").write_text("x") and p / "r.txt", "give a run directory"),
    ],
)
def test_bad_inputs_get_one_clear_error(tmp_path: Path, make: Any, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(ViewError, match=re.escape(message)):
        load_source(path)
    result = CliRunner().invoke(app, ["view", str(path), "--out", str(tmp_path / "site")])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_serving_the_site_on_localhost(site: Path) -> None:
    server = make_server(site, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        for name in ("index.html", "app.js", "data/index.js"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}") as response:
                assert response.status == 200 and response.read()
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def split_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("viewer-splits"), easy_split=True)


def test_every_evaluated_split_gets_its_columns_with_intervals(split_run: Path) -> None:
    """A run's further held-out split (here ``easy``, evaluated at stages 0 and 3) gets a
    column per stage after the main split's, its episodes, and intervals: Wilson for SR
    and the exploring share, Newcombe's paired one for the change from the split's own
    previous stage (never from another split's)."""
    from birdrl.evaluation.intervals import newcombe_paired, wilson

    site = build_view([split_run]).parent
    index = read_data(site, "index")
    (source,) = index["sources"]
    assert source["splits"] == {"held-out": "bundled:test", "easy": "bundled:test-easy"}
    columns = source["columns"]
    assert [c["key"] for c in columns] == [
        *(f"stage{i}" for i in range(5)), "stage0-easy", "stage3-easy"
    ]  # fmt: skip
    assert [c["split"] for c in columns] == ["held-out"] * 5 + ["easy"] * 2
    base, tuned = columns[5], columns[6]
    assert tuned["title"] == "stage 3: single-turn GRPO · easy" and not tuned["curves"]
    assert base["episodes"] == tuned["episodes"] == 6
    # the explorer looks before it submits; the issue SQL is submitted at once
    assert tuned["stats"]["explored"] == wilson(6, 6).to_dict()
    assert base["stats"]["explored"] == wilson(0, 6).to_dict()
    assert tuned["evaluation"]["explored_first"] == 6
    solved = [e["success"] for e in tuned["evaluation"]["per_task"].values()]
    assert tuned["stats"]["sr"] == wilson(sum(solved), 6).to_dict()
    before = [e["success"] for e in base["evaluation"]["per_task"].values()]
    assert tuned["stats"]["change_from"] == "stage0-easy"
    assert tuned["stats"]["change"] == newcombe_paired(before, solved).to_dict()
    assert "change" not in base["stats"]  # the split's first evaluation: nothing before it
    assert columns[3]["stats"]["change_from"] == "stage2"  # the main split's own stages
    # every easy episode reaches its page; the task table has a row per task of both splits
    easy_ids = [json.loads(x)["instance_id"] for x in
                (split_run / "stage3" / "eval_trajectories_easy.jsonl").read_text().splitlines()]  # fmt: skip
    assert len(index["tasks"]["id"]) == 9 + 6
    assert episode(site, 6, easy_ids[0])["instance_id"] == easy_ids[0]


def test_records_from_before_splits_show_their_easy_split(split_run: Path, tmp_path: Path) -> None:
    import shutil

    old = tmp_path / "old"
    shutil.copytree(split_run, old)
    record_path = old / "stage3" / "record.json"
    record = json.loads(record_path.read_text())
    record["easy_evaluation"] = record.pop("split_evaluations")["easy"]
    for key in ("explored_first", "explored_first_rate"):  # not measured back then
        del record["easy_evaluation"][key]
    record_path.write_text(json.dumps(record))
    source = load_source(old)
    easy = [c for c in source.columns if c.split == "easy"]
    assert [c.key for c in easy] == ["stage0-easy", "stage3-easy"]
    assert "explored" not in easy[1].stats and "sr" in easy[1].stats


def test_a_trajectories_file_gets_its_exploring_share(split_run: Path) -> None:
    source = load_source(split_run / "stage3" / "eval_trajectories_easy.jsonl")
    (column,) = source.columns
    assert column.evaluation is not None and column.evaluation["explored_first"] == 6
    assert column.stats["explored"]["estimate"] == 1.0 and column.split is None
