"""Properties of DAPO's sampling-side functions (dynamic-sampling filter, overlong masking, soft
overlong penalty) and of the control rewards."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

from reasoning_core import (
    ADVANTAGE_ESTIMATORS,
    CONTROL_REWARDS,
    LossInputs,
    LossSettings,
    compute_advantages,
    control_rewards,
    dynamic_sampling_keep,
    grpo_loss,
    mask_truncated,
    random_rewards,
    soft_overlong_penalty,
)


@st.composite
def grouped_rewards(draw, min_group=2):
    group_size = draw(st.integers(min_group, 5))
    groups = draw(st.integers(1, 5))
    n = group_size * groups
    values = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 0.1]), min_size=n, max_size=n))
    return torch.tensor(values), group_size


# ------------------------------------------------------------------------ dynamic sampling


@given(grouped_rewards(min_group=1))
def test_keeps_exactly_the_groups_whose_rewards_differ(data):
    rewards, g = data
    keep = dynamic_sampling_keep(rewards, g)
    expected = [len(set(rewards[i : i + g].tolist())) > 1 for i in range(0, len(rewards), g)]
    assert keep.tolist() == expected


@given(grouped_rewards(), st.sampled_from([e for e in ADVANTAGE_ESTIMATORS if e != "reinforce_pp"]))
def test_never_keeps_a_zero_advantage_group_and_drops_only_those(data, estimator):
    rewards, g = data
    keep = dynamic_sampling_keep(rewards, g)
    adv, _ = compute_advantages(rewards, g, estimator, 1e-6)
    nonzero = (adv.reshape(-1, g) != 0).any(-1)
    assert torch.equal(keep, nonzero)


@given(grouped_rewards(), st.integers(1, 3))
def test_vmap_equals_row_by_row(data, copies):
    rewards, g = data
    batch = torch.stack([rewards.roll(k) for k in range(copies)])
    got = vmap(lambda r: dynamic_sampling_keep(r, g))(batch)
    assert torch.equal(got, torch.stack([dynamic_sampling_keep(r, g) for r in batch]))


def test_group_size_errors_are_named():
    with pytest.raises(ValueError, match="divide"):
        dynamic_sampling_keep(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="group_size"):
        dynamic_sampling_keep(torch.zeros(4), 0)


# ------------------------------------------------------------------------------ overlong


@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_truncated_rows_leave_the_loss_and_the_others_are_untouched(b, t, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, t, generator=gen) > 0.3
    truncated = torch.rand(b, generator=gen) > 0.5
    original = mask.clone()
    out = mask_truncated(mask, truncated)
    assert torch.equal(mask, original)  # the input is not modified
    assert not out[truncated].any()
    assert torch.equal(out[~truncated], mask[~truncated])
    lp = (-torch.rand(b, t, generator=gen)).requires_grad_(True)
    inputs = LossInputs(advantages=torch.randn(b, 1, generator=gen))
    loss, _ = grpo_loss(lp, out, inputs, LossSettings("reinforce_with_baseline"))
    loss.backward()
    assert torch.equal(lp.grad[truncated], torch.zeros_like(lp.grad[truncated]))
    got = vmap(mask_truncated)(mask.unsqueeze(1), truncated.unsqueeze(1))
    assert torch.equal(got.squeeze(1), out)


@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=10),
    st.integers(1, 40),
    st.integers(0, 20),
)
def test_soft_penalty_is_zero_then_linear_then_minus_one(lengths, cache, extra):
    max_length = cache + extra
    got = soft_overlong_penalty(torch.tensor(lengths), max_length, cache)
    for length, value in zip(lengths, got.tolist(), strict=True):
        if length <= max_length - cache:
            assert value == 0.0
        elif length <= max_length:
            assert value == pytest.approx(((max_length - cache) - length) / cache)
            assert -1.0 <= value < 0.0
        else:
            assert value == -1.0


def test_soft_penalty_by_hand_and_errors():
    # DAPO's setting: 20,480 tokens, the last 4,096 penalized.
    got = soft_overlong_penalty(torch.tensor([16384, 18432, 20480, 20481]), 20480, 4096)
    torch.testing.assert_close(got, torch.tensor([0.0, -0.5, -1.0, -1.0]))
    with pytest.raises(ValueError, match="cache_length"):
        soft_overlong_penalty(torch.tensor([1]), 10, 0)
    with pytest.raises(ValueError, match="cache_length"):
        soft_overlong_penalty(torch.tensor([1]), 10, 11)


# ------------------------------------------------------------------------------ controls


@given(st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=32), st.integers(0, 2**31 - 1))
def test_random_rewards_keep_the_rate_of_ones_and_are_seeded(values, seed):
    rewards = torch.tensor(values)
    got = random_rewards(rewards, torch.Generator().manual_seed(seed))
    assert torch.equal(got.sort().values, rewards.sort().values)
    again = random_rewards(rewards, torch.Generator().manual_seed(seed))
    assert torch.equal(got, again)
    assert torch.equal(rewards, torch.tensor(values))  # the input is not modified


def test_random_rewards_are_independent_of_which_response_is_correct():
    """One correct response in 8: over 4,000 draws each position receives the 1 with
    frequency 1/8; the correct response gets it no more often than any other (measured
    against a 5-sigma band of a binomial(4000, 1/8), sigma = 20.9 draws)."""
    rewards = torch.tensor([1.0] + [0.0] * 7)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(8)
    draws = 4000
    for _ in range(draws):
        counts += random_rewards(rewards, gen)
    sigma = (draws * (1 / 8) * (7 / 8)) ** 0.5
    assert (counts - draws / 8).abs().max() < 5 * sigma
    assert counts.sum() == draws


def test_control_rewards_dispatch():
    raw = torch.tensor([1.0, 0.0, 0.0, 1.0])
    fmt = torch.tensor([1.0, 1.0, 0.0, 1.0])
    assert set(CONTROL_REWARDS) == {"none", "random", "format_only"}
    assert torch.equal(control_rewards("none", raw, fmt), raw)
    assert torch.equal(control_rewards("format_only", raw, fmt), fmt)
    shuffled = control_rewards("random", raw, fmt, torch.Generator().manual_seed(3))
    assert torch.equal(shuffled, random_rewards(raw, torch.Generator().manual_seed(3)))
    with pytest.raises(ValueError, match="generator"):
        control_rewards("random", raw, fmt)
    with pytest.raises(ValueError, match="'shuffle'"):
        control_rewards("shuffle", raw, fmt)
    with pytest.raises(ValueError, match="flat"):
        random_rewards(raw.reshape(2, 2), torch.Generator())
