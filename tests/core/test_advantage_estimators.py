"""Properties of the advantage estimators beyond GRPO's: RLOO, batch std, REINFORCE++ and the
dispatch by name (Dr. GRPO included)."""

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from torch.func import vmap

from reasoning_core import (
    ADVANTAGE_ESTIMATORS,
    batch_std_advantages,
    compute_advantages,
    group_normalize,
    reinforce_pp_advantages,
    rloo_advantages,
)

reward_values = st.floats(-10.0, 10.0, allow_nan=False)


@st.composite
def grouped_rewards(draw, min_group=2, binary=False):
    group_size = draw(st.integers(min_group, 6))
    groups = draw(st.integers(1, 4))
    n = group_size * groups
    values = st.sampled_from([0.0, 1.0]) if binary else reward_values
    rewards = draw(st.lists(values, min_size=n, max_size=n))
    return torch.tensor(rewards, dtype=torch.float64), group_size


def _spread(x):
    """Values spread well above rounding (normalizing a near-constant vector amplifies it)."""
    return bool(x.amax() - x.amin() > 1e-3)


# ----------------------------------------------------------------------------------- RLOO


@given(grouped_rewards())
def test_rloo_is_the_reward_minus_the_mean_of_the_others(data):
    rewards, g = data
    adv, _ = rloo_advantages(rewards, g)
    expected = torch.empty_like(rewards)
    for i in range(len(rewards)):
        start = i - i % g
        others = [rewards[j] for j in range(start, start + g) if j != i]
        expected[i] = rewards[i] - sum(others) / (g - 1)
    torch.testing.assert_close(adv, expected, atol=1e-9, rtol=1e-9)


@given(grouped_rewards(), st.data(), st.floats(-5.0, 5.0).filter(lambda d: abs(d) > 1e-2))
def test_rloo_baseline_of_a_response_does_not_depend_on_its_own_reward(data, draw, delta):
    """The baseline A_i - r_i is a function of the other rewards only: moving r_i by d moves
    A_i by exactly d, and each other advantage of its group by -d / (G - 1)."""
    rewards, g = data
    i = draw.draw(st.integers(0, len(rewards) - 1))
    moved = rewards.clone()
    moved[i] += delta
    assume(
        _spread(rewards[i - i % g : i - i % g + g]) and _spread(moved[i - i % g : i - i % g + g])
    )
    before, _ = rloo_advantages(rewards, g)
    after, _ = rloo_advantages(moved, g)
    baseline_before = before[i] - rewards[i]
    baseline_after = after[i] - moved[i]
    torch.testing.assert_close(baseline_after, baseline_before, atol=1e-9, rtol=0)
    group = torch.arange(len(rewards)) // g == i // g
    others = group.clone()
    others[i] = False
    torch.testing.assert_close(
        after[others] - before[others],
        torch.full_like(after[others], -delta / (g - 1)),
        atol=1e-9,
        rtol=0,
    )
    torch.testing.assert_close(after[~group], before[~group], atol=0, rtol=0)


@given(grouped_rewards())
def test_rloo_is_the_centered_reward_scaled_by_g_over_g_minus_1(data):
    rewards, g = data
    adv, _ = rloo_advantages(rewards, g)
    centered, _ = group_normalize(rewards, g, 0.0, normalize_by_std=False)
    torch.testing.assert_close(adv, centered * g / (g - 1), atol=1e-9, rtol=1e-9)
    sums = adv.reshape(-1, g).sum(1)
    torch.testing.assert_close(sums, torch.zeros_like(sums), atol=1e-8, rtol=0)


def test_rloo_by_hand_and_its_errors():
    adv, _ = rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))
    with pytest.raises(ValueError, match="group_size >= 2"):
        rloo_advantages(torch.tensor([1.0, 0.0]), 1)
    with pytest.raises(ValueError, match="divide"):
        rloo_advantages(torch.tensor([1.0, 0.0, 1.0]), 2)


# ------------------------------------------------------------------------------ batch std


@given(grouped_rewards(min_group=1), st.sampled_from([0.0, 1e-6, 0.1]))
def test_batch_std_is_the_group_centered_reward_over_the_batch_std(data, eps):
    rewards, g = data
    assume(eps > 0 or _spread(rewards))
    adv, _ = batch_std_advantages(rewards, g, eps)
    grouped = rewards.reshape(-1, g)
    centered = (grouped - grouped.mean(1, keepdim=True)).flatten()
    constant = (grouped == grouped[:, :1]).all(1).repeat_interleave(g)
    centered[constant] = 0.0
    expected = centered / (rewards.std() + eps) if len(rewards) > 1 else centered
    torch.testing.assert_close(adv, expected, atol=1e-9, rtol=1e-7)


@given(grouped_rewards(), st.sampled_from([0.0, 1e-6, 0.1]))
def test_batch_std_with_one_group_is_grpo(data, eps):
    rewards, g = data
    one_group = rewards[:g]
    assume(eps > 0 or _spread(one_group))
    ours, _ = batch_std_advantages(one_group, g, eps)
    grpo, _ = group_normalize(one_group, g, eps, normalize_by_std=True)
    torch.testing.assert_close(ours, grpo, atol=1e-9, rtol=1e-9)


def test_batch_std_does_not_blow_up_a_near_constant_group():
    """GRPO divides a group's tiny spread by its own tiny std (advantages of order 1); batch
    std divides it by the batch's spread, so the group stays small beside a varied one."""
    rewards = torch.tensor([1.0, 1.001, 0.0, 1.0], dtype=torch.float64)
    grpo, _ = group_normalize(rewards, 2, 0.0, normalize_by_std=True)
    ours, _ = batch_std_advantages(rewards, 2, 0.0)
    assert grpo[:2].abs().min() > 0.7
    assert ours[:2].abs().max() < 0.001
    torch.testing.assert_close(ours[2:], (rewards[2:] - 0.5) / rewards.std())


@given(st.integers(1, 4), st.integers(1, 3), reward_values)
def test_batch_std_of_a_constant_batch_is_exactly_zero(g, groups, value):
    rewards = torch.full((g * groups,), value, dtype=torch.float32)
    adv, _ = batch_std_advantages(rewards, g, 0.0)
    assert torch.equal(adv, torch.zeros_like(adv))


# ---------------------------------------------------------------------------- REINFORCE++


@given(grouped_rewards(min_group=1), st.sampled_from([0.0, 1e-6, 0.1]))
def test_reinforce_pp_normalizes_over_the_whole_batch(data, eps):
    rewards, _ = data
    assume(len(rewards) > 1 and (eps > 0 or _spread(rewards)))
    adv, _ = reinforce_pp_advantages(rewards, eps)
    expected = (rewards - rewards.mean()) / (rewards.std() + eps)
    torch.testing.assert_close(adv, expected, atol=1e-9, rtol=1e-7)
    torch.testing.assert_close(adv.mean(), torch.tensor(0.0).double(), atol=1e-9, rtol=0)


def test_reinforce_pp_ignores_groups_by_hand():
    # Two groups, each constant: GRPO has no signal, REINFORCE++ compares across the batch.
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    grpo, _ = group_normalize(rewards, 2, 0.0, normalize_by_std=True)
    ours, _ = reinforce_pp_advantages(rewards, 0.0)
    assert torch.equal(grpo, torch.zeros(4))
    std = rewards.std()
    torch.testing.assert_close(ours, torch.tensor([0.5, 0.5, -0.5, -0.5]) / std)


# ------------------------------------------------------------------------------- dispatch


@given(grouped_rewards(), st.sampled_from([1e-6, 0.1]))
def test_dispatch_matches_the_named_functions(data, eps):
    rewards, g = data
    expected = {
        "grpo": group_normalize(rewards, g, eps, True)[0],
        "dr_grpo": group_normalize(rewards, g, eps, False)[0],
        "rloo": rloo_advantages(rewards, g)[0],
        "batch_std": batch_std_advantages(rewards, g, eps)[0],
        "reinforce_pp": reinforce_pp_advantages(rewards, eps)[0],
    }
    assert set(expected) == set(ADVANTAGE_ESTIMATORS)
    for name, want in expected.items():
        got, meta = compute_advantages(rewards, g, name, eps)
        assert torch.equal(got, want), name
        assert "frac_constant_groups" in meta


def test_dr_grpo_keeps_the_scale_that_grpo_divides_away():
    rewards = torch.tensor([0.0, 4.0, 1.0, 3.0])
    dr, _ = compute_advantages(rewards, 2, "dr_grpo", 1e-6)
    assert torch.equal(dr, torch.tensor([-2.0, 2.0, -1.0, 1.0]))
    grpo, _ = compute_advantages(rewards, 2, "grpo", 0.0)
    torch.testing.assert_close(grpo[:2], grpo[2:])


def test_unknown_estimator_is_named():
    with pytest.raises(ValueError, match="'ppo'"):
        compute_advantages(torch.zeros(4), 2, "ppo", 1e-6)


@given(grouped_rewards(), st.integers(1, 3), st.sampled_from(list(ADVANTAGE_ESTIMATORS)))
def test_vmap_equals_row_by_row(data, copies, estimator):
    rewards, g = data
    batch = torch.stack([rewards * (k + 1) - k for k in range(copies)])
    got, _ = vmap(lambda r: compute_advantages(r, g, estimator, 1e-6))(batch)
    rows = torch.stack([compute_advantages(r, g, estimator, 1e-6)[0] for r in batch])
    torch.testing.assert_close(got, rows)
    # ... and the leading dimension directly, without vmap.
    direct, _ = compute_advantages(batch, g, estimator, 1e-6)
    torch.testing.assert_close(direct, rows)


@given(grouped_rewards(binary=True), st.sampled_from(list(ADVANTAGE_ESTIMATORS)))
def test_every_estimator_gives_a_constant_group_nothing_when_others_vary(data, estimator):
    """A group of equal rewards has no signal under the group estimators (REINFORCE++, which
    has no groups, is the exception by design)."""
    rewards, g = data
    adv, _ = compute_advantages(rewards, g, estimator, 1e-6)
    constant = (rewards.reshape(-1, g) == rewards.reshape(-1, g)[:, :1]).all(1)
    grouped = adv.reshape(-1, g)
    if estimator != "reinforce_pp":
        assert torch.equal(grouped[constant], torch.zeros_like(grouped[constant]))
    assert torch.isfinite(adv).all()
