"""Properties of the policy-gradient variants after GRPO: DAPO's decoupled clip, GSPO, CISPO,
SAPO, token-level aggregation (``length_normalization="token_mean"``) and the KL term of grpo_loss."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reasoning_core import (
    LENGTH_NORMS,
    POLICY_LOSSES,
    LossInputs,
    LossSettings,
    compute_cispo_loss,
    compute_dapo_clip_loss,
    compute_grpo_clip_loss,
    compute_gspo_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    compute_sapo_loss,
    grpo_loss,
    grpo_microbatch_train_step,
    kl_penalty,
    token_mean_constant,
)
from reasoning_core.masked import masked_mean_or_zero
from reasoning_core.registry import policy_loss
from tests.helpers.pg_batches import LOSS_TYPES, grad_of, loss_inputs, loss_settings, pg_batches

CLIPS = st.sampled_from([(0.2, 0.2), (0.1, 0.3), (0.3, 0.05), (0.0, 0.5)])
batches = pg_batches
_grad_of = grad_of


# ------------------------------------------------------------------------------------ DAPO


@given(batches(), CLIPS)
def test_dapo_value_and_clipped_tokens_follow_the_decoupled_range(b, clips):
    low, high = clips
    loss, meta = compute_dapo_clip_loss(b["adv"], b["log_probs"], b["old"], low, high)
    r = torch.exp(b["log_probs"] - b["old"])
    a = b["adv"]
    expected = -torch.min(r * a, r.clamp(1 - low, 1 + high) * a)
    torch.testing.assert_close(loss, expected)
    # Clipped: the ratio left the range on the side the advantage pushes towards.
    clipped = ((a > 0) & (r > 1 + high)) | ((a < 0) & (r < 1 - low))
    assert torch.equal(meta["clipped"], clipped)
    g = _grad_of(lambda lp: compute_dapo_clip_loss(a, lp, b["old"], low, high)[0], b["log_probs"])
    assert torch.equal(g[clipped], torch.zeros_like(g[clipped]))
    torch.testing.assert_close(g[~clipped], (-r * a.expand_as(r))[~clipped])


@given(batches(), st.sampled_from([0.0, 0.1, 0.2, 0.5]))
def test_dapo_with_symmetric_clips_is_grpo_clip(b, eps):
    ours, meta = compute_dapo_clip_loss(b["adv"], b["log_probs"], b["old"], eps, eps)
    grpo, grpo_meta = compute_grpo_clip_loss(b["adv"], b["log_probs"], b["old"], eps)
    assert torch.equal(ours, grpo)
    assert torch.equal(meta["clipped"], grpo_meta["clipped"])
    g = _grad_of(lambda lp: compute_dapo_clip_loss(b["adv"], lp, b["old"], eps, eps)[0], b["old"])
    g_grpo = _grad_of(lambda lp: compute_grpo_clip_loss(b["adv"], lp, b["old"], eps)[0], b["old"])
    torch.testing.assert_close(g, g_grpo)


def test_dapo_clip_higher_by_hand():
    """A = +1: ratio 1.25 is clipped at 1 + 0.2 but not at 1 + 0.28. A = -1: ratio 0.75 is
    clipped at 1 - 0.2 whatever the high side."""
    old = torch.zeros(2, 1)
    lp = torch.tensor([[1.25], [0.75]]).log().requires_grad_(True)
    adv = torch.tensor([[1.0], [-1.0]])
    loss, meta = compute_dapo_clip_loss(adv, lp, old, 0.2, 0.28)
    torch.testing.assert_close(loss, torch.tensor([[-1.25], [0.8]]))
    assert meta["clipped"].tolist() == [[False], [True]]
    loss.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-1.25], [0.0]]))


# ------------------------------------------------------------------------------------ GSPO


def _sequence_objective(adv, lp, old, mask, low, high):
    """GSPO's sequence-level loss written directly: one ratio s per row, its own clip."""
    n = mask.sum(-1, keepdim=True).clamp(min=1)
    s = torch.exp(((lp - old) * mask).sum(-1, keepdim=True) / n)
    return -torch.min(s * adv, s.clamp(1 - low, 1 + high) * adv)


@given(batches(), CLIPS)
def test_gspo_per_response_mean_has_the_sequence_objectives_value_and_gradient(b, clips):
    low, high = clips
    mask = b["mask"].clone()
    mask[:, 0] = True

    def ours(lp):
        loss, _ = compute_gspo_loss(b["adv"], lp, b["old"], mask, low, high)
        return masked_mean_or_zero(loss, mask, dim=-1)

    def direct(lp):
        return _sequence_objective(b["adv"], lp, b["old"], mask, low, high).squeeze(-1)

    torch.testing.assert_close(ours(b["log_probs"]), direct(b["log_probs"]))
    torch.testing.assert_close(_grad_of(ours, b["log_probs"]), _grad_of(direct, b["log_probs"]))


@given(batches(max_seq=1), CLIPS)
def test_gspo_with_one_token_per_response_is_the_token_level_clip(b, clips):
    low, high = clips
    mask = torch.ones_like(b["mask"])
    gspo, meta = compute_gspo_loss(b["adv"], b["log_probs"], b["old"], mask, low, high)
    dapo, dapo_meta = compute_dapo_clip_loss(b["adv"], b["log_probs"], b["old"], low, high)
    torch.testing.assert_close(gspo, dapo)
    assert torch.equal(meta["clipped"], dapo_meta["clipped"])
    g = _grad_of(
        lambda lp: compute_gspo_loss(b["adv"], lp, b["old"], mask, low, high)[0], b["log_probs"]
    )
    g_dapo = _grad_of(
        lambda lp: compute_dapo_clip_loss(b["adv"], lp, b["old"], low, high)[0], b["log_probs"]
    )
    torch.testing.assert_close(g, g_dapo)
    if low == high:
        grpo, _ = compute_grpo_clip_loss(b["adv"], b["log_probs"], b["old"], low)
        torch.testing.assert_close(gspo, grpo)


def test_gspo_clips_whole_responses_by_hand():
    """Row 0: token log-ratios +0.3 and -0.3 (each would clip at eps = 0.2) average to s = 1,
    nothing clips. Row 1: +0.3 on its one token: s = e^0.3 > 1.2 with A > 0, the row clips.
    Row 1's masked-out second token does not enter its mean."""
    old = torch.zeros(2, 2)
    lp = torch.tensor([[0.3, -0.3], [0.3, 5.0]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.tensor([[1.0], [1.0]])
    loss, meta = compute_gspo_loss(adv, lp, old, mask, 0.2, 0.2)
    torch.testing.assert_close(loss[0], torch.tensor([-1.0, -1.0]))
    torch.testing.assert_close(loss[1, 0], torch.tensor(-1.2))
    assert meta["clipped"][:, 0].tolist() == [False, True]
    torch.testing.assert_close(meta["ratio"][:, 0], torch.tensor([0.0, 0.3]).exp())
    masked_mean_or_zero(loss, mask, dim=-1).sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-0.5, -0.5], [0.0, 0.0]]))


# ----------------------------------------------------------------------------------- CISPO


@given(batches(), CLIPS)
def test_cispo_keeps_a_gradient_on_every_token_weighted_by_the_clipped_ratio(b, clips):
    low, high = clips
    loss, meta = compute_cispo_loss(b["adv"], b["log_probs"], b["old"], low, high)
    r = torch.exp(b["log_probs"] - b["old"])
    w = r.clamp(1 - low, 1 + high)
    torch.testing.assert_close(loss, -w * b["adv"] * b["log_probs"])
    assert torch.equal(meta["clipped"], (r < 1 - low) | (r > 1 + high))
    g = _grad_of(
        lambda lp: compute_cispo_loss(b["adv"], lp, b["old"], low, high)[0], b["log_probs"]
    )
    torch.testing.assert_close(g, -w * b["adv"].expand_as(w))


@given(batches(), CLIPS)
def test_cispo_and_dapo_at_ratio_one_have_the_grpo_gradient(b, clips):
    low, high = clips
    on_policy = b["log_probs"]
    reinforce = _grad_of(lambda lp: compute_naive_policy_gradient_loss(b["adv"], lp), on_policy)
    for fn in (compute_cispo_loss, compute_dapo_clip_loss):
        g = _grad_of(lambda lp, fn=fn: fn(b["adv"], lp, on_policy, low, high)[0], on_policy)
        torch.testing.assert_close(g, reinforce)
    grpo = _grad_of(lambda lp: compute_grpo_clip_loss(b["adv"], lp, on_policy, low)[0], on_policy)
    torch.testing.assert_close(grpo, reinforce)


def test_cispo_by_hand():
    """ratio 2 with clip high 0.28 weighs 1.28; ratio 0.5 with clip low 0.2 weighs 0.8."""
    old = torch.zeros(1, 2)
    lp = torch.tensor([[2.0, 0.5]]).log().requires_grad_(True)
    loss, meta = compute_cispo_loss(torch.tensor([[2.0]]), lp, old, 0.2, 0.28)
    torch.testing.assert_close(loss, -torch.tensor([[1.28, 0.8]]) * 2 * lp.detach())
    assert meta["clipped"].tolist() == [[True, True]]
    loss.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-2.56, -1.6]]))


def test_cispo_sets_no_lower_bound_by_default():
    """MiniMax-M1 clips CISPO's weight from above only: with cliprange_low unset, ratio 0.5
    weighs 0.5 (not 1 - cliprange) and is not counted as clipped; dapo's low side defaults to
    cliprange."""
    settings = LossSettings("cispo", cliprange=0.2, cliprange_high=0.28)
    assert settings.cliprange_low is None and settings.cliprange_high == 0.28
    assert LossSettings("dapo", cliprange=0.2).cliprange_low == 0.2
    lp = torch.tensor([[2.0, 0.5]]).log()
    inputs = LossInputs(advantages=torch.tensor([[2.0]]), old_log_probs=torch.zeros(1, 2))
    loss, meta = compute_policy_gradient_loss(
        lp, "cispo", advantages=inputs.advantages, old_log_probs=inputs.old_log_probs,
        cliprange=0.2, cliprange_high=0.28,
    )  # fmt: skip
    torch.testing.assert_close(loss, -torch.tensor([[1.28, 0.5]]) * 2 * lp)
    assert meta["clipped"].tolist() == [[True, False]]


# ------------------------------------------------------------------------------------ SAPO


@given(batches(), st.sampled_from([(1.0, 1.05), (0.5, 2.0), (3.0, 0.7)]))
def test_sapo_value_and_gradient_follow_the_soft_gate(b, taus):
    tau_pos, tau_neg = taus
    loss, meta = compute_sapo_loss(b["adv"], b["log_probs"], b["old"], tau_pos, tau_neg)
    r = torch.exp(b["log_probs"] - b["old"])
    tau = torch.where(b["adv"] > 0, tau_pos, tau_neg).expand_as(r)
    sig = torch.sigmoid(tau * (r - 1))
    torch.testing.assert_close(loss, -(4 / tau) * sig * b["adv"])
    assert not meta["clipped"].any()
    g = _grad_of(
        lambda lp: compute_sapo_loss(b["adv"], lp, b["old"], tau_pos, tau_neg)[0], b["log_probs"]
    )
    torch.testing.assert_close(g, -4 * sig * (1 - sig) * r * b["adv"])


@given(batches(), st.sampled_from([(1.0, 1.05), (0.5, 2.0)]))
def test_sapo_at_ratio_one_has_the_grpo_gradient(b, taus):
    lp0 = b["log_probs"]
    g = _grad_of(lambda lp: compute_sapo_loss(b["adv"], lp, lp0, *taus)[0], lp0)
    reinforce = _grad_of(lambda lp: compute_naive_policy_gradient_loss(b["adv"], lp), lp0)
    torch.testing.assert_close(g, reinforce)


def test_sapo_gate_decays_faster_for_negative_advantages_by_hand():
    """At ratio 2 the gradient factor is 4 sigma(tau)(1 - sigma(tau)) * 2: tau 1 for A > 0,
    tau 3 for A < 0 (smaller), and never exactly 0."""
    old = torch.zeros(2, 1)
    lp = torch.full((2, 1), 2.0).log().requires_grad_(True)
    adv = torch.tensor([[1.0], [-1.0]])
    loss, _ = compute_sapo_loss(adv, lp, old, tau_pos=1.0, tau_neg=3.0)
    loss.sum().backward()
    s1, s3 = torch.sigmoid(torch.tensor(1.0)), torch.sigmoid(torch.tensor(3.0))
    torch.testing.assert_close(lp.grad[:, 0], torch.stack([-8 * s1 * (1 - s1), 8 * s3 * (1 - s3)]))
    assert (lp.grad.abs() > 0).all()
    with pytest.raises(ValueError, match="sapo_tau_pos"):
        LossSettings("sapo", sapo_tau_pos=0.0)


# -------------------------------------------------------------------------------- dispatch


@given(batches(), CLIPS)
def test_dispatch_reaches_the_new_losses(b, clips):
    low, high = clips
    common = {
        "policy_log_probs": b["log_probs"],
        "advantages": b["adv"],
        "old_log_probs": b["old"],
        "cliprange_low": low,
        "cliprange_high": high,
        "response_mask": b["mask"],
    }
    args = (b["adv"], b["log_probs"], b["old"])
    want = {
        "dapo": compute_dapo_clip_loss(*args, low, high)[0],
        "gspo": compute_gspo_loss(*args, b["mask"], low, high)[0],
        "cispo": compute_cispo_loss(*args, low, high)[0],
        "sapo": compute_sapo_loss(*args, 0.5, 2.0)[0],
    }
    for loss_type, expected in want.items():
        if loss_type != "sapo" and low == 0.0:
            continue  # a clip of 0 is a setting's bound (> 0), not the formula's
        got, meta = compute_policy_gradient_loss(
            loss_type=loss_type, sapo_tau_pos=0.5, sapo_tau_neg=2.0, **common
        )
        assert torch.equal(got, expected), loss_type
        assert "clipped" in meta and "ratio" in meta
    # One cliprange stands for both sides.
    one, _ = compute_policy_gradient_loss(
        b["log_probs"], "dapo", advantages=b["adv"], old_log_probs=b["old"], cliprange=0.2
    )
    assert torch.equal(one, compute_grpo_clip_loss(*args, 0.2)[0])


@pytest.mark.parametrize(
    "settings,bad",
    [
        ({"loss_type": "dapo", "cliprange": 0.2, "cliprange_high": -0.1}, "cliprange_high"),
        ({"loss_type": "dapo", "cliprange": 0.2, "cliprange_low": 1.5}, "cliprange_low"),
        ({"loss_type": "gspo", "cliprange": -0.2}, r"cliprange_low \(from cliprange\)"),
        ({"loss_type": "cispo", "cliprange": 0.2, "cliprange_low": -0.1}, "cliprange_low"),
        ({"loss_type": "grpo_clip", "cliprange": 0.0}, "cliprange"),
        ({"loss_type": "sapo", "sapo_tau_neg": 0.0}, "sapo_tau_neg"),
        ({"loss_type": "dapo"}, "cliprange_low"),
        ({"loss_type": "grpo_no_clip", "kl_coef": -1.0}, "kl_coef"),
        ({"loss_type": "grpo_no_clip", "kl_estimator": "k4"}, "kl_estimator"),
        ({"loss_type": "ppo"}, "loss_type"),
    ],
)
def test_settings_outside_their_bounds_are_refused_by_name(settings, bad):
    with pytest.raises(ValueError, match=bad):
        LossSettings(**settings)


@given(
    st.sampled_from(LOSS_TYPES),
    st.floats(-2.0, 2.0, allow_nan=False),
    st.floats(-2.0, 2.0, allow_nan=False),
)
def test_settings_hold_exactly_the_values_their_bounds_allow(loss_type, cliprange, value):
    """For every registered loss and clip values anywhere: LossSettings is built exactly when
    each of the loss's settings, resolved (a None takes its default), lies within its
    entry's bounds, and then holds the resolved value."""
    entry = POLICY_LOSSES[loss_type]
    given_values = {"cliprange": cliprange, "cliprange_high": value}
    resolved = {}
    for p in entry.params:
        v = given_values.get(p.name, p.default)
        resolved[p.name] = given_values[v] if isinstance(v, str) else v
    ok = all(
        (v is None and p.unbounded) or (v is not None and p.above < v < p.below)
        for p in entry.params
        for v in [resolved[p.name]]
    )
    if not ok:
        with pytest.raises(ValueError):
            LossSettings(loss_type, **given_values)
        return
    settings = LossSettings(loss_type, **given_values)
    for name, v in resolved.items():
        assert getattr(settings, name) == v


# -------------------------------------------------------------------------- aggregation


@given(batches())
def test_token_mean_is_the_sum_over_all_tokens_over_their_count(b):
    token_loss, _ = compute_policy_gradient_loss(
        b["log_probs"], "reinforce_with_baseline", advantages=b["adv"]
    )
    settings = LossSettings(
        "reinforce_with_baseline",
        length_normalization="token_mean",
        normalize_constant=token_mean_constant(b["mask"]),
    )
    loss, _ = grpo_loss(b["log_probs"], b["mask"], loss_inputs(b), settings)
    count = b["mask"].sum()
    expected = (token_loss * b["mask"]).sum() / count if count else torch.tensor(0.0).double()
    torch.testing.assert_close(loss, expected)


def test_token_mean_constant_by_hand():
    assert token_mean_constant(torch.tensor([[1, 1, 0], [1, 1, 1]])) == 2.5
    assert token_mean_constant(torch.tensor([[1, 0, 0, 0]] * 4)) == 1.0
    assert token_mean_constant(torch.zeros(3, 4)) == pytest.approx(1 / 3)  # no token: loss 0
    assert token_mean_constant(torch.tensor([True, True, False])) == 2.0


def test_token_mean_weighs_every_token_alike_by_hand():
    """Rows of 1 and 3 tokens, A = 1 on every token's log-prob: each token's gradient is
    -1/4 with token_mean, against -1/2 and -1/6 with the per-response mean."""
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    expected = {
        "token_mean": -0.25 * mask.float(),
        "masked_mean": torch.tensor([[-0.5, 0, 0], [-1 / 6] * 3]),
    }
    for norm, want in expected.items():
        lp = torch.zeros(2, 3, requires_grad=True)
        settings = LossSettings(
            "reinforce_with_baseline",
            length_normalization=norm,
            normalize_constant=token_mean_constant(mask),
        )
        loss, _ = grpo_loss(lp, mask, LossInputs(advantages=torch.ones(2, 1)), settings)
        loss.backward()
        torch.testing.assert_close(lp.grad, want)


@given(
    batches(min_batch=4, max_batch=4),
    st.sampled_from(LOSS_TYPES),
    st.sampled_from(LENGTH_NORMS),
    st.sampled_from([0.0, 0.1]),
)
def test_accumulation_equals_one_step_over_the_batch(b, loss_type, length_norm, kl_coef):
    """For every loss type and aggregation (and with the KL term), k equal microbatches with
    gradient_accumulation_steps = k give the loss and gradient of one step over the batch,
    given the whole batch's constant (token_mean_constant of the whole mask for token_mean):
    the class of bug that scaled gradients by 0.5x or 4x in TRL #3021."""
    mask = b["mask"].clone()
    mask[0] = False  # an empty response adds nothing and causes no NaN
    constant = token_mean_constant(mask) if length_norm == "token_mean" else 5.0
    settings = loss_settings(
        loss_type, length_normalization=length_norm, normalize_constant=constant, kl_coef=kl_coef
    )

    def run(k):
        policy = b["log_probs"].clone().requires_grad_(True)
        total = 0.0
        chunks = zip(
            policy.chunk(k),
            mask.chunk(k),
            b["rewards"].chunk(k),
            b["adv"].chunk(k),
            b["old"].chunk(k),
            b["ref"].chunk(k),
            strict=True,
        )
        for lp, m, r, a, o, ref in chunks:
            inputs = LossInputs(raw_rewards=r, advantages=a, old_log_probs=o, ref_log_probs=ref)
            loss, _ = grpo_microbatch_train_step(lp, m, k, inputs=inputs, settings=settings)
            total = total + loss
        return policy.grad, total

    g1, l1 = run(1)
    assert torch.isfinite(g1).all()
    assert torch.equal(g1[0], torch.zeros_like(g1[0]))
    for k in (2, 4):
        gk, lk = run(k)
        torch.testing.assert_close(gk, g1)
        torch.testing.assert_close(lk, l1)


@given(batches(min_batch=4, max_batch=4))
def test_token_mean_with_each_microbatchs_own_count_would_differ(b):
    """The whole batch's constant matters: a microbatch's own token count gives another
    gradient whenever the microbatches hold different numbers of tokens."""
    mask = b["mask"].clone()
    mask[:2, 0] = True
    mask[2:] = True

    def step(lp, m, a, constant, k):
        grpo_microbatch_train_step(
            lp, m, k, "reinforce_with_baseline", advantages=a,
            length_norm="token_mean", normalize_constant=constant,
        )  # fmt: skip

    whole = b["log_probs"].clone().requires_grad_(True)
    step(whole, mask, b["adv"], token_mean_constant(mask), 1)
    own = b["log_probs"].clone().requires_grad_(True)
    for lp, m, a in zip(own.chunk(2), mask.chunk(2), b["adv"].chunk(2), strict=True):
        step(lp, m, a, token_mean_constant(m), 2)
    if mask[:2].sum() != mask[2:].sum():
        assert not torch.allclose(own.grad, whole.grad)


# -------------------------------------------------------------------------------- KL term


@given(batches(), st.sampled_from(["k1", "k2", "k3"]), st.sampled_from([0.01, 0.5]))
def test_kl_term_adds_beta_times_the_estimate_to_each_token(b, estimator, beta):
    args = (b["log_probs"], b["mask"])
    with_ref = loss_inputs(b, ref_log_probs=b["ref"])
    base, _ = grpo_loss(*args, loss_inputs(b), LossSettings("grpo_clip", cliprange=0.2))
    settings = LossSettings("grpo_clip", cliprange=0.2, kl_coef=beta, kl_estimator=estimator)
    with_kl, meta = grpo_loss(*args, with_ref, settings)
    kl = kl_penalty(b["log_probs"], b["ref"], estimator)
    expected = base + beta * masked_mean_or_zero(kl, b["mask"], dim=-1).mean()
    torch.testing.assert_close(with_kl, expected)
    torch.testing.assert_close(meta["kl_mean"], masked_mean_or_zero(kl, b["mask"]))
    # kl_coef = 0 adds nothing, bit for bit, and still reports the estimate.
    zero_kl = LossSettings("grpo_clip", cliprange=0.2, kl_estimator=estimator)
    zero, zero_meta = grpo_loss(*args, with_ref, zero_kl)
    assert torch.equal(zero, base)
    assert "kl_mean" in zero_meta


def test_kl_settings_errors():
    args = (torch.zeros(2, 3), torch.ones(2, 3), LossInputs(advantages=torch.ones(2, 1)))
    with pytest.raises(ValueError, match="ref_log_probs"):
        grpo_loss(*args, LossSettings("reinforce_with_baseline", kl_coef=0.1))
    with pytest.raises(ValueError, match="normalize_constant"):
        grpo_loss(*args, LossSettings("reinforce_with_baseline", length_normalization="token_mean"))


@given(batches(), st.sampled_from(LOSS_TYPES))
def test_a_loss_reads_only_the_inputs_its_entry_names(b, loss_type):
    """The runtime gives a loss only what its registry entry lists (no sampling-policy pass
    for a loss that does not list old_log_probs): the loss must not change without the rest."""
    entry = POLICY_LOSSES[loss_type]
    settings = loss_settings(loss_type)
    full = loss_inputs(b)
    listed = LossInputs(**{k: getattr(full, k) for k in entry.inputs if k in LossInputs._fields})
    everything, _ = policy_loss(b["log_probs"], b["mask"], full, settings)
    only, _ = policy_loss(b["log_probs"], b["mask"], listed, settings)
    assert torch.equal(everything, only)
