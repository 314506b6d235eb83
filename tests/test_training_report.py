"""The curriculum report: tables with the measured numbers and honest deltas, valid PNG plots,
a JSON round trip of stage records, and a markdown-only report without matplotlib."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from birdrl.training.report import ReportError, StageRecord, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY = {"preset": "smoke", "model": "tiny-random", "fine-tuning": "LoRA r=8"}


def _eval(sr: float, query: float, management: float, **extra: Any) -> dict[str, Any]:
    return {
        "mode": "agent",
        "n": 20,
        "success_rate": sr,
        "per_category": {"Query": query, "Management": management},
        "avg_turns": 2.5,
        **extra,
    }


def _records() -> list[StageRecord]:
    sft_log: list[dict[str, Any]] = [
        {"step": s, "loss": 2.0 - 0.1 * s, "learning_rate": 1e-4} for s in range(1, 5)
    ]
    sft_log.append({"step": 4, "train_runtime": 3.2, "train_loss": 1.75})
    grpo_log = [
        {"step": s, "reward": 0.1 * s, "reward_std": 0.05, "kl": 0.01 * s, "entropy": 1.0}
        for s in range(1, 4)
    ]
    return [
        StageRecord(0, "base model", "base", "/m/base", 12.0, [], _eval(0.10, 0.2, 0.0), []),
        StageRecord(
            1, "reasoning SFT", "sft", "/m/s1", 95.0, sft_log, _eval(0.15, 0.25, 0.05), ["lr 1e-4"]
        ),
        StageRecord(2, "tool-use SFT", "sft", "/m/s2", 30.0, sft_log[:2], None, ["no eval"]),
        StageRecord(
            3, "single-turn GRPO", "grpo", "/m/s3", 40.0, grpo_log, _eval(0.15, 0.3, 0.0), []
        ),
        StageRecord(
            4,
            "multi-turn GRPO",
            "grpo",
            "/m/s4",
            50.0,
            [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.7}],
            _eval(0.121, 0.3, None),
            [],
        ),
    ]


def _rows(text: str, section: str) -> dict[str, list[str]]:
    """The rows of the first table under `## section`, keyed by their first cell (stage)."""
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in body.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


def test_report_tables_plots_and_notes(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (the train extra)")
    path = write_report(
        tmp_path, _records(), title="birdrl curriculum: smoke", config_summary=SUMMARY
    )
    assert path == tmp_path / "report.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# birdrl curriculum: smoke\n")
    assert "| fine-tuning | LoRA r=8 |" in text

    sr = _rows(text, "Success rate")
    header = text.split("## Success rate\n", 1)[1].split("\n")[1]
    assert "| SR | SR 95% interval | Δ SR [95% interval] | Management | Query |" in header
    # Wilson: 2 of 20 -> [2.8, 30.1], 3 of 20 -> [5.2, 36.0]; Newcombe (independent:
    # these records keep no per-task outcomes) for the changes
    assert sr["0"][4:9] == ["10.0%", "[2.8, 30.1]", "—", "0.0%", "20.0%"]
    assert sr["1"][4:9] == [
        "15.0%", "[5.2, 36.0]", "+5.0 pts [-17.3, +27.2]", "5.0% (+5.0 pts)", "25.0% (+5.0 pts)"
    ]  # fmt: skip
    assert sr["2"][2] == "not evaluated"  # said, and nothing invented
    assert sr["2"][3:] == ["—"] * (len(sr["2"]) - 3)
    # stage 3 is compared with stage 1 (the previous evaluated stage), not with stage 2
    assert sr["3"][4:9] == [
        "15.0%", "[5.2, 36.0]", "no change [-23.2, +23.2]", "0.0% (-5.0 pts)", "30.0% (+5.0 pts)"
    ]  # fmt: skip
    assert sr["4"][4:7] == ["12.1%", "[2.8, 30.1]", "-2.9 pts [-27.2, +17.3]"]
    assert sr["0"][9:11] == ["2.50", "—"]  # avg turns measured; tool-call validity was not
    assert (
        "From stage 0 (base model) to stage 4 (multi-turn GRPO): 10.0% → 12.1% (+2.1 pts, "
        "95% interval [-21.4, +21.4]). That is not distinguishable from no change" in text
    )
    # and against every evaluated stage before the previous one (here stage 1): stage 4
    # against the last SFT stage is a line of its own
    assert "\nFrom stage 1 (reasoning SFT) to stage 4 (multi-turn GRPO): 15.0% → 12.1%" in text
    assert "From stage 3 (single-turn GRPO) to stage 4" not in text  # its row says it
    assert (
        "- stage 1 → stage 3 (single-turn GRPO): no change [-23.2, +23.2]: not "
        "distinguishable from no change (the interval includes 0)." in text
    )

    # 12 + 95 + 30 + 40 + 50 s: these evaluations recorded no time of their own
    assert "Total: 3.8 minutes, every stage's training and evaluation" in text
    training = _rows(text, "Training")
    assert training["0"][3:] == ["12.0 s (eval)", "—", "—"]
    assert training["1"][3:5] == ["1 min 35 s", "4"]
    assert training["1"][5] == "loss 1.900 → 1.600"
    assert training["3"][5] == "reward 0.100 → 0.300"
    assert training["4"][5] == "reward 0.500 → 0.700"

    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    expected = {
        "plots/success_rate.png",
        "plots/stage1_loss.png",
        "plots/stage2_loss.png",
        "plots/stage3_reward.png",
        "plots/stage3_kl.png",
        "plots/stage4_reward.png",  # stage 4 logged no KL: no KL plot
    }
    assert set(links) == expected
    for link in links:
        assert (tmp_path / link).read_bytes()[:8] == PNG_MAGIC
    assert not (tmp_path / "plots/stage4_kl.png").exists()

    notes = text.split("## Notes\n", 1)[1]
    assert "### Stage 2: tool-use SFT" in notes and "- not evaluated" in notes
    assert "- lr 1e-4" in notes and "- model: `/m/s3`" in notes


def test_missing_metrics_are_dashes_and_unlike_evaluations_are_flagged(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (the train extra)")
    records = [
        StageRecord(0, "base model", "base", "/m/b", 1.0, [], {"mode": "agent", "n": 20}, []),
        StageRecord(
            1, "reasoning SFT", "sft", "/m/1", 2.0, [{"step": 1}], _eval(0.2, 0.2, 0.2), []
        ),
        StageRecord(
            3,
            "single-turn GRPO",
            "grpo",
            "/m/3",
            3.0,
            [],
            {"mode": "single", "n": 20, "success_rate": 0.2},
            [],
        ),
    ]
    text = write_report(tmp_path, records, title="t", config_summary={}).read_text()
    sr = _rows(text, "Success rate")
    assert sr["0"][4:7] == ["—", "—", "—"]
    # the previous stage has no success rate to compare
    assert sr["1"][4:7] == ["20.0%", "[8.1, 41.6]", "—"]
    assert sr["3"][4:7] == ["20.0%", "[8.1, 41.6]", "no change [-24.7, +24.7] †"]
    # ... submitted, episode ends, explored first: not measured; stage 3 says it cannot look
    assert sr["3"][7:-1] == ["—"] * 7
    assert sr["3"][-1] == "— (stage 3 trains single-turn, without tools: it cannot learn to look)"
    assert "† evaluated differently" in text
    training = _rows(text, "Training")
    assert training["1"][4:] == ["1", "loss: —"]
    assert training["3"][4:] == ["—", "reward: —"]
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text) == ["plots/success_rate.png"]


def test_no_evaluation_at_all(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (the train extra)")
    record = StageRecord(1, "reasoning SFT", "sft", "/m/1", 2.0, [], None, [])
    text = write_report(tmp_path, [record], title="t", config_summary={"a": "x|y"}).read_text()
    assert "No stage was evaluated." in text
    assert "Nothing to plot" in text
    assert "| a | x\\|y |" in text


def test_stage_record_json_round_trip() -> None:
    for record in _records():
        data = json.loads(json.dumps(record.to_dict()))
        assert StageRecord.from_dict(data) == record
    data = _records()[1].to_dict()
    del data["log_history"]
    with pytest.raises(ReportError, match="log_history"):
        StageRecord.from_dict(data)
    with pytest.raises(ReportError, match="kind"):
        StageRecord.from_dict({**_records()[1].to_dict(), "kind": "dpo"})


def test_without_matplotlib_the_markdown_is_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # makes these imports fail
    text = write_report(tmp_path, _records(), title="t", config_summary=SUMMARY).read_text()
    assert "Plots were skipped: matplotlib is not installed" in text
    assert "](plots/" not in text
    assert not list(tmp_path.glob("plots/*.png"))
    assert _rows(text, "Success rate")["1"][6] == "+5.0 pts [-17.3, +27.2]"


def _per_task(outcomes: dict[str, tuple[float, bool, str]]) -> dict[str, Any]:
    return {
        iid: {"db_id": iid.split("_")[0], "category": "Query", "reward": r, "success": ok,
              "stop_reason": reason, "tool_calls": 2, "invalid_tool_calls": 0}
        for iid, (r, ok, reason) in outcomes.items()
    }  # fmt: skip


HELD_OUT = [
    {"instance_id": "chinook_003", "db_id": "chinook", "category": "Query"},
    {"instance_id": "hr_007", "db_id": "hr", "category": "Management"},
    {"instance_id": "clinic_011", "db_id": "clinic", "category": "Personalization"},
]


def test_held_out_tasks_submissions_and_outcome_matrix(tmp_path: Path) -> None:
    base = {
        "mode": "agent",
        "n": 3,
        "success_rate": 0.0,
        "mean_reward": 0.0,
        "submitted": 0,
        "submission_rate": 0.0,
        "stop_reasons": {"max_turns": 3},
        "per_task": _per_task(
            {
                "chinook_003": (0.0, False, "max_turns"),
                "hr_007": (0.0, False, "max_turns"),
                "clinic_011": (0.0, False, "max_turns"),
            }
        ),
    }
    tuned = {
        **base,
        "success_rate": 1 / 3,
        "mean_reward": 0.444,
        "submitted": 2,
        "submission_rate": 2 / 3,
        "stop_reasons": {"submitted": 2, "max_turns": 1},
        "per_task": _per_task(
            {
                "chinook_003": (1.0, True, "submitted"),
                "hr_007": (1 / 3, False, "submitted"),
                "clinic_011": (0.0, False, "context_full"),
            }
        ),
    }
    old = {"mode": "agent", "n": 3, "success_rate": 0.0}  # a record.json from before
    records = [
        StageRecord(0, "base model", "base", "/m/b", 1.0, [], base, []),
        StageRecord(1, "reasoning SFT", "sft", "/m/1", 2.0, [], old, []),
        StageRecord(2, "tool-use SFT", "sft", "/m/2", 2.0, [], tuned, []),
    ]
    text = write_report(
        tmp_path, records, title="t", config_summary={}, held_out=HELD_OUT
    ).read_text()
    sr = _rows(text, "Success rate")
    header = text.split("## Success rate\n", 1)[1].split("\n")[1]
    assert header.endswith(
        "| mean reward | submitted | episode ends | explored first [95% interval] |"
    )
    assert sr["0"][-3:-1] == ["0.0% (0/3)", "max_turns 3"]
    assert sr["1"][-3:] == ["—", "—", "—"]  # not measured in old records: dashes, no error
    assert sr["2"][-4:-1] == ["0.444", "66.7% (2/3)", "submitted 2, max_turns 1"]

    section = text.split("## Held-out tasks\n", 1)[1].split("\n## ", 1)[0]
    assert "3 task(s) from 3 database(s) (chinook, clinic, hr) and 3 categories" in section
    matrix = _rows(text, "Held-out tasks")
    assert "| instance_id | db_id | category | base | stage 1 | stage 2 |" in section
    assert matrix["chinook_003"][1:] == [
        "chinook", "Query", "no submit (max_turns)", "—", "✓ 1.00"
    ]  # fmt: skip
    assert matrix["hr_007"][1:] == [
        "hr", "Management", "no submit (max_turns)", "—", "submitted 0.33"
    ]  # fmt: skip
    assert matrix["clinic_011"][-1] == "no submit (context_full)"
    assert "## Budget checks" not in text  # only when the run checked budgets


def test_held_out_tasks_come_from_the_records_without_a_list(tmp_path: Path) -> None:
    ev = {"mode": "agent", "n": 1, "success_rate": 1.0,
          "per_task": _per_task({"hr_001": (1.0, True, "submitted")})}  # fmt: skip
    records = [StageRecord(0, "base model", "base", "/m/b", 1.0, [], ev, [])]
    text = write_report(tmp_path, records, title="t", config_summary={}).read_text()
    assert _rows(text, "Held-out tasks")["hr_001"][1:] == ["hr", "Query", "✓ 1.00"]
    old = [StageRecord(0, "base model", "base", "/m/b", 1.0, [], {"n": 1}, [])]
    text = write_report(tmp_path, old, title="t", config_summary={}).read_text()
    assert "No held-out task outcomes were recorded." in text


def test_budget_checks_section(tmp_path: Path) -> None:
    budgets = [
        {"key": "evaluation.max_tool_calls", "value": 2, "need": "a median of 4 tool calls (max 4)",
         "fits": 0, "total": 8, "ok": False, "detail": ""},
        {"key": "stage2.max_length", "value": 4096, "need": "a median of 2078 tokens (max 2448)",
         "fits": 8, "total": 8, "ok": True, "detail": ""},
    ]  # fmt: skip
    text = write_report(tmp_path, [], title="t", config_summary={}, budgets=budgets).read_text()
    rows = _rows(text, "Budget checks")
    assert rows["evaluation.max_tool_calls"][1:] == [
        "2", "a median of 4 tool calls (max 4)", "0 of 8", "**too small**"
    ]  # fmt: skip
    assert rows["stage2.max_length"][-1] == "ok"
    text = write_report(tmp_path, [], title="t", config_summary={}, budgets=[]).read_text()
    assert "Nothing to check against" in text


def test_every_held_out_split_has_its_own_labelled_table(tmp_path: Path) -> None:
    records = _records()
    plain = write_report(tmp_path / "plain", records, title="t", config_summary=SUMMARY)
    assert "held-out split" not in plain.read_text(encoding="utf-8")
    records[0].split_evaluations = {
        "easy": _eval(0.25, 0.5, 0.0, mean_reward=0.3),
        "explore": _eval(0.05, 0.1, 0.0, mean_reward=0.1),
    }
    records[-1].split_evaluations = {
        "easy": _eval(0.5, 0.75, 0.25, mean_reward=0.55),
        "explore": _eval(0.6, 0.7, 0.5, mean_reward=0.65),
    }
    sources = {"easy": "bundled:test-easy", "explore": "bundled:test-explore"}
    text = write_report(
        tmp_path / "splits", records, title="t", config_summary=SUMMARY, split_sources=sources
    ).read_text(encoding="utf-8")
    main, rest = text.split("## Success rate on the held-out split easy")
    easy, explore = rest.split("## Success rate on the held-out split explore")
    assert "single-edit bugs synthesized from the held-out test split" in easy
    assert "Tasks: `bundled:test-easy`." in easy and "Tasks: `bundled:test-explore`." in explore
    # each split's figures are in its own table only
    assert "0.550" in easy and "0.550" not in main and "0.550" not in explore
    assert "0.650" in explore.split("## Held-out tasks")[0] and "0.650" not in main + easy
    assert "25.0% → 50.0% (+25.0 pts, 95% interval [-4.7, +49.4])" in easy
    # 1 of 20 -> 12 of 20: the interval excludes 0, and the report says so
    assert "5.0% → 60.0% (+55.0 pts, 95% interval [+26.7, +73.6]). That is an increase." in explore
    assert StageRecord.from_dict(json.loads(json.dumps(records[-1].to_dict()))) == records[-1]


def test_records_from_before_splits_keep_their_easy_evaluation() -> None:
    data = _records()[1].to_dict()
    del data["split_evaluations"]
    data["easy_evaluation"] = _eval(0.25, 0.5, 0.0)
    record = StageRecord.from_dict(data)
    assert record.split_evaluations == {"easy": _eval(0.25, 0.5, 0.0)}
    assert record.easy_evaluation == _eval(0.25, 0.5, 0.0)
    assert "easy_evaluation" not in record.to_dict()


def _outcomes(solved: set[int], explored: set[int], n: int = 32) -> dict[str, Any]:
    per_task = {
        f"t{i:02d}": {"db_id": "hr", "category": "Query", "reward": float(i in solved),
                      "success": i in solved, "stop_reason": "submitted", "tool_calls": 2,
                      "invalid_tool_calls": 0, "explored_first": i in explored}
        for i in range(n)
    }  # fmt: skip
    return {
        "mode": "agent",
        "n": n,
        "success_rate": len(solved) / n,
        "explored_first": len(explored),
        "explored_first_rate": len(explored) / n,
        "per_task": per_task,
    }


def test_paired_changes_and_the_exploring_share(tmp_path: Path) -> None:
    """The same tasks at every stage: changes get Newcombe's paired interval (narrower than
    the independent one when the same tasks stay solved), and every stage its exploring
    share; stage 3's row says it cannot learn to look."""
    from birdrl.evaluation.intervals import newcombe_paired

    evs = {
        2: _outcomes({0, 1, 2}, set()),
        3: _outcomes({0, 1, 2}, {5}),
        4: _outcomes(set(range(10)), set(range(16))),
    }
    records = [StageRecord(n, f"s{n}", "sft", f"/m/{n}", 1.0, [], ev, []) for n, ev in evs.items()]
    text = write_report(tmp_path, records, title="t", config_summary={}).read_text()
    sr = _rows(text, "Success rate")
    paired = newcombe_paired([i < 3 for i in range(32)], [i < 10 for i in range(32)])
    assert paired.low > 0  # 7 tasks gained, none lost
    low, high = f"{100 * paired.low:+.1f}", f"{100 * paired.high:+.1f}"
    assert sr["4"][6] == f"+21.9 pts [{low}, {high}]"
    assert sr["3"][6] == "no change [-10.5, +10.5]"  # no task changed: not [0, 0]
    assert sr["4"][-1] == "50.0% (16/32) [33.6, 66.4]"
    assert sr["2"][-1] == "0.0% (0/32) [0.0, 10.7]"
    assert sr["3"][-1].startswith("3.1% (1/32) [0.6, 15.7] (stage 3 trains single-turn")
    assert f"- stage 3 → stage 4 (s4): +21.9 pts [{low}, {high}]: an increase." in text
    assert (
        "- stage 2 → stage 3 (s3): no change [-10.5, +10.5]: not distinguishable from no "
        "change (the interval includes 0)." in text
    )


def test_run_seconds_adds_each_evaluation_once() -> None:
    """A stage's evaluation time is added to its training time once (its splits ran in the
    same batch and repeat it); stage 0's time is already its evaluation; a stage left out
    by skip_stages adds nothing; a record without a time makes the total unknown."""
    from birdrl.training.report import run_seconds

    timed = {"seconds": 20.0}
    records = [
        StageRecord(0, "base model", "base", "/m/b", 30.0, [], {"n": 1, **timed}, []),
        StageRecord(1, "reasoning SFT", "sft", "/m/1", 5.0, [], None, []),
        StageRecord(
            2,
            "tool-use SFT",
            "sft",
            "/m/2",
            100.0,
            [],
            {"n": 1, **timed},
            [],
            split_evaluations={"easy": {"n": 1, **timed}},
        ),  # fmt: skip
    ]
    assert run_seconds(records) == 30.0 + 5.0 + 100.0 + 20.0
    assert run_seconds([*records, replace(records[1], seconds=float("nan"))]) is None
