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
