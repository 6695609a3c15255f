"""Properties of the registered off-policy corrections (reasoning_core/offpolicy.py): each is
the plain loss when behaviour, proximal and current policies coincide, row-local (so micro
batches change nothing), and a token it masks, or one off the response mask, never trains."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

from reasoning_core import (
    LENGTH_NORMS,
    OFFPOLICY_CORRECTIONS,
    LossInputs,
    grpo_loss,
    grpo_microbatch_train_step,
    offpolicy_weights,
    tis_weights,
    token_mean_constant,
)
from reasoning_core.registry import correction_settings, markdown_tables
from tests.helpers.pg_batches import LOSS_TYPES, loss_settings

NAMES = list(OFFPOLICY_CORRECTIONS)
# Settings tight enough that random ratios hit every band's edges.
TIGHT = {"decoupled_cap": 1.3, "tis_cap": 1.2, "geo_mask_low": 0.95, "geo_mask_high": 1.05}


@st.composite
def batches(draw, min_batch=1, max_batch=4):
    b = draw(st.integers(min_batch, max_batch))
    t = draw(st.integers(1, 6))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([0.0, 0.05, 0.5, 2.0]))
    current = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 5
    proximal = current + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.3
    behaviour = proximal + torch.randn(b, t, generator=gen, dtype=torch.float64) * scale
    return {
        "current": current,
        "proximal": proximal,
        "behaviour": behaviour,
        "adv": torch.randn(b, 1, generator=gen, dtype=torch.float64),
        "rewards": torch.rand(b, 1, generator=gen, dtype=torch.float64),
        "mask": torch.rand(b, t, generator=gen) > 0.3,
    }


def _loss_and_grad(b, loss_type, norm, weights, old):
    lp = b["current"].clone().requires_grad_(True)
    constant = float(token_mean_constant(b["mask"])) if norm == "token_mean" else 7.0
    settings = loss_settings(loss_type, length_normalization=norm, normalize_constant=constant)
    inputs = LossInputs(
        raw_rewards=b["rewards"], advantages=b["adv"], old_log_probs=old, token_weights=weights
    )
    loss, _ = grpo_loss(lp, b["mask"], inputs, settings)
    loss.backward()
    return loss.detach(), lp.grad


def test_every_correction_is_documented_with_a_paper_and_its_settings():
    table = markdown_tables()["offpolicy_corrections"]
    for name, entry in OFFPOLICY_CORRECTIONS.items():
        assert f"`{name}`" in table
        assert entry.formula
        if name != "none":
            assert "20" in entry.paper  # a year: the paper is cited
        for param in entry.params:
            assert param.name in table


@pytest.mark.parametrize(
    ("name", "setting", "value"),
    [
        ("tis", "tis_cap", 0.5),
        ("tis", "tis_cap", math.nan),
        ("decoupled", "decoupled_cap", 1.0),
        ("icepop", "icepop_low", 1.5),
        ("icepop", "icepop_high", 0.9),
        ("icepop", "icepop_high", math.inf),
        ("geo_mask", "geo_mask_low", 0.0),
        ("geo_mask", "geo_mask_high", 1.0),
    ],
)
def test_a_setting_outside_its_bounds_is_refused_by_name(name, setting, value):
    with pytest.raises(ValueError, match=setting):
        correction_settings(name, {setting: value})


def test_defaults_fill_missing_settings():
    assert correction_settings("icepop", {}) == {"icepop_low": 0.5, "icepop_high": 5.0}
    assert correction_settings("decoupled", {}) == {"decoupled_cap": None}
    with pytest.raises(ValueError, match="unknown offpolicy_correction"):
        correction_settings("nope", {})


@given(
    batches(), st.sampled_from(NAMES), st.sampled_from(LOSS_TYPES), st.sampled_from(LENGTH_NORMS)
)
def test_coinciding_policies_give_the_plain_loss_bit_for_bit(b, name, loss_type, norm):
    """Behaviour = proximal: every weight is exactly 1, and the weighted loss and its gradient
    equal the unweighted ones exactly (old log-probs = proximal = the current policy's too)."""
    b["proximal"] = b["current"].clone()
    weights, meta = offpolicy_weights(name, b["proximal"], b["proximal"].clone(), b["mask"], TIGHT)
    assert torch.equal(weights, torch.ones_like(weights))
    assert float(meta["masked"]) == 0.0 and float(meta["truncated"]) == 0.0
    plain = _loss_and_grad(b, loss_type, norm, None, b["proximal"])
    weighted = _loss_and_grad(b, loss_type, norm, weights, b["proximal"])
    assert torch.equal(plain[0], weighted[0])
    assert torch.equal(plain[1], weighted[1])


@given(batches(min_batch=2), st.sampled_from(NAMES), st.data())
def test_weights_are_row_local(b, name, data):
    """A batch's weights are its rows' weights computed in any split (micro batches), and
    under vmap one row at a time."""
    whole, _ = offpolicy_weights(name, b["proximal"], b["behaviour"], b["mask"], TIGHT)
    cut = data.draw(st.integers(1, len(b["mask"]) - 1))
    parts = [
        offpolicy_weights(name, b["proximal"][s], b["behaviour"][s], b["mask"][s], TIGHT)[0]
        for s in (slice(0, cut), slice(cut, None))
    ]
    assert torch.equal(torch.cat(parts), whole)
    rows = vmap(lambda p, q, m: offpolicy_weights(name, p, q, m, TIGHT)[0])(
        b["proximal"], b["behaviour"], b["mask"]
    )
    torch.testing.assert_close(rows, whole, rtol=0, atol=1e-15)


@given(
    batches(min_batch=4, max_batch=4),
    st.sampled_from(NAMES),
    st.sampled_from(LOSS_TYPES),
    st.sampled_from(LENGTH_NORMS),
)
def test_micro_batches_accumulate_to_the_whole_batch_step(b, name, loss_type, norm):
    """The weighted loss accumulated over k micro batches (weights computed per micro batch)
    has the gradient of one step over the batch (weights computed once)."""
    mask = b["mask"]
    constant = float(token_mean_constant(mask)) if norm == "token_mean" else 5.0
    settings = loss_settings(loss_type, length_normalization=norm, normalize_constant=constant)

    def run(k):
        policy = b["current"].clone().requires_grad_(True)
        pieces = zip(
            policy.chunk(k), mask.chunk(k), b["adv"].chunk(k), b["rewards"].chunk(k),
            b["proximal"].chunk(k), b["behaviour"].chunk(k), strict=True,
        )  # fmt: skip
        for lp, m, a, r, prox, behav in pieces:
            w, _ = offpolicy_weights(name, prox, behav, m, TIGHT)
            inputs = LossInputs(raw_rewards=r, advantages=a, old_log_probs=prox, token_weights=w)
            grpo_microbatch_train_step(lp, m, k, inputs=inputs, settings=settings)
        return policy.grad

    whole = run(1)
    for k in (2, 4):
        torch.testing.assert_close(run(k), whole)


@given(batches(), st.sampled_from(NAMES), st.sampled_from(LOSS_TYPES))
def test_masked_tokens_never_train(b, name, loss_type):
    """A token off the response mask, or one the correction weighs 0, has zero gradient."""
    weights, _ = offpolicy_weights(name, b["proximal"], b["behaviour"], b["mask"], TIGHT)
    _, grad = _loss_and_grad(b, loss_type, "masked_mean", weights, b["proximal"])
    silent = ~b["mask"] | (weights == 0)
    assert torch.equal(grad[silent], torch.zeros_like(grad[silent]))
    assert torch.isfinite(grad).all()


@given(batches())
def test_each_correction_is_its_formula(b):
    prox, behav, mask = b["proximal"], b["behaviour"], b["mask"]
    ratio = torch.exp(prox - behav)
    on = mask

    tis, meta = offpolicy_weights("tis", prox, behav, mask, TIGHT)
    ref, ref_meta = tis_weights(prox, behav, mask, cap=1.2)
    assert torch.equal(tis, ref)
    torch.testing.assert_close(meta["truncated"], ref_meta["tis_clipped"])

    dec, meta = offpolicy_weights("decoupled", prox, behav, mask, TIGHT)
    want = torch.where(ratio > 1.3, torch.zeros_like(ratio), ratio)
    assert torch.equal(dec[on], want[on])
    uncapped, _ = offpolicy_weights("decoupled", prox, behav, mask, {})
    assert torch.equal(uncapped[on], ratio[on])

    ice, meta = offpolicy_weights("icepop", prox, behav, mask, {"icepop_high": 1.5})
    inside = (ratio >= 0.5) & (ratio <= 1.5)
    assert torch.equal(ice[on & inside], ratio[on & inside])
    assert (ice[on & ~inside] == 0).all()
    n = int(on.sum())
    assert float(meta["masked"]) == pytest.approx(int((on & ~inside).sum()) / max(1, n))

    geo, meta = offpolicy_weights("geo_mask", prox, behav, mask, TIGHT)
    for row in range(len(mask)):
        if not mask[row].any():
            continue
        g = math.exp(float((prox - behav)[row][mask[row]].mean()))
        kept = 0.95 <= g <= 1.05
        assert torch.equal(geo[row][mask[row]], torch.full_like(geo[row][mask[row]], float(kept)))
    for w in (tis, dec, ice, geo):  # off the mask: exactly 1
        assert (w[~on] == 1).all()
