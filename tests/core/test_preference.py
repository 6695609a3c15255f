"""Properties of the DPO core (reasoning_core.preference): sequence log-probs and the per-pair
DPO loss."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

from reasoning_core import dpo_loss, sequence_log_probs

BETAS = st.sampled_from([0.01, 0.1, 0.5, 1.0, 2.0])


@st.composite
def pairs(draw):
    """Four sequence log-probs per pair (float64, moderate so no sigmoid saturates) and the
    chosen responses' token counts."""
    b = draw(st.integers(1, 6))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))

    def lp():
        return -torch.rand(b, generator=gen, dtype=torch.float64) * 20

    lengths = torch.randint(0, 5, (b,), generator=gen)
    return {"pc": lp(), "pr": lp(), "rc": lp(), "rr": lp(), "lengths": lengths}


def _loss(p, beta, **kw):
    return dpo_loss(p["pc"], p["pr"], p["rc"], p["rr"], beta, **kw)


@given(pairs(), BETAS)
def test_policy_equal_to_reference_gives_log_two_and_zero_margin(p, beta):
    loss, meta = dpo_loss(p["pc"], p["pr"], p["pc"].clone(), p["pr"].clone(), beta)
    torch.testing.assert_close(loss, torch.full_like(loss, math.log(2.0)))
    assert torch.equal(meta["margin"], torch.zeros_like(loss))
    assert torch.equal(meta["accuracy"], torch.zeros_like(loss))  # a tie is not a preference


@given(pairs(), BETAS)
def test_swapping_chosen_and_rejected_negates_the_margin(p, beta):
    _, meta = _loss(p, beta)
    _, swapped = dpo_loss(p["pr"], p["pc"], p["rr"], p["rc"], beta)
    torch.testing.assert_close(swapped["margin"], -meta["margin"])
    torch.testing.assert_close(swapped["chosen_rewards"], meta["rejected_rewards"])
    # Exactly one of the two orders is preferred unless the margin is 0.
    nonzero = meta["margin"] != 0
    assert torch.equal(
        (meta["accuracy"] + swapped["accuracy"])[nonzero], torch.ones_like(meta["margin"])[nonzero]
    )


@given(pairs(), BETAS)
def test_gradient_raises_chosen_and_lowers_rejected(p, beta):
    chosen = p["pc"].clone().requires_grad_(True)
    rejected = p["pr"].clone().requires_grad_(True)
    reference = p["rc"].clone().requires_grad_(True)
    loss, meta = dpo_loss(chosen, rejected, reference, p["rr"], beta)
    loss.sum().backward()
    assert (chosen.grad < 0).all()  # descending the loss raises log pi(y_w)
    assert (rejected.grad > 0).all()  # and lowers log pi(y_l)
    assert reference.grad is None or torch.equal(reference.grad, torch.zeros_like(reference))
    # The weight is beta * sigmoid(-margin), the same on both.
    want = -beta * torch.sigmoid(-meta["margin"])
    torch.testing.assert_close(chosen.grad, want)
    torch.testing.assert_close(rejected.grad, -want)


@given(pairs(), BETAS, st.sampled_from([0.5, 2.0, 3.0]))
def test_beta_scales_the_margin_and_the_rewards(p, beta, factor):
    _, meta = _loss(p, beta)
    _, scaled = _loss(p, beta * factor)
    for key in ("margin", "chosen_rewards", "rejected_rewards"):
        torch.testing.assert_close(scaled[key], factor * meta[key])


@given(pairs(), BETAS)
def test_loss_value_matches_the_formula(p, beta):
    loss, meta = _loss(p, beta)
    z = beta * ((p["pc"] - p["rc"]) - (p["pr"] - p["rr"]))
    torch.testing.assert_close(loss, -torch.log(torch.sigmoid(z)))
    torch.testing.assert_close(meta["dpo_loss"], loss)
    assert torch.equal(meta["accuracy"], (z > 0).double())


@given(pairs(), BETAS, st.sampled_from([0.1, 1.0]))
def test_nll_term_is_the_chosen_mean_token_nll(p, beta, weight):
    loss, meta = _loss(p, beta, nll_weight=weight, chosen_lengths=p["lengths"])
    plain, _ = _loss(p, beta)
    n = p["lengths"].double()
    want_nll = torch.where(n > 0, -p["pc"] / n.clamp(min=1), torch.zeros_like(n))
    torch.testing.assert_close(meta["nll"], want_nll)
    torch.testing.assert_close(loss, plain + weight * want_nll)
    # An empty chosen response adds nothing and sends no NLL gradient.
    chosen = p["pc"].clone().requires_grad_(True)
    nll_only = dpo_loss(chosen, p["pr"], p["rc"], p["rr"], beta, weight, p["lengths"])[0]
    nll_only.sum().backward()
    dpo_part = -beta * torch.sigmoid(-meta["margin"])
    torch.testing.assert_close(chosen.grad, dpo_part - weight / n.clamp(min=1) * (n > 0))


@given(pairs(), BETAS, st.sampled_from([0.0, 0.5]))
def test_vmap_equals_row_by_row(p, beta, weight):
    batched, meta = _loss(p, beta, nll_weight=weight, chosen_lengths=p["lengths"])

    def one(pc, pr, rc, rr, n):
        return dpo_loss(pc, pr, rc, rr, beta, weight, n)

    mapped, mapped_meta = vmap(one)(p["pc"], p["pr"], p["rc"], p["rr"], p["lengths"])
    rows = [
        one(p["pc"][i], p["pr"][i], p["rc"][i], p["rr"][i], p["lengths"][i])[0]
        for i in range(len(p["pc"]))
    ]
    torch.testing.assert_close(mapped, torch.stack(rows))
    torch.testing.assert_close(mapped, batched)
    for key in meta:
        torch.testing.assert_close(mapped_meta[key], meta[key])


@given(st.integers(1, 4), st.integers(1, 7), st.integers(0, 2**31 - 1))
def test_sequence_log_probs_sums_the_masked_tokens(b, t, seed):
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 3
    mask = torch.rand(b, t, generator=gen) > 0.4
    got = sequence_log_probs(lp, mask)
    want = torch.tensor([sum(float(lp[i, j]) for j in range(t) if mask[i, j]) for i in range(b)])
    torch.testing.assert_close(got, want.double())
    torch.testing.assert_close(vmap(sequence_log_probs)(lp, mask), got)
    # Gradient: 1 on the response tokens, 0 on the others.
    x = lp.clone().requires_grad_(True)
    sequence_log_probs(x, mask).sum().backward()
    assert torch.equal(x.grad, mask.double())


def test_large_margins_do_not_overflow():
    big = torch.tensor([500.0, -500.0])
    zero = torch.zeros(2)
    loss, meta = dpo_loss(big, -big, zero, zero, 1.0)
    assert torch.isfinite(loss).all()
    torch.testing.assert_close(loss, torch.tensor([0.0, 1000.0]))
    assert meta["accuracy"].tolist() == [1.0, 0.0]


def test_bad_arguments_are_named():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(x, x, x, x, 0.0)
    with pytest.raises(ValueError, match="nll_weight"):
        dpo_loss(x, x, x, x, 0.1, nll_weight=-1.0)
    with pytest.raises(ValueError, match="chosen_lengths"):
        dpo_loss(x, x, x, x, 0.1, nll_weight=1.0)
    with pytest.raises(ValueError, match="reference_rejected_log_probs"):
        dpo_loss(x, x, x, torch.zeros(2), 0.1)
    with pytest.raises(ValueError, match="response_mask"):
        sequence_log_probs(torch.zeros(2, 3), torch.ones(2, 4))
