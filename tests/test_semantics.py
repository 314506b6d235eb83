"""Scoring semantics by name: parsing, the rules each gives per dialect, the defaults of
evaluation and of RL rewards, and clear errors for unknown names everywhere one is given."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.dialects import get_dialect
from birdrl.dialects.base import STRICT_RULES, ScoringRules
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.semantics import (
    EVAL_SEMANTICS,
    REWARD_SEMANTICS,
    Semantics,
    SemanticsError,
    scoring_rules,
)
from birdrl.training.config import ConfigError, CurriculumConfig
from birdrl.training.grpo import SingleTurnRollouts


def test_names_parse_case_insensitively_and_unknown_ones_fail_clearly() -> None:
    assert Semantics.parse(" Official ") is Semantics.OFFICIAL
    assert Semantics.parse(Semantics.STRICT) is Semantics.STRICT
    with pytest.raises(
        SemanticsError, match=r"unknown scoring semantics 'lenient' \(known: official, strict\)"
    ):
        Semantics.parse("lenient")
    with pytest.raises(SemanticsError):
        EvalConfig(semantics="lenient")
    with pytest.raises(ConfigError, match="reward_semantics: unknown scoring semantics"):
        CurriculumConfig(reward_semantics="lenient")


def test_rules_per_dialect() -> None:
    none = ScoringRules(issue_sql_check=False, default_test=False, conditions=False)
    for name, official in (("sqlite", STRICT_RULES), ("postgresql", none), ("mysql", none)):
        dialect = get_dialect(name)
        assert scoring_rules("official", dialect) == official, name
        assert scoring_rules(Semantics.STRICT, dialect) == STRICT_RULES, name
    assert ScoringRules(True, True, True) == STRICT_RULES


def test_defaults_official_for_evaluation_strict_for_rewards() -> None:
    assert EVAL_SEMANTICS is Semantics.OFFICIAL and REWARD_SEMANTICS is Semantics.STRICT
    assert EvalConfig().semantics is Semantics.OFFICIAL
    assert EvalConfig(semantics="strict").semantics is Semantics.STRICT  # parsed
    config = CurriculumConfig()
    assert (config.eval_semantics, config.reward_semantics) == ("official", "strict")
    assert SingleTurnRollouts(tasks={}, databases={}).eval_config.semantics is Semantics.STRICT


def test_eval_command_refuses_an_unknown_semantics_in_one_line() -> None:
    result = CliRunner().invoke(app, ["eval", "--agent", "gold", "--semantics", "lenient"])
    assert result.exit_code != 0
    assert "unknown scoring semantics 'lenient'" in result.output
    assert "Traceback" not in result.output
