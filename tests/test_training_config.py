"""Curriculum configuration: shipped presets load, typos and wrong types are errors that
name the key, overrides use the same dotted names."""

from __future__ import annotations

from pathlib import Path

import pytest

from birdrl.training.config import (
    ConfigError,
    CurriculumConfig,
    apply_overrides,
    config_to_dict,
    list_presets,
    load_preset,
)
from birdrl.training.curriculum import parse_stages


def test_every_shipped_preset_loads() -> None:
    names = list_presets()
    assert {"tiny", "smoke", "qwen2.5-coder-7b", "qwen2.5-coder-14b"} <= set(names)
    for name in names:
        config = load_preset(name)
        assert config.name == name
        assert config.stage3.reward == "execution"  # the pure execution reward by default
        assert config.stage4.beta > 0  # stage 4 is anchored to stage 3's policy


def test_partial_tables_keep_the_field_defaults(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('name = "p"\n[stage4]\nmax_steps = 3\n')
    config = load_preset(path)
    assert config.stage4.max_steps == 3
    assert config.stage4.beta == CurriculumConfig().stage4.beta == 0.04
    assert config.stage2.teacher == "explorer"
    assert config.stage3.text2sql_ratio == 3.0 and config.stage4.text2sql_ratio == 0.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[stage3]\nmax_step = 3\n", "stage3: unknown key|unknown setting 'stage3.max_step'"),
        ('[stage3]\nmax_steps = "3"\n', "stage3.max_steps: expected int"),
        ("seed = 1.5\n", "seed: expected int"),
        ("[stage9]\nx = 1\n", "unknown setting 'stage9'"),
        ("name = \n", "invalid TOML"),
        ("[lora]\ntarget_modules = 3\n", "lora.target_modules"),
    ],
)
def test_bad_presets_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_preset(path)


def test_unknown_preset_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="shipped presets: .*tiny"):
        load_preset("nonesuch")


def test_overrides() -> None:
    config = apply_overrides(
        load_preset("tiny"),
        ["stage3.max_steps=7", "model=hf:/x", "lora.enabled=false", "stage1.learning_rate=1"],
    )
    assert config.stage3.max_steps == 7 and config.model == "hf:/x"
    assert config.lora.enabled is False and config.stage1.learning_rate == 1.0
    assert config_to_dict(config)["stage3"]["max_steps"] == 7
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides(config, ["stage3.max_steps"])
    with pytest.raises(ConfigError, match="unknown setting 'stage3.nope'"):
        apply_overrides(config, ["stage3.nope=1"])
    with pytest.raises(ConfigError, match="expected bool"):
        apply_overrides(config, ["lora.enabled=3"])


def test_parse_stages() -> None:
    assert parse_stages("1-4") == [1, 2, 3, 4]
    assert parse_stages("3") == [3]
    assert parse_stages("1,3-4") == [1, 3, 4]
    for bad in ("0-2", "5", "a", "3-1"):
        with pytest.raises(ConfigError):
            parse_stages(bad)


def test_held_out_splits_in_tables_and_the_easy_shorthand(tmp_path: Path) -> None:
    from birdrl.training.config import HeldOutSplit

    path = tmp_path / "splits.toml"
    path.write_text(
        'name = "s"\neval_tasks = "bundled:test"\neasy_eval_tasks = "bundled:test-easy"\n'
        "[evaluation]\nlimit = 12\neasy_limit = 32\n"
        '[[evaluation.splits]]\nlabel = "explore"\ntasks = "bundled:test"\nlimit = 5\n'
        '[[evaluation.splits]]\nlabel = "more_2"\ntasks = "x.jsonl"\n'
    )
    config = load_preset(path)
    assert config.held_out_splits() == [
        HeldOutSplit("easy", "bundled:test-easy", 32),  # easy_eval_tasks: the split 'easy'
        HeldOutSplit("explore", "bundled:test", 5),
        HeldOutSplit("more_2", "x.jsonl", None),
    ]
    assert config_to_dict(config)["evaluation"]["splits"][0] == {
        "label": "explore", "tasks": "bundled:test", "limit": 5, "db_root": None
    }  # fmt: skip
    # the same through --set, and the tiny preset's easy and two explore splits
    tiny = load_preset("tiny")
    assert [s.label for s in tiny.held_out_splits()] == ["easy", "explore", "unseen-db"]
    again = apply_overrides(tiny, ['evaluation.splits=[{label="more", tasks="bundled:test"}]'])
    assert [s.label for s in again.held_out_splits()] == ["easy", "more"]
    # an empty easy_eval_tasks drops the easy split (its easy_limit then counts for nothing)
    dropped = apply_overrides(tiny, ["easy_eval_tasks=''"]).held_out_splits()
    assert [s.label for s in dropped] == ["explore", "unseen-db"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            'evaluation.splits=[{label="easy", tasks="x"}]',
            r"splits\[0\].label 'easy' is used twice",
        ),
        ('evaluation.splits=[{label="Two Words", tasks="x"}]', r"splits\[0\].label must be lower"),
        ('evaluation.splits=[{label="held-out", tasks="x"}]', "eval_tasks' own label"),
        ('evaluation.splits=[{label="a"}]', r"splits\[0\].tasks: give the split's task source"),
        ('evaluation.splits=[{label="a", tasks="x", limit=0}]', r"splits\[0\].limit must be >= 1"),
        ('evaluation.splits=[{label="a", tasks="x", limt=3}]', r"unknown setting .*limt"),
        ("stage2.tasks=''", "stage2.tasks must name a task source"),
    ],
)
def test_bad_splits_and_stage_tasks_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        apply_overrides(load_preset("tiny"), [override])


def test_each_stage_may_train_on_its_own_tasks() -> None:
    config = apply_overrides(
        load_preset("tiny"),
        ['stage2.tasks="bundled:train-easy+bundled:train"', 'stage4.tasks="bundled:train"'],
    )
    assert config.stage_tasks(1) == config.stage_tasks(3) == config.tasks == "bundled:train-easy"
    assert config.stage_tasks(2) == "bundled:train-easy+bundled:train"
    assert config.stage_tasks(4) == "bundled:train"


def test_a_run_written_before_a_new_setting_resumes(tmp_path: Path) -> None:
    """A run's config.json without settings added since (here the splits and the stages'
    tasks) is read with their defaults, so --resume accepts it; a real change is refused."""
    import json

    from birdrl.training.curriculum import _check_run_dir

    config = CurriculumConfig()  # no splits, no stage tasks, nothing skipped: the defaults
    old = config_to_dict(config)
    del old["evaluation"]["splits"]
    del old["evaluation"]["skip_stages"]
    for n in (1, 2, 3, 4):
        del old[f"stage{n}"]["tasks"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    _check_run_dir(tmp_path, config, resume=True)
    (tmp_path / "stage1").mkdir()
    # a new description changes no stage's work (an edited preset under a seeds run)
    _check_run_dir(tmp_path, apply_overrides(config, ['description="reworded"']), resume=True)
    changed = apply_overrides(config, ['evaluation.splits=[{label="x", tasks="bundled:test"}]'])
    with pytest.raises(ConfigError, match="changed: evaluation"):
        _check_run_dir(tmp_path, changed, resume=True)


def test_stages_left_unevaluated_are_named_and_checked() -> None:
    config = apply_overrides(load_preset("tiny"), ["evaluation.skip_stages=[1]"])
    assert [config.evaluation.evaluates(n) for n in (1, 2, 3, 4)] == [False, True, True, True]
    with pytest.raises(ConfigError, match=r"skip_stages holds stages 1-4, not \[0\]"):
        apply_overrides(load_preset("tiny"), ["evaluation.skip_stages=[0]"])


def test_samples_per_source_sets_the_mix_of_joined_sources() -> None:
    """stage2.samples_per_source takes that many tasks of each `+`-joined source (the tiny
    preset's 48 direct fixes and 40 looks), each the stratified subset of its own source;
    a count per source is required, and it excludes max_samples."""
    from collections import Counter

    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.tasks.subset import stratified_subset
    from birdrl.training.stages import CURRICULUM, TrainingTasks

    config = load_preset("tiny")
    assert config.stage2.samples_per_source == [48, 40] and config.stage2.max_samples is None
    stage2 = next(s for s in CURRICULUM if s.number == 2)

    class Run:
        def __init__(self, config: CurriculumConfig) -> None:
            self.config = config
            source = config.stage_tasks(2)
            bench = open_benchmark(source)
            self.train = TrainingTasks(source, bench, bench.debugging_tasks())

        def training(self, stage: int) -> TrainingTasks:
            return self.train

    chosen = stage2.select_tasks(Run(config))  # type: ignore[arg-type]
    kinds = Counter("explore" if "explore" in t.instance_id else "easy" for t in chosen)
    assert kinds == {"easy": 48, "explore": 40}
    explore = open_benchmark("bundled:train-explore").debugging_tasks()
    assert [t.instance_id for t in chosen[48:]] == [
        t.instance_id for t in stratified_subset(explore, 40, config.seed)
    ]
    # one limit over the joined set would have left the mix to the sources' sizes
    joined = stratified_subset(Run(config).train.tasks, 88, config.seed)
    assert sum("explore" in t.instance_id for t in joined) < 40

    # refused when the configuration is read, before any stage runs
    with pytest.raises(ConfigError, match="has 1 number.s. for the 2 source.s. of"):
        apply_overrides(config, ["stage2.samples_per_source=[48]"])
    with pytest.raises(ConfigError, match="max_samples or samples_per_source, not both"):
        apply_overrides(config, ["stage2.max_samples=10"])
    with pytest.raises(ConfigError, match="must be >= 0"):
        apply_overrides(config, ["stage2.samples_per_source=[48, -1]"])
