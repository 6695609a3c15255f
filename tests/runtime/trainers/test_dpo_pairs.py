"""Verified pairs from a graded rollout batch, and the held-out validation split."""

import pytest

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.trainers.dpo_pairs import split_validation, verified_pairs
from reasoning_core.runtime.training.rollouts import RolloutBatch


def _batch(rewards_per_question):
    batch = RolloutBatch([], [], [], [], [], {})
    for q, rewards in enumerate(rewards_per_question):
        for k, reward in enumerate(rewards):
            batch.prompts.append(f"p{q}")
            batch.responses.append(f"q{q}r{k}")
            batch.ground_truths.append(f"g{q}")
            batch.lengths.append(3)
            batch.scores.append({"reward": reward, "format_reward": 1.0, "answer_reward": reward})
    return batch


def test_correct_responses_pair_with_wrong_ones_of_the_same_question():
    batch = _batch([[0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0, 0, 0, 1]])
    pairs = verified_pairs(batch, group_size=4, pairs_per_question=2)
    assert [(p["prompt"], p["chosen"], p["rejected"]) for p in pairs] == [
        ("p0", "q0r1", "q0r0"),
        ("p0", "q0r3", "q0r2"),
        ("p3", "q3r3", "q3r0"),
    ]
    assert all(p["ground_truth"] == "g" + p["prompt"][1:] for p in pairs)
    one = verified_pairs(batch, group_size=4, pairs_per_question=1)
    assert [(p["chosen"], p["rejected"]) for p in one] == [("q0r1", "q0r0"), ("q3r3", "q3r0")]


def test_a_format_only_reward_is_not_correct():
    batch = _batch([[0.5, 1.0]])  # partial reward: not a correct response
    assert [(p["chosen"], p["rejected"]) for p in verified_pairs(batch, 2, 1)] == [("q0r1", "q0r0")]
    assert verified_pairs(_batch([[0.5, 0.0]]), 2, 1) == []


def test_validation_split_is_seeded_disjoint_and_ordered():
    pairs = [{"prompt": str(i), "chosen": "a", "rejected": "b"} for i in range(20)]
    train, val = split_validation(pairs, 5, seed=7)
    assert len(val) == 5 and len(train) == 15
    assert sorted(p["prompt"] for p in train + val) == sorted(p["prompt"] for p in pairs)
    assert [int(p["prompt"]) for p in val] == sorted(int(p["prompt"]) for p in val)
    assert split_validation(pairs, 5, seed=7) == (train, val)
    assert split_validation(pairs, 5, seed=8)[1] != val
    with pytest.raises(ConfigError, match="val_pairs"):
        split_validation(pairs, 20, seed=0)
