"""Ways to break GRPO's credit on purpose, shared by the learnability tests
(test_training_learnability.py, test_training_multiturn_learnability.py): each meta-test
applies one to a trainer (``StageJob.on_trainer``) and shows that the learning check fails."""

from __future__ import annotations

from typing import Any


def cut_reward_from_loss(trainer: Any) -> None:
    """Rewards are still computed and logged; the advantages that carry them into the loss
    are zeroed."""
    original = trainer._generate_and_score_completions

    def no_advantage(inputs: Any) -> Any:
        batch = original(inputs)
        batch["advantages"] = batch["advantages"] * 0
        return batch

    trainer._generate_and_score_completions = no_advantage


def reward_to_wrong_trajectory(trainer: Any) -> None:
    """Each completion's reward reaches the completion of its neighbour in the batch (a
    misaligned environment pool, say)."""
    original = trainer._calculate_rewards

    def shifted(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs).roll(1, dims=0)

    trainer._calculate_rewards = shifted
