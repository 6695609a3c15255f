"""Properties of the policy-gradient / SFT losses and the microbatch train steps."""

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from torch.func import grad, vmap

from reasoning_core import (
    LENGTH_NORMS,
    LossInputs,
    LossSettings,
    compute_grpo_clip_loss,
    compute_grpo_no_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    grpo_loss,
    grpo_microbatch_train_step,
    masked_mean,
    masked_normalize,
    sft_loss,
    sft_microbatch_train_step,
)
from reasoning_core.masked import masked_mean_or_zero
from reasoning_core.registry import policy_loss
from tests.helpers.pg_batches import (
    LOSS_TYPES,
    grad_of,
    loss_inputs,
    loss_settings,
    needs,
    pg_batches,
)

batches = pg_batches
_grad_of = grad_of


@given(batches(), st.sampled_from([0.0, 0.1, 0.2, 0.5]))
def test_on_policy_grpo_clip_gradient_equals_reinforce(b, cliprange):
    clip = _grad_of(
        lambda lp: compute_grpo_clip_loss(b["adv"], lp, b["log_probs"], cliprange)[0],
        b["log_probs"],
    )
    reinforce = _grad_of(
        lambda lp: compute_naive_policy_gradient_loss(b["adv"], lp), b["log_probs"]
    )
    torch.testing.assert_close(clip, reinforce)


@given(batches())
def test_grpo_no_clip_with_equal_old_and_new_has_the_reinforce_gradient(b):
    no_clip = _grad_of(
        lambda lp: compute_grpo_no_clip_loss(b["adv"], lp, b["log_probs"])[0], b["log_probs"]
    )
    reinforce = _grad_of(
        lambda lp: compute_naive_policy_gradient_loss(b["adv"], lp), b["log_probs"]
    )
    torch.testing.assert_close(no_clip, reinforce)


@given(batches(), st.sampled_from([0.05, 0.2]))
def test_clipped_tokens_get_zero_gradient_and_the_others_do_not(b, cliprange):
    _, meta = compute_grpo_clip_loss(b["adv"], b["log_probs"], b["old"], cliprange)
    clipped = meta["clipped"]
    g = _grad_of(
        lambda lp: compute_grpo_clip_loss(b["adv"], lp, b["old"], cliprange)[0], b["log_probs"]
    )
    assert torch.equal(g[clipped], torch.zeros_like(g[clipped]))
    live = ~clipped & (b["adv"] != 0)
    assert (g[live] != 0).all()
    # A token is clipped exactly when the ratio left the trust region in the advantage's direction.
    ratio = torch.exp(b["log_probs"] - b["old"])
    expected = ((b["adv"] > 0) & (ratio > 1 + cliprange)) | (
        (b["adv"] < 0) & (ratio < 1 - cliprange)
    )
    assert torch.equal(clipped, expected)


@given(batches(), st.sampled_from([0.1, 0.2]))
def test_grpo_clip_value_matches_the_formula(b, cliprange):
    loss, meta = compute_grpo_clip_loss(b["adv"], b["log_probs"], b["old"], cliprange)
    ratio = torch.exp(b["log_probs"] - b["old"])
    expected = -torch.min(ratio * b["adv"], ratio.clamp(1 - cliprange, 1 + cliprange) * b["adv"])
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(meta["ratio"], ratio)


@given(batches())
def test_dispatch_matches_the_individual_losses(b):
    common = {"policy_log_probs": b["log_probs"], "old_log_probs": b["old"], "cliprange": 0.2}
    nb, _ = compute_policy_gradient_loss(
        loss_type="no_baseline", raw_rewards=b["rewards"], **common
    )
    torch.testing.assert_close(nb, -b["rewards"] * b["log_probs"])
    rb, _ = compute_policy_gradient_loss(
        loss_type="reinforce_with_baseline", advantages=b["adv"], **common
    )
    torch.testing.assert_close(rb, -b["adv"] * b["log_probs"])
    gc, _ = compute_policy_gradient_loss(loss_type="grpo_clip", advantages=b["adv"], **common)
    torch.testing.assert_close(
        gc, compute_grpo_clip_loss(b["adv"], b["log_probs"], b["old"], 0.2)[0]
    )
    gn, _ = compute_policy_gradient_loss(loss_type="grpo_no_clip", advantages=b["adv"], **common)
    torch.testing.assert_close(gn, -torch.exp(b["log_probs"] - b["old"]) * b["adv"])


def test_unknown_loss_type_is_named():
    with pytest.raises(ValueError, match="loss_type.*'ppo'"):
        compute_policy_gradient_loss(torch.zeros(2, 3), "ppo", advantages=torch.zeros(2, 1))


@pytest.mark.parametrize("loss_type,missing", [(t, name) for t in LOSS_TYPES for name in needs(t)])
def test_missing_argument_is_named(loss_type, missing):
    """Each input and required setting a loss's registry entry names is refused, by name, when
    missing, by the dispatch and by the train step."""
    full = {
        "raw_rewards": torch.ones(2, 1),
        "advantages": torch.ones(2, 1),
        "old_log_probs": torch.zeros(2, 3),
        "response_mask": torch.ones(2, 3),
        "cliprange": 0.2,
    }
    kwargs = {k: v for k, v in full.items() if k in needs(loss_type) and k != missing}
    with pytest.raises(ValueError, match=missing):
        compute_policy_gradient_loss(
            policy_log_probs=torch.zeros(2, 3), loss_type=loss_type, **kwargs
        )
    if missing != "response_mask":  # the train step always has one
        kwargs.pop("response_mask", None)
        with pytest.raises(ValueError, match=missing):
            grpo_microbatch_train_step(
                policy_log_probs=torch.zeros(2, 3, requires_grad=True),
                response_mask=torch.ones(2, 3),
                gradient_accumulation_steps=1,
                loss_type=loss_type,
                **kwargs,
            )


def test_flat_advantages_are_rejected_not_broadcast():
    with pytest.raises(ValueError, match="advantages"):
        compute_policy_gradient_loss(
            torch.zeros(3, 3), "reinforce_with_baseline", advantages=torch.ones(3)
        )


def test_length_norm_errors():
    args = (torch.zeros(2, 3), torch.ones(2, 3), LossInputs(advantages=torch.ones(2, 1)))
    with pytest.raises(ValueError, match="length_normalization"):
        LossSettings("reinforce_with_baseline", length_normalization="token_sum")
    settings = LossSettings("reinforce_with_baseline", length_normalization="masked_normalize")
    with pytest.raises(ValueError, match="normalize_constant"):
        grpo_loss(*args, settings)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        sft_microbatch_train_step(torch.zeros(2, 3, requires_grad=True), torch.ones(2, 3), 0)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        grpo_microbatch_train_step(
            torch.zeros(2, 3, requires_grad=True),
            torch.ones(2, 3),
            0,
            "reinforce_with_baseline",
            advantages=torch.ones(2, 1),
        )


def test_train_step_takes_one_way_of_giving_the_objective():
    args = (torch.zeros(2, 3, requires_grad=True), torch.ones(2, 3), 1)
    settings = LossSettings("reinforce_with_baseline")
    with pytest.raises(ValueError, match="not both"):
        grpo_microbatch_train_step(*args, "grpo_clip", settings=settings)
    with pytest.raises(ValueError, match="not both"):
        grpo_microbatch_train_step(
            *args, advantages=torch.ones(2, 1), inputs=LossInputs(), settings=settings
        )
    with pytest.raises(ValueError, match="loss_type"):
        grpo_microbatch_train_step(*args, advantages=torch.ones(2, 1))


def _worked_example():
    """The handout's example: responses of 4 and 7 tokens, max length 7, ratio 1, A = 2."""
    ratio = torch.ones(2, 7, requires_grad=True)
    advantages = torch.full((2, 7), 2.0)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    return ratio, advantages, mask


def test_handout_length_normalization_example_on_the_reductions():
    ratio, advantages, mask = _worked_example()
    mean = masked_mean(ratio * advantages, mask, dim=1)
    torch.testing.assert_close(mean, torch.tensor([2.0, 2.0]))
    mean.mean().backward()
    expected = torch.tensor([[0.25] * 4 + [0.0] * 3, [1 / 7] * 7])
    torch.testing.assert_close(ratio.grad, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(ratio.grad[1, 0], torch.tensor(0.1429), atol=1e-4, rtol=0)

    ratio.grad = None
    normalized = masked_normalize(ratio * advantages, mask, dim=1, normalize_constant=7)
    torch.testing.assert_close(normalized, torch.tensor([1.1429, 2.0]), atol=1e-4, rtol=0)
    normalized.mean().backward()
    expected = torch.tensor([[1 / 7] * 4 + [0.0] * 3, [1 / 7] * 7])
    torch.testing.assert_close(ratio.grad, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "length_norm,per_example,token_grads",
    [
        ("masked_mean", [2.0, 2.0], ([0.25] * 4, [1 / 7] * 7)),
        ("masked_normalize", [8 / 7, 2.0], ([1 / 7] * 4, [1 / 7] * 7)),
    ],
)
def test_handout_length_normalization_example_through_the_train_step(
    length_norm, per_example, token_grads
):
    # r = exp(policy - old) = 1, so d loss / d policy_log_probs = d loss / d r.
    _, _, mask = _worked_example()
    policy = torch.zeros(2, 7, requires_grad=True)
    loss, meta = grpo_microbatch_train_step(
        policy_log_probs=policy,
        response_mask=mask,
        gradient_accumulation_steps=1,
        loss_type="grpo_no_clip",
        advantages=torch.full((2, 1), 2.0),
        old_log_probs=torch.zeros(2, 7),
        length_norm=length_norm,
        normalize_constant=7,
    )
    # The loss is the negated objective of the handout's example.
    torch.testing.assert_close(meta["per_example_loss"], -torch.tensor(per_example))
    torch.testing.assert_close(loss, -torch.tensor(per_example).mean())
    expected = -torch.tensor([token_grads[0] + [0.0] * 3, token_grads[1]])
    torch.testing.assert_close(policy.grad, expected)


@given(batches(min_batch=4), st.sampled_from([1.0, 3.0]))
def test_sft_accumulation_equals_one_step_over_the_batch(b, constant):
    mask = b["mask"][:4]
    log_probs = b["log_probs"][:4]

    def run(k):
        policy = log_probs.clone().requires_grad_(True)
        for lp, m in zip(policy.chunk(k), mask.chunk(k), strict=True):
            sft_microbatch_train_step(lp, m, k, normalize_constant=constant)
        return policy.grad

    g1 = run(1)
    for k in (2, 4):
        torch.testing.assert_close(run(k), g1)


@given(batches(), st.sampled_from([1.0, 4.0]))
def test_sft_loss_value(b, constant):
    loss, meta = sft_microbatch_train_step(
        policy_log_probs=b["log_probs"].clone().requires_grad_(True),
        response_mask=b["mask"],
        gradient_accumulation_steps=2,
        normalize_constant=constant,
    )
    per_example = (-b["log_probs"] * b["mask"]).sum(-1) / constant
    torch.testing.assert_close(meta["per_example_loss"], per_example)
    torch.testing.assert_close(loss, per_example.mean() / 2)


@given(batches(), st.sampled_from(LOSS_TYPES))
def test_torch_func_grad_with_aux_matches_autograd(b, loss_type):
    def objective(lp):
        return grpo_loss(lp, b["mask"], loss_inputs(b), loss_settings(loss_type))

    g, aux = grad(objective, has_aux=True)(b["log_probs"])
    expected = _grad_of(lambda lp: objective(lp)[0], b["log_probs"])
    torch.testing.assert_close(g, expected)
    assert set(aux) >= {"per_example_loss", "clip_fraction"}

    g_sft, _ = grad(lambda lp: sft_loss(lp, b["mask"], 2.0), has_aux=True)(b["log_probs"])
    torch.testing.assert_close(
        g_sft, _grad_of(lambda lp: sft_loss(lp, b["mask"], 2.0)[0], b["log_probs"])
    )


@given(batches(), st.sampled_from(LOSS_TYPES), st.sampled_from(LENGTH_NORMS))
def test_vmap_equals_row_by_row(b, loss_type, length_norm):
    """Every registered loss under every reduction, with the KL term: vmap over the rows gives
    the rows' own losses and the batch call's per-example losses."""
    settings = loss_settings(
        loss_type, length_normalization=length_norm, normalize_constant=3.0, kl_coef=0.1
    )

    def per_example(lp, m, r, a, o, ref):
        inputs = LossInputs(raw_rewards=r, advantages=a, old_log_probs=o, ref_log_probs=ref)
        return grpo_loss(lp, m, inputs, settings)

    args = (b["log_probs"], b["mask"], b["rewards"], b["adv"], b["old"], b["ref"])
    batched, meta = vmap(per_example)(*args)
    rows = torch.stack([per_example(*(x[i] for x in args))[0] for i in range(args[0].shape[0])])
    torch.testing.assert_close(batched, rows)
    # vmapping the scalar per-example loss gives the per-example losses of the batch call.
    _, whole = per_example(*args)
    torch.testing.assert_close(batched, whole["per_example_loss"])

    clip_rows = torch.stack(
        [
            compute_grpo_clip_loss(b["adv"][i], b["log_probs"][i], b["old"][i], 0.2)[0]
            for i in range(len(b["adv"]))
        ]
    )
    torch.testing.assert_close(
        vmap(lambda a, lp, o: compute_grpo_clip_loss(a, lp, o, 0.2)[0])(
            b["adv"], b["log_probs"], b["old"]
        ),
        clip_rows,
    )


def test_all_masked_row_is_zero_and_gradient_free():
    policy = torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([[0, 0, 0], [1, 1, 0]])
    loss, meta = grpo_microbatch_train_step(
        policy_log_probs=policy,
        response_mask=mask,
        gradient_accumulation_steps=1,
        loss_type="grpo_clip",
        advantages=torch.tensor([[1.0], [-1.0]]),
        old_log_probs=policy.detach() + 0.1,
        cliprange=0.2,
    )
    assert torch.isfinite(loss)
    assert meta["per_example_loss"][0] == 0
    assert torch.equal(policy.grad[0], torch.zeros(3))


def _pg_step(b, policy, mask, loss_type, length_norm, rows=slice(None)):
    return grpo_microbatch_train_step(
        policy_log_probs=policy,
        response_mask=mask[rows],
        gradient_accumulation_steps=1,
        inputs=loss_inputs(b, rows),
        settings=loss_settings(loss_type, length_normalization=length_norm, normalize_constant=5.0),
    )


@given(
    batches(),
    st.lists(st.booleans(), min_size=4, max_size=4),
    st.sampled_from(LOSS_TYPES),
    st.sampled_from(["masked_mean", "masked_normalize"]),
)
def test_empty_rows_add_zero_and_no_gradient_and_the_rest_is_the_dropped_batch(
    b, emptied, loss_type, length_norm
):
    """Empty response rows never make the step NaN (masked_mean alone would: 0/0), get exactly
    zero gradient, and leave the other rows' gradient what it is without them. The batch mean
    stays over all B rows (an empty row adds 0 and counts 1, the accumulation contract), so
    with B' non-empty rows the gradient is B'/B times the dropped batch's gradient."""
    mask = b["mask"].clone()
    mask[torch.tensor(emptied[: len(mask)])] = False
    kept = mask.any(-1)
    n, n_kept = len(mask), int(kept.sum())
    full = b["log_probs"].clone().requires_grad_(True)
    loss, meta = _pg_step(b, full, mask, loss_type, length_norm)
    assert torch.isfinite(loss) and torch.isfinite(full.grad).all()
    assert all(torch.isfinite(v).all() for v in meta.values())
    assert torch.equal(full.grad[~kept], torch.zeros_like(full.grad[~kept]))
    assert torch.equal(meta["per_example_loss"][~kept], torch.zeros(n - n_kept).double())
    if n_kept == 0:
        assert loss == 0 and torch.equal(full.grad, torch.zeros_like(full.grad))
        return
    dropped = b["log_probs"][kept].clone().requires_grad_(True)
    dropped_loss, _ = _pg_step(b, dropped, mask, loss_type, length_norm, rows=kept)
    torch.testing.assert_close(full.grad[kept], dropped.grad * (n_kept / n))
    torch.testing.assert_close(loss, dropped_loss * (n_kept / n))


@given(batches(), st.lists(st.booleans(), min_size=4, max_size=4), st.sampled_from([1.0, 3.0]))
def test_sft_empty_rows_add_zero_and_no_gradient(b, emptied, constant):
    mask = b["mask"].clone()
    mask[torch.tensor(emptied[: len(mask)])] = False
    kept = mask.any(-1)
    policy = b["log_probs"].clone().requires_grad_(True)
    loss, meta = sft_microbatch_train_step(policy, mask, 1, normalize_constant=constant)
    assert torch.isfinite(loss) and all(torch.isfinite(v).all() for v in meta.values())
    assert torch.equal(policy.grad[~kept], torch.zeros_like(policy.grad[~kept]))
    if kept.any():
        dropped = b["log_probs"][kept].clone().requires_grad_(True)
        sft_microbatch_train_step(dropped, mask[kept], 1, normalize_constant=constant)
        torch.testing.assert_close(policy.grad[kept], dropped.grad * (kept.sum() / len(mask)))


@given(
    batches(),
    st.sampled_from(LOSS_TYPES),
    st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_nonempty_batches_get_the_handout_reduction_bit_for_bit(b, loss_type, dtype):
    """Without empty rows the guarded per-response reduction is the handout's masked_mean
    exactly: the same loss and the same gradient, compared with torch.equal, not closeness."""
    mask = b["mask"].clone()
    mask[:, 0] = True
    args = {k: b[k].to(dtype) for k in ("rewards", "adv", "old")}
    settings = loss_settings(loss_type)

    def handout(lp):
        inputs = loss_inputs(args)
        token_loss, _ = policy_loss(lp, mask, inputs, settings)
        return masked_mean(token_loss, mask, dim=-1).mean()

    ours = b["log_probs"].to(dtype).requires_grad_(True)
    loss, _ = _pg_step(args, ours, mask, loss_type, "masked_mean")
    reference = b["log_probs"].to(dtype).requires_grad_(True)
    expected = handout(reference)
    expected.backward()
    assert torch.equal(loss, expected.detach())
    assert torch.equal(ours.grad, reference.grad)
    token_loss, _ = policy_loss(b["log_probs"], mask, loss_inputs(b), settings)
    assert torch.equal(
        masked_mean_or_zero(token_loss, mask, dim=-1), masked_mean(token_loss, mask, dim=-1)
    )


@given(batches())
def test_metadata_clip_fraction_counts_response_tokens(b):
    assume(b["mask"].any())
    settings = LossSettings("grpo_clip", cliprange=0.1)
    _, meta = grpo_loss(b["log_probs"], b["mask"], loss_inputs(b), settings)
    _, clip_meta = compute_grpo_clip_loss(b["adv"], b["log_probs"], b["old"], 0.1)
    expected = clip_meta["clipped"][b["mask"]].double().mean()
    torch.testing.assert_close(meta["clip_fraction"], expected)


def test_dispatch_uses_the_signal_its_loss_type_names_when_both_are_given():
    """Trainers may pass raw_rewards and advantages together; no_baseline must use the raw
    rewards and the baselined types the advantages."""
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -0.25]])
    both = {
        "raw_rewards": torch.tensor([[1.0], [0.0]]),
        "advantages": torch.tensor([[0.5], [-0.5]]),
    }
    nb, _ = compute_policy_gradient_loss(log_probs, "no_baseline", **both)
    assert torch.equal(nb, torch.tensor([[1.0, 2.0], [0.0, 0.0]]))
    rb, _ = compute_policy_gradient_loss(log_probs, "reinforce_with_baseline", **both)
    assert torch.equal(rb, torch.tensor([[0.5, 1.0], [-0.25, -0.125]]))


def test_negative_cliprange_is_rejected():
    with pytest.raises(ValueError, match="cliprange"):
        LossSettings("grpo_clip", cliprange=-0.1)


def _hand_batch():
    """ratio = [[2, 1, 0.5], [1.1, 1, 1]] against old = 0, mask [[1, 1, 0], [1, 0, 0]],
    A = [[1], [-1]], eps = 0.2. Only token (0, 0) clips (A > 0 and r = 2 > 1.2; r = 0.5 with
    A > 0 keeps the smaller unclipped term). Response tokens: (0, 0), (0, 1), (1, 0)."""
    ratio = torch.tensor([[2.0, 1.0, 0.5], [1.1, 1.0, 1.0]], dtype=torch.float64)
    return (
        ratio.log().requires_grad_(True),
        torch.tensor([[1, 1, 0], [1, 0, 0]]),
        LossInputs(
            advantages=torch.tensor([[1.0], [-1.0]], dtype=torch.float64),
            old_log_probs=torch.zeros(2, 3, dtype=torch.float64),
        ),
    )


def test_grpo_loss_metadata_by_hand():
    loss, meta = grpo_loss(*_hand_batch(), LossSettings("grpo_clip", cliprange=0.2))
    assert set(meta) >= {"per_example_loss", "clip_fraction", "num_response_tokens", "ratio_mean"}
    # Row 0: -min(2, 1.2) = -1.2 and -1 -> mean -1.1; row 1: -min(-1.1, -1.1) = 1.1.
    torch.testing.assert_close(meta["per_example_loss"], torch.tensor([-1.1, 1.1]).double())
    torch.testing.assert_close(loss, torch.tensor(0.0).double())
    torch.testing.assert_close(meta["clip_fraction"], torch.tensor(1 / 3).double())
    torch.testing.assert_close(meta["ratio_mean"], torch.tensor(4.1 / 3).double())  # not 6.6 / 6
    assert meta["num_response_tokens"] == 3
    assert not any(v.requires_grad for v in meta.values())

    _, meta = grpo_loss(*_hand_batch(), LossSettings("grpo_no_clip"))
    assert meta["clip_fraction"] == 0  # nothing clips without a clip
    torch.testing.assert_close(meta["ratio_mean"], torch.tensor(4.1 / 3).double())
    assert not any(v.requires_grad for v in meta.values())

    _, meta = grpo_loss(*_hand_batch(), LossSettings("reinforce_with_baseline"))
    assert "ratio_mean" not in meta  # only the ratio losses have a ratio
    assert meta["clip_fraction"] == 0 and meta["num_response_tokens"] == 3


def test_sft_loss_metadata_by_hand():
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [0, 0, 1]])
    loss, meta = sft_loss(log_probs, mask, normalize_constant=2.0)
    assert set(meta) >= {"per_example_loss", "num_response_tokens", "mean_token_nll"}
    torch.testing.assert_close(meta["per_example_loss"], torch.tensor([1.5, 3.0]))  # (1+2)/2, 6/2
    torch.testing.assert_close(loss, torch.tensor(2.25))
    assert meta["num_response_tokens"] == 3
    torch.testing.assert_close(meta["mean_token_nll"], torch.tensor(3.0))  # (1 + 2 + 6) / 3
    assert not any(v.requires_grad for v in meta.values())


@pytest.mark.parametrize("loss_type", ["grpo_clip", "grpo_no_clip"])
def test_no_gradient_flows_through_old_log_probs(loss_type):
    """old_log_probs are constants (the sampling policy's), as the docstring says: passing the
    policy's own log-probs without .detach() (an on-policy step) gives REINFORCE's gradient -A
    (at r = 1), not 0 from r = exp(lp - lp), and a separate old tensor gets no gradient."""
    policy = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    adv = torch.tensor([[1.0], [-2.0]])
    loss, _ = compute_policy_gradient_loss(
        policy, loss_type, advantages=adv, old_log_probs=policy, cliprange=0.2
    )
    (g,) = torch.autograd.grad(loss.sum(), policy)
    assert torch.equal(g, -adv.expand(2, 2))

    old = (policy.detach() + 0.1).requires_grad_(True)
    loss, _ = compute_policy_gradient_loss(
        policy, loss_type, advantages=adv, old_log_probs=old, cliprange=0.2
    )
    loss.sum().backward()
    assert old.grad is None and policy.grad is not None
