"""Properties of group-normalized advantages (GRPO)."""

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from torch.func import vmap

from reasoning_core import compute_group_normalized_rewards, group_normalize

reward_values = st.floats(-10.0, 10.0, allow_nan=False)


@st.composite
def grouped_rewards(draw, min_group=1):
    group_size = draw(st.integers(min_group, 6))
    groups = draw(st.integers(1, 4))
    n = group_size * groups
    values = draw(st.lists(reward_values, min_size=n, max_size=n))
    return torch.tensor(values, dtype=torch.float64), group_size


def _groups(x, group_size):
    return x.reshape(-1, group_size)


def _non_degenerate(rewards, group_size):
    """Every group spreads over a range well above rounding (else normalizing amplifies it)."""
    g = _groups(rewards, group_size)
    return bool(((g.amax(1) - g.amin(1)) > 1e-3).all())


@given(grouped_rewards(), st.booleans(), st.sampled_from([0.0, 1e-6, 0.1]))
def test_advantages_have_zero_mean_per_group(data, normalize_by_std, eps):
    rewards, group_size = data
    adv, _ = group_normalize(rewards, group_size, eps, normalize_by_std)
    means = _groups(adv, group_size).mean(1)
    torch.testing.assert_close(means, torch.zeros_like(means), atol=1e-9, rtol=0)


@given(
    st.integers(1, 6), st.integers(1, 4), reward_values, st.booleans(), st.sampled_from([0.0, 1e-6])
)
def test_equal_rewards_in_a_group_give_exactly_zero(
    group_size, groups, value, normalize_by_std, eps
):
    rewards = torch.full((group_size * groups,), value, dtype=torch.float32)
    adv, meta = group_normalize(rewards, group_size, eps, normalize_by_std)
    assert torch.equal(adv, torch.zeros_like(adv))
    assert meta["frac_constant_groups"] == 1.0


def test_constant_group_beside_a_varied_group():
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.0, 1.0, 0.0])  # mean(0.1 x3) != 0.1 in float
    adv, meta = group_normalize(rewards, 3, 0.0, True)
    assert torch.equal(adv[:3], torch.zeros(3))
    torch.testing.assert_close(adv[3:], (rewards[3:] - rewards[3:].mean()) / rewards[3:].std())
    assert meta["frac_constant_groups"] == 0.5


@given(grouped_rewards(), st.floats(-10.0, 10.0), st.booleans(), st.sampled_from([0.0, 1e-6, 0.1]))
def test_invariant_to_adding_a_constant(data, shift, normalize_by_std, eps):
    rewards, group_size = data
    assume(not normalize_by_std or eps > 0 or _non_degenerate(rewards, group_size))
    adv, _ = group_normalize(rewards, group_size, eps, normalize_by_std)
    shifted, _ = group_normalize(rewards + shift, group_size, eps, normalize_by_std)
    torch.testing.assert_close(shifted, adv, atol=1e-6, rtol=1e-6)


@given(grouped_rewards(min_group=2), st.floats(0.01, 100.0))
def test_normalized_by_std_is_invariant_to_positive_scaling(data, scale):
    rewards, group_size = data
    assume(_non_degenerate(rewards, group_size))
    adv, _ = group_normalize(rewards, group_size, 0.0, True)
    scaled, _ = group_normalize(rewards * scale, group_size, 0.0, True)
    torch.testing.assert_close(scaled, adv, atol=1e-6, rtol=1e-6)


@given(grouped_rewards(min_group=2), st.booleans(), st.sampled_from([0.0, 0.1]))
def test_matches_the_formula(data, normalize_by_std, eps):
    rewards, group_size = data
    assume(_non_degenerate(rewards, group_size))
    g = _groups(rewards, group_size)
    expected = g - g.mean(1, keepdim=True)
    if normalize_by_std:
        expected = expected / (g.std(1, keepdim=True) + eps)  # unbiased, as torch.std
    adv, _ = group_normalize(rewards, group_size, eps, normalize_by_std)
    torch.testing.assert_close(adv, expected.flatten())


@given(grouped_rewards(), st.integers(1, 3), st.booleans())
def test_vmap_equals_row_by_row(data, copies, normalize_by_std):
    rewards, group_size = data
    batch = torch.stack([rewards * (i + 1) - i for i in range(copies)])
    got, meta = vmap(lambda r: group_normalize(r, group_size, 1e-6, normalize_by_std))(batch)
    for i in range(copies):
        row, row_meta = group_normalize(batch[i], group_size, 1e-6, normalize_by_std)
        torch.testing.assert_close(got[i], row)
        torch.testing.assert_close(meta["reward_mean"][i], row_meta["reward_mean"])


@pytest.mark.parametrize("n,group_size", [(6, 4), (5, 2), (3, 0), (4, -2)])
def test_group_size_must_divide_the_responses(n, group_size):
    with pytest.raises(ValueError, match="group_size"):
        group_normalize(torch.zeros(n), group_size, 1e-6, True)
    with pytest.raises(ValueError, match="group_size"):
        compute_group_normalized_rewards(
            lambda r, g: {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0},
            ["x"] * n,
            ["y"] * n,
            group_size,
            1e-6,
            True,
        )


def _toy_reward(response, ground_truth):
    fmt = float(response.startswith("<answer>"))
    ans = float(fmt and response.removeprefix("<answer>") == ground_truth)
    return {"reward": ans, "format_reward": fmt, "answer_reward": ans}


def test_compute_group_normalized_rewards_scores_then_normalizes():
    responses = ["<answer>4", "<answer>5", "4", "<answer>4", "<answer>7", "<answer>7"]
    truths = ["4"] * 4 + ["7"] * 2
    adv, raw, meta = compute_group_normalized_rewards(
        reward_fn=_toy_reward,
        rollout_responses=responses,
        repeated_ground_truths=truths,
        group_size=2,
        advantage_eps=1e-6,
        normalize_by_std=False,
    )
    assert torch.equal(raw, torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]))
    assert torch.equal(adv, torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0, 0.0]))
    torch.testing.assert_close(meta["format_reward"], torch.tensor(5 / 6))
    torch.testing.assert_close(meta["answer_reward"], torch.tensor(4 / 6))
    torch.testing.assert_close(meta["reward"], torch.tensor(4 / 6))


def test_length_mismatch_is_named():
    with pytest.raises(ValueError, match="repeated_ground_truths"):
        compute_group_normalized_rewards(_toy_reward, ["a", "b"], ["a"], 1, 0.0, False)


def test_metadata_statistics_by_hand():
    """Rewards [1, 0, 3, 3] in groups of 2: mean 7/4; squared deviations 0.5625 + 3.0625 +
    1.5625 + 1.5625 = 6.75, unbiased variance 6.75 / 3 = 2.25, so std 1.5 (biased: 1.299)."""
    rewards = torch.tensor([1.0, 0.0, 3.0, 3.0])
    adv, meta = group_normalize(rewards, 2, 0.0, False)
    assert torch.equal(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]))
    assert set(meta) >= {
        "reward_mean",
        "reward_std",
        "reward_max",
        "reward_min",
        "frac_constant_groups",
    }
    torch.testing.assert_close(meta["reward_mean"], torch.tensor(1.75))
    torch.testing.assert_close(meta["reward_std"], torch.tensor(1.5))
    assert meta["reward_max"] == 3.0 and meta["reward_min"] == 0.0
    assert meta["frac_constant_groups"] == 0.5


def _length_reward(response, ground_truth):
    return {
        "reward": float(len(response)),
        "format_reward": float(response.startswith("a")),
        "answer_reward": float(response == ground_truth),
    }


def test_raw_rewards_are_the_reward_key_not_answer_reward():
    """reward, format_reward and answer_reward can all differ (a partial format credit); the
    advantages come from "reward" and each mean from its own key."""
    adv, raw, meta = compute_group_normalized_rewards(
        reward_fn=_length_reward,
        rollout_responses=["a", "bbb", "cc", "aa"],
        repeated_ground_truths=["x", "x", "cc", "cc"],
        group_size=2,
        advantage_eps=1e-6,
        normalize_by_std=False,
    )
    assert torch.equal(raw, torch.tensor([1.0, 3.0, 2.0, 2.0]))
    assert torch.equal(adv, torch.tensor([-1.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(meta["reward"], torch.tensor(2.0))
    torch.testing.assert_close(meta["format_reward"], torch.tensor(0.5))
    torch.testing.assert_close(meta["answer_reward"], torch.tensor(0.25))
    torch.testing.assert_close(meta["reward_mean"], torch.tensor(2.0))
    assert meta["reward_max"] == 3.0 and meta["reward_min"] == 1.0


def test_compute_group_normalized_rewards_passes_eps_and_std_on():
    """Rewards [1, 3] have std sqrt(2); with eps = 1 the advantages are -+1 / (sqrt(2) + 1) =
    -+(sqrt(2) - 1). The constant group [2, 2] stays 0."""
    adv, raw, _ = compute_group_normalized_rewards(
        reward_fn=_length_reward,
        rollout_responses=["a", "bbb", "cc", "aa"],
        repeated_ground_truths=["x"] * 4,
        group_size=2,
        advantage_eps=1.0,
        normalize_by_std=True,
    )
    assert torch.equal(raw, torch.tensor([1.0, 3.0, 2.0, 2.0]))
    root = 2**0.5 - 1
    torch.testing.assert_close(adv, torch.tensor([-root, root, 0.0, 0.0]))
