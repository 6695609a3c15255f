"""Tokens outside the response mask (a tool's observation in a multi-turn episode) are never
trained on: whatever their log-probs, every registered loss, length normalization and the KL
term give the same loss and no gradient at them; the entropy mean and the engine check do not
count them."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from reasoning_core import (
    LENGTH_NORMS,
    LossInputs,
    grpo_microbatch_train_step,
    logprob_mismatch,
    masked_mean,
    tis_weights,
    token_mean_constant,
)
from tests.helpers.pg_batches import LOSS_TYPES, loss_settings, pg_batches


def replaced(x: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """``x`` with the values outside ``mask`` replaced by other log-probs in [-30, 0]."""
    other = -30 * torch.rand(x.shape, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
    return torch.where(mask, x, other)


@given(
    pg_batches(min_batch=2),
    st.sampled_from(LOSS_TYPES),
    st.sampled_from(LENGTH_NORMS),
    st.sampled_from([0.0, 0.1]),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_masked_out_tokens_change_no_loss_and_get_no_gradient(b, loss_type, norm, kl, tis, seed):
    mask = b["mask"]
    constant = token_mean_constant(mask) if norm == "token_mean" else 7.0
    settings = loss_settings(
        loss_type, length_normalization=norm, normalize_constant=constant, kl_coef=kl
    )
    weights = torch.rand(mask.shape, dtype=torch.float64) * 2 if tis else None

    def step(policy, old, ref, w):
        policy = policy.clone().requires_grad_(True)
        inputs = LossInputs(
            raw_rewards=b["rewards"],
            advantages=b["adv"],
            old_log_probs=old,
            ref_log_probs=ref,
            token_weights=w,
        )
        loss, _ = grpo_microbatch_train_step(policy, mask, 1, inputs=inputs, settings=settings)
        return loss, policy.grad

    loss, grad = step(b["log_probs"], b["old"], b["ref"], weights)
    other = [replaced(b[k], mask, seed + i) for i, k in enumerate(("log_probs", "old", "ref"))]
    w2 = None if weights is None else torch.where(mask, weights, torch.full_like(weights, 9.0))
    loss2, grad2 = step(*other, w2)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert torch.equal(grad[~mask], torch.zeros_like(grad[~mask]))
    assert torch.equal(grad2[~mask], torch.zeros_like(grad2[~mask]))
    torch.testing.assert_close(loss2, loss, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad2, grad, rtol=0, atol=1e-12)


@given(pg_batches(min_batch=2), st.integers(0, 2**31 - 1))
def test_masked_out_tokens_do_not_enter_entropy_or_the_engine_check(b, seed):
    mask = b["mask"]
    entropy = -b["log_probs"]  # any per-token values
    torch.testing.assert_close(  # NaN for an empty mask, both times
        masked_mean(entropy, mask),
        masked_mean(replaced(entropy, mask, seed), mask),
        rtol=0,
        atol=0,
        equal_nan=True,
    )
    engine = b["old"]
    stats = logprob_mismatch(b["log_probs"], engine, mask)
    stats2 = logprob_mismatch(b["log_probs"], replaced(engine, mask, seed), mask)
    for key in stats:
        torch.testing.assert_close(
            torch.as_tensor(stats[key]), torch.as_tensor(stats2[key]), rtol=0, atol=0
        )
    weights, _ = tis_weights(b["log_probs"], replaced(engine, mask, seed), mask, cap=2.0)
    assert torch.equal(weights[~mask], torch.ones_like(weights[~mask]))
