"""Properties of the per-token KL estimators (k1, k2, k3) against a frozen reference."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

from reasoning_core import KL_ESTIMATORS, kl_penalty

log_probs = st.floats(-30.0, 0.0, allow_nan=False)


@st.composite
def pairs(draw):
    n = draw(st.integers(1, 8))
    policy = draw(st.lists(log_probs, min_size=n, max_size=n))
    ref = draw(st.lists(log_probs, min_size=n, max_size=n))
    return torch.tensor(policy, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64)


@given(pairs())
def test_the_three_estimators_match_their_formulas(pair):
    policy, ref = pair
    delta = ref - policy
    torch.testing.assert_close(kl_penalty(policy, ref, "k1"), policy - ref)
    torch.testing.assert_close(kl_penalty(policy, ref, "k2"), 0.5 * delta**2)
    torch.testing.assert_close(kl_penalty(policy, ref, "k3"), torch.exp(delta) - 1 - delta)


@given(pairs(), st.sampled_from(["k2", "k3"]))
def test_k2_and_k3_are_never_negative(pair, estimator):
    policy, ref = pair
    assert (kl_penalty(policy, ref, estimator) >= 0).all()
    assert (kl_penalty(policy.float(), ref.float(), estimator) >= 0).all()


def test_k1_can_be_negative():
    assert kl_penalty(torch.tensor([-2.0]), torch.tensor([-1.0]), "k1") < 0


@given(st.lists(log_probs, min_size=1, max_size=8), st.sampled_from(KL_ESTIMATORS))
def test_zero_at_equal_policies_with_a_zero_gradient(values, estimator):
    lp = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    kl = kl_penalty(lp, lp.detach(), estimator)
    assert torch.equal(kl, torch.zeros_like(kl))
    kl.sum().backward()
    expected = torch.ones_like(lp) if estimator == "k1" else torch.zeros_like(lp)
    assert torch.equal(lp.grad, expected)


@given(st.integers(2, 6), st.integers(0, 2**31 - 1))
def test_k1_and_k3_are_unbiased_and_k2_is_not(vocab, seed):
    """Over a categorical distribution, the expectation under the policy is exact (a sum over
    the vocabulary): k1 and k3 average to KL(pi || ref), k2 to something else in general."""
    gen = torch.Generator().manual_seed(seed)
    policy = torch.log_softmax(torch.randn(vocab, generator=gen, dtype=torch.float64) * 2, 0)
    ref = torch.log_softmax(torch.randn(vocab, generator=gen, dtype=torch.float64) * 2, 0)
    p = policy.exp()
    kl = (p * (policy - ref)).sum()
    for estimator in ("k1", "k3"):
        torch.testing.assert_close((p * kl_penalty(policy, ref, estimator)).sum(), kl)
    assert (p * kl_penalty(policy, ref, "k2")).sum() >= 0


def test_k2_is_biased_by_hand():
    # Two tokens, pi = (1/2, 1/2), ref = (1/4, 3/4): KL = 0.5 log 2 + 0.5 log(2/3).
    policy = torch.tensor([0.5, 0.5], dtype=torch.float64).log()
    ref = torch.tensor([0.25, 0.75], dtype=torch.float64).log()
    kl = 0.5 * torch.log(torch.tensor(2.0, dtype=torch.float64)) + 0.5 * torch.log(
        torch.tensor(2 / 3, dtype=torch.float64)
    )
    k2 = (0.5 * kl_penalty(policy, ref, "k2")).sum()
    assert abs(k2 - kl) > 1e-3


@given(pairs(), st.sampled_from(KL_ESTIMATORS))
def test_no_gradient_reaches_the_reference(pair, estimator):
    policy, ref = pair
    ref = ref.clone().requires_grad_(True)
    policy = policy.clone().requires_grad_(True)
    kl_penalty(policy, ref, estimator).sum().backward()
    assert ref.grad is None and policy.grad is not None


@given(st.integers(1, 3), st.integers(1, 5), st.sampled_from(KL_ESTIMATORS))
def test_vmap_equals_row_by_row(b, t, estimator):
    gen = torch.Generator().manual_seed(b * 10 + t)
    policy, ref = -torch.rand(2, b, t, generator=gen) * 4
    got = vmap(lambda p, r: kl_penalty(p, r, estimator))(policy, ref)
    rows = torch.stack([kl_penalty(policy[i], ref[i], estimator) for i in range(b)])
    torch.testing.assert_close(got, rows)


def test_unknown_estimator_is_named():
    with pytest.raises(ValueError, match="'k4'"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")
