"""Properties of the engine/policy mismatch statistics and of truncated importance sampling."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import grad, vmap

from reasoning_core import (
    RATIO_BAND,
    LossInputs,
    apply_token_weights,
    grpo_loss,
    grpo_microbatch_train_step,
    logprob_mismatch,
    mismatch_warning,
    tis_weights,
)
from reasoning_core.registry import policy_loss
from tests.helpers.pg_batches import LOSS_TYPES, loss_settings

CAPS = st.sampled_from([1.0, 1.5, 2.0, 5.0])


@st.composite
def batches(draw, min_batch=1, dtype=torch.float64):
    b = draw(st.integers(min_batch, 4))
    t = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-6, 0.1, 1.0, 3.0]))
    gen = torch.Generator().manual_seed(seed)
    policy = -torch.rand(b, t, generator=gen, dtype=dtype) * 5
    old = policy + torch.randn(b, t, generator=gen, dtype=dtype) * 0.3
    engine = old + torch.randn(b, t, generator=gen, dtype=dtype) * scale
    mask = torch.rand(b, t, generator=gen) > 0.3
    return {
        "policy": policy,
        "old": old,
        "engine": engine,
        "adv": torch.randn(b, 1, generator=gen, dtype=dtype),
        "rewards": torch.rand(b, 1, generator=gen, dtype=dtype),
        "mask": mask,
    }


def _inputs(b, token_weights=None):
    return LossInputs(
        raw_rewards=b["rewards"], advantages=b["adv"], old_log_probs=b["old"],
        token_weights=token_weights,
    )  # fmt: skip


def _objective_and_grad(b, loss_type, length_norm, weights):
    lp = b["policy"].clone().requires_grad_(True)
    settings = loss_settings(loss_type, length_normalization=length_norm, normalize_constant=7.0)
    loss, meta = grpo_loss(lp, b["mask"], _inputs(b, weights), settings)
    loss.backward()
    return loss.detach(), lp.grad, meta


# -- the mismatch statistics -----------------------------------------------------------------


def _reference_stats(policy, engine, mask):
    diffs = [
        float(p - e)
        for p, e, m in zip(policy.flatten(), engine.flatten(), mask.flatten(), strict=True)
        if m
    ]
    if not diffs:
        return 0.0, 0.0, 0.0
    low, high = RATIO_BAND
    outside = sum(1 for d in diffs if not low <= math.exp(d) <= high)
    return (
        sum(abs(d) for d in diffs) / len(diffs),
        max(abs(d) for d in diffs),
        outside / len(diffs),
    )


@given(batches())
def test_mismatch_statistics_are_those_of_the_masked_tokens(b):
    stats = logprob_mismatch(b["policy"], b["engine"], b["mask"])
    mean, largest, outside = _reference_stats(b["policy"], b["engine"], b["mask"])
    assert stats["logprob_diff_mean"].item() == pytest.approx(mean, rel=1e-12, abs=1e-15)
    assert stats["logprob_diff_max"].item() == pytest.approx(largest, rel=1e-12, abs=1e-15)
    assert stats["ratio_outside"].item() == pytest.approx(outside, abs=1e-12)


def test_mismatch_statistics_on_known_values():
    policy = torch.tensor([[-1.0, -2.0, -3.0, -4.0]])
    engine = torch.tensor([[-1.0, -1.0, -4.0, -9.0]])  # diffs 0, -1, +1, +5 (the last masked)
    mask = torch.tensor([[1, 1, 1, 0]])
    stats = logprob_mismatch(policy, engine, mask)
    assert stats["logprob_diff_mean"].item() == pytest.approx(2 / 3)
    assert stats["logprob_diff_max"].item() == 1.0
    # exp(-1) = 0.37 < 0.5 and exp(1) = 2.72 > 2: two of three tokens outside the band
    assert stats["ratio_outside"].item() == pytest.approx(2 / 3)


def test_the_band_ends_count_as_inside():
    """Ratios of exactly 0.5 and 2 lie in [0.5, 2]; just past them they do not."""
    for dtype in (torch.float32, torch.float64):
        engine = torch.zeros(1, 4, dtype=dtype)
        policy = torch.tensor([[math.log(0.5), math.log(2.0), -0.7, 0.7]], dtype=dtype)
        assert torch.exp(policy - engine)[0, :2].tolist() == [0.5, 2.0]
        stats = logprob_mismatch(policy, engine, torch.ones(1, 4))
        assert stats["ratio_outside"].item() == 0.5


def test_mismatch_statistics_are_zero_without_a_response_token():
    policy = torch.randn(2, 3)
    stats = logprob_mismatch(policy, policy + 5, torch.zeros(2, 3, dtype=torch.bool))
    assert {k: v.item() for k, v in stats.items()} == {
        "logprob_diff_mean": 0.0,
        "logprob_diff_max": 0.0,
        "ratio_outside": 0.0,
    }
    empty = torch.zeros(2, 0)
    stats = logprob_mismatch(empty, empty, empty.bool())
    assert all(v.item() == 0.0 for v in stats.values())


@given(batches())
def test_masked_tokens_are_ignored_by_the_statistics_and_the_weights(b):
    garbage = torch.full_like(b["engine"], float("nan"))
    garbage[..., ::2] = float("inf")
    engine = torch.where(b["mask"], b["engine"], garbage)
    old = torch.where(b["mask"], b["old"], -garbage)
    for key, value in logprob_mismatch(old, engine, b["mask"]).items():
        assert torch.equal(value, logprob_mismatch(b["old"], b["engine"], b["mask"])[key])
    weights, meta = tis_weights(old, engine, b["mask"])
    clean_weights, clean_meta = tis_weights(b["old"], b["engine"], b["mask"])
    assert torch.equal(weights, clean_weights)
    assert torch.equal(weights[~b["mask"]], torch.ones_like(weights[~b["mask"]]))
    assert all(torch.equal(meta[k], clean_meta[k]) for k in meta)


@given(batches(min_batch=2))
def test_statistics_and_weights_under_vmap_equal_row_by_row(b):
    rows = range(b["policy"].shape[0])
    stats = vmap(logprob_mismatch)(b["policy"], b["engine"], b["mask"])
    for key, value in stats.items():
        expected = torch.stack(
            [logprob_mismatch(b["policy"][i], b["engine"][i], b["mask"][i])[key] for i in rows]
        )
        torch.testing.assert_close(value, expected, rtol=0, atol=0)
    weights, meta = vmap(lambda o, e, m: tis_weights(o, e, m, cap=2.0))(
        b["old"], b["engine"], b["mask"]
    )
    for i in rows:
        row_weights, row_meta = tis_weights(b["old"][i], b["engine"][i], b["mask"][i])
        assert torch.equal(weights[i], row_weights)
        assert all(torch.equal(meta[k][i], row_meta[k]) for k in meta)


# -- the weights --------------------------------------------------------------------------------


@given(batches(), CAPS)
def test_weights_are_the_truncated_ratio_and_never_above_the_cap(b, cap):
    weights, meta = tis_weights(b["old"], b["engine"], b["mask"], cap=cap)
    assert weights.max().item() <= cap
    expected = torch.clamp(torch.exp(b["old"] - b["engine"]), max=cap)
    assert torch.equal(weights[b["mask"]], expected[b["mask"]])
    ratio = torch.exp(b["old"] - b["engine"])[b["mask"]]
    if ratio.numel():
        assert meta["tis_weight_mean"].item() == pytest.approx(
            expected[b["mask"]].mean().item(), rel=1e-12
        )
        assert meta["tis_clipped"].item() == pytest.approx((ratio > cap).double().mean().item())
    else:
        assert meta["tis_weight_mean"].item() == 0.0 and meta["tis_clipped"].item() == 0.0


def test_weights_are_detached_and_the_cap_must_be_at_least_one():
    old = torch.randn(2, 3, requires_grad=True)
    engine = torch.randn(2, 3, requires_grad=True)
    weights, meta = tis_weights(old, engine, torch.ones(2, 3))
    assert not weights.requires_grad and not any(v.requires_grad for v in meta.values())
    assert not apply_token_weights(torch.zeros(2, 3), engine).requires_grad
    for bad in (0.5, 0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="tis_cap must be >= 1"):
            tis_weights(old, engine, torch.ones(2, 3), cap=bad)


@given(
    batches(),
    CAPS,
    st.sampled_from(LOSS_TYPES),
    st.sampled_from(["masked_mean", "masked_normalize"]),
)
def test_agreeing_engine_leaves_loss_and_gradient_unchanged_bitwise(b, cap, loss_type, norm):
    for dtype in (torch.float64, torch.float32):
        cast = {k: v.to(dtype) if v.is_floating_point() else v for k, v in b.items()}
        weights, meta = tis_weights(cast["old"], cast["old"].clone(), cast["mask"], cap=cap)
        assert torch.equal(weights, torch.ones_like(weights))
        assert meta["tis_clipped"].item() == 0.0
        plain_loss, plain_grad, _ = _objective_and_grad(cast, loss_type, norm, None)
        loss, grad_, _ = _objective_and_grad(cast, loss_type, norm, weights)
        assert torch.equal(loss, plain_loss)
        assert torch.equal(grad_, plain_grad)


@given(
    batches(),
    CAPS,
    st.sampled_from(LOSS_TYPES),
    st.sampled_from(["masked_mean", "masked_normalize"]),
)
def test_each_tokens_gradient_is_scaled_by_its_weight(b, cap, loss_type, norm):
    weights, _ = tis_weights(b["old"], b["engine"], b["mask"], cap=cap)
    _, plain_grad, _ = _objective_and_grad(b, loss_type, norm, None)
    _, weighted_grad, _ = _objective_and_grad(b, loss_type, norm, weights)
    torch.testing.assert_close(weighted_grad, weights * plain_grad, rtol=1e-12, atol=1e-15)


@given(batches(), st.sampled_from(LOSS_TYPES))
def test_the_per_token_loss_is_weighted_token_by_token(b, loss_type):
    weights, _ = tis_weights(b["old"], b["engine"], b["mask"])
    settings = loss_settings(loss_type)

    def token_loss_of(x):
        return policy_loss(x, b["mask"], _inputs(b), settings)[0]

    token_loss = token_loss_of(b["policy"])
    weighted = apply_token_weights(token_loss, weights)
    assert torch.equal(weighted, token_loss * weights)
    lp = b["policy"].clone().requires_grad_(True)
    per_token = grad(lambda x: apply_token_weights(token_loss_of(x), weights).sum())(lp)
    plain = grad(lambda x: token_loss_of(x).sum())(lp)
    torch.testing.assert_close(per_token, weights * plain, rtol=1e-12, atol=1e-15)


@given(batches(), st.sampled_from(LOSS_TYPES))
def test_masked_tokens_do_not_reach_the_weighted_loss(b, loss_type):
    weights, _ = tis_weights(b["old"], b["engine"], b["mask"])
    spoiled = torch.where(b["mask"], weights, torch.full_like(weights, 1e6))
    loss, grad_, _ = _objective_and_grad(b, loss_type, "masked_mean", weights)
    spoiled_loss, spoiled_grad, _ = _objective_and_grad(b, loss_type, "masked_mean", spoiled)
    assert torch.equal(loss, spoiled_loss)
    assert torch.equal(grad_, spoiled_grad)
    assert torch.equal(grad_[~b["mask"]], torch.zeros_like(grad_[~b["mask"]]))


@given(batches(min_batch=2), st.sampled_from(LOSS_TYPES))
def test_weighted_objective_under_vmap_equals_row_by_row(b, loss_type):
    weights, _ = tis_weights(b["old"], b["engine"], b["mask"])

    settings = loss_settings(loss_type)

    def row_loss(lp, mask, w, adv, rewards, old):
        row = {"adv": adv, "rewards": rewards, "old": old}
        return grpo_loss(lp, mask, _inputs(row, w), settings)[0]

    args = (b["policy"], b["mask"], weights, b["adv"], b["rewards"], b["old"])
    batched = vmap(grad(row_loss))(*args)
    for i in range(b["policy"].shape[0]):
        torch.testing.assert_close(batched[i], grad(row_loss)(*(a[i] for a in args)))


def test_microbatch_train_step_passes_the_weights_on():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([[1.0], [-2.0]])
    weights = torch.tensor([[0.5, 2.0, 1.0], [1.0, 0.25, 1.5]])

    def step(w):
        lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.5, -2.5]], requires_grad=True)
        inputs = LossInputs(advantages=adv, token_weights=w)
        settings = loss_settings("reinforce_with_baseline")
        grpo_microbatch_train_step(lp, mask, 2, inputs=inputs, settings=settings)
        return lp.grad

    torch.testing.assert_close(step(weights), weights * step(None))


# -- the warning ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("diff_mean", "threshold"),
    [(0.01, None), (0.01, 0.05), (0.05, 0.05), (float("nan"), 0.05), (0.0, 0.0)],
)
def test_no_warning_at_or_below_the_threshold_or_when_off(diff_mean, threshold):
    assert mismatch_warning(diff_mean, threshold) is None


def test_the_warning_names_the_value_the_setting_and_the_likely_causes():
    message = mismatch_warning(0.4321, 0.05)
    assert message is not None
    for part in ("0.432", "logprob_diff_warn is 0.05", "stale weights", "dtype", "bfloat16"):
        assert part in message
    assert "temperature or top-p" in message
    assert mismatch_warning(0.0500001, 0.05) is not None
