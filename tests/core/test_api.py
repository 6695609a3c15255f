"""The package-level contract of reasoning_core (docs/contract.md): names, keyword names, no
heavy imports, and jaxtyping annotations that hold at run time, also under vmap."""

import inspect
import subprocess
import sys

import pytest
import torch
from torch.func import vmap

import reasoning_core as rc

CONTRACT_KEYWORDS = {
    "tokenize_prompt_and_output": ["prompt_strs", "output_strs", "tokenizer"],
    "compute_entropy": ["logits"],
    "get_response_log_probs": ["model", "input_ids", "labels", "return_token_entropy"],
    "masked_normalize": ["tensor", "mask", "normalize_constant", "dim"],
    "masked_mean": ["tensor", "mask", "dim"],
    "sft_microbatch_train_step": [
        "policy_log_probs",
        "response_mask",
        "gradient_accumulation_steps",
        "normalize_constant",
    ],
    "compute_group_normalized_rewards": [
        "reward_fn",
        "rollout_responses",
        "repeated_ground_truths",
        "group_size",
        "advantage_eps",
        "normalize_by_std",
    ],
    "compute_naive_policy_gradient_loss": ["raw_rewards_or_advantages", "policy_log_probs"],
    "compute_grpo_clip_loss": ["advantages", "policy_log_probs", "old_log_probs", "cliprange"],
    "compute_policy_gradient_loss": [
        "policy_log_probs",
        "loss_type",
        "raw_rewards",
        "advantages",
        "old_log_probs",
        "cliprange",
    ],
    "grpo_microbatch_train_step": [
        "policy_log_probs",
        "response_mask",
        "gradient_accumulation_steps",
        "loss_type",
        "raw_rewards",
        "advantages",
        "old_log_probs",
        "cliprange",
    ],
    "group_normalize": ["raw_rewards", "group_size", "advantage_eps", "normalize_by_std"],
}


@pytest.mark.parametrize("name", sorted(CONTRACT_KEYWORDS))
def test_spec_functions_have_the_spec_keywords(name):
    params = list(inspect.signature(getattr(rc, name)).parameters)
    assert params[: len(CONTRACT_KEYWORDS[name])] == CONTRACT_KEYWORDS[name]
    assert name in rc.__all__


def test_defaults_do_what_the_spec_says():
    """The contract's defaults, by what they do: ``length_norm`` averages over each response's tokens,
    ``normalize_constant`` of masked_normalize is 1, and log-probs come without entropies
    unless asked for."""
    gen = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    adv = torch.tensor([[1.0], [-2.0]])

    def step(**kw):
        lp = (-torch.rand(2, 5, generator=torch.Generator().manual_seed(1))).requires_grad_()
        loss, _ = rc.grpo_microbatch_train_step(
            lp, mask, 1, "reinforce_with_baseline", advantages=adv, **kw
        )
        return loss, lp.grad

    default, explicit = step(), step(length_norm="masked_mean")
    by_constant = step(length_norm="masked_normalize", normalize_constant=5.0)
    assert torch.equal(default[0], explicit[0]) and torch.equal(default[1], explicit[1])
    assert not torch.allclose(default[1], by_constant[1])  # the two norms differ here

    x = torch.randn(2, 5, generator=gen)
    assert torch.equal(rc.masked_normalize(x, mask), rc.masked_normalize(x, mask, 1.0))
    assert torch.allclose(rc.masked_normalize(x, mask), (x * mask).sum())

    logits = torch.randn(1, 4, 7, generator=gen)

    class Model:
        def __call__(self, input_ids):
            return type("Out", (), {"logits": logits})()

    ids = torch.tensor([[1, 2, 3, 4]])
    out = rc.get_response_log_probs(model=Model(), input_ids=ids, labels=ids)
    assert set(out) == {"log_probs"}
    want = torch.log_softmax(logits, -1).gather(-1, ids[..., None])[..., 0]
    torch.testing.assert_close(out["log_probs"], want)


def _fresh(code: str) -> str:
    """What ``code`` prints in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_import_pulls_in_neither_transformers_nor_vllm_nor_the_runtime():
    code = (
        "import sys, reasoning_core\n"
        "bad = [m for m in ('transformers', 'vllm', 'reasoning_core.runtime') if m in sys.modules]\n"
        "print(bad)\n"
    )
    assert _fresh(code) == "[]"


def test_the_names_load_at_their_first_use():
    """``import reasoning_core`` alone imports no torch (the runtime's file-reading commands
    need none); the first name used loads every module, as an eager import of the package
    did, and the submodules are attributes of the package as before."""
    code = (
        "import sys, reasoning_core as rc\n"
        "print('torch' in sys.modules)\n"
        "fn = rc.grpo_loss\n"
        "print('torch' in sys.modules, fn is rc.losses.grpo_loss)\n"
        "print(all(hasattr(rc, n) for n in rc.__all__), set(rc.__all__) <= set(dir(rc)))\n"
    )
    assert _fresh(code).splitlines() == ["False", "True True", "True True"]
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        rc.no_such_name  # noqa: B018


def test_a_registry_read_first_from_its_module_lists_every_built_in_method_in_order():
    """Read straight from ``reasoning_core.registry`` in a fresh interpreter (no name of the
    package used before), each registry lists the built-in methods the package lists, in the
    order it lists them."""
    code = (
        "from reasoning_core.registry import ADVANTAGE_ESTIMATORS as A, POLICY_LOSSES as P, "
        "OFFPOLICY_CORRECTIONS as O\n"
        "print([list(A), list(P), list(O)])\n"
    )
    want = [list(rc.ADVANTAGE_ESTIMATORS), list(rc.POLICY_LOSSES), list(rc.OFFPOLICY_CORRECTIONS)]
    assert _fresh(code) == str(want)
    assert {"grpo", "rloo"} <= set(want[0]) and {"grpo_clip", "cispo"} <= set(want[1])


def _checked(fn):
    jaxtyping = pytest.importorskip("jaxtyping")
    beartype = pytest.importorskip("beartype")
    return jaxtyping.jaxtyped(typechecker=beartype.beartype)(fn)


def test_annotations_hold_on_plain_and_vmapped_calls():
    gen = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 5, generator=gen)
    old = lp + 0.1
    adv = torch.randn(3, 1, generator=gen)
    mask = torch.rand(3, 5, generator=gen) > 0.3
    logits = torch.randn(3, 5, 7, generator=gen)
    labels = torch.randint(0, 7, (3, 5), generator=gen)

    clip = _checked(rc.compute_grpo_clip_loss)
    loss = _checked(rc.grpo_loss)
    lpfl = _checked(rc.log_probs_from_logits)
    entropy = _checked(rc.compute_entropy)
    group = _checked(rc.group_normalize)
    mean = _checked(rc.masked_mean)
    naive = _checked(rc.compute_naive_policy_gradient_loss)
    no_clip = _checked(rc.compute_grpo_no_clip_loss)
    dispatch = _checked(rc.compute_policy_gradient_loss)
    sft = _checked(rc.sft_loss)
    seq = _checked(rc.sequence_log_probs)
    dpo = _checked(rc.dpo_loss)

    clip(adv, lp, old, 0.2)
    loss(
        lp,
        mask,
        rc.LossInputs(advantages=adv, old_log_probs=old),
        rc.LossSettings("grpo_clip", cliprange=0.2),
    )
    lpfl(logits, labels, return_entropy=True)
    entropy(logits)
    group(torch.rand(6), 3, 1e-6, True)
    mean(lp, mask, dim=-1)
    naive(adv, lp)
    no_clip(adv, lp, old)
    dispatch(lp, "no_baseline", raw_rewards=adv)
    sft(lp, mask, 2.0)
    chosen, rejected = seq(lp, mask), seq(old, mask)
    dpo(chosen, rejected, rejected, chosen, 0.1, 1.0, mask.sum(-1))
    vmap(lambda c, r: dpo(c, r, r, c, 0.1))(chosen, rejected)
    vmap(lambda p, m: sft(p, m, 2.0))(lp, mask)
    vmap(lambda p, r: dispatch(p, "no_baseline", raw_rewards=r))(lp, adv)
    vmap(lambda a, p, o: clip(a, p, o, 0.2))(adv, lp, old)
    no_clip_settings = rc.LossSettings("grpo_no_clip")
    vmap(
        lambda p, m, a, o: loss(
            p, m, rc.LossInputs(advantages=a, old_log_probs=o), no_clip_settings
        )
    )(lp, mask, adv, old)
    vmap(lambda z, y: lpfl(z, y, return_entropy=True))(logits, labels)
    vmap(entropy)(logits)
    vmap(lambda r: group(r, 3, 1e-6, False))(torch.rand(2, 6))
    # ... and a wrong shape is caught by the annotation.
    with pytest.raises(Exception, match="(?i)type-check|shape|dimension|violates"):
        clip(adv, lp, old[:, :4], 0.2)


def test_annotations_of_the_policy_gradient_variants_hold():
    gen = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 5, generator=gen)
    old, ref = lp + 0.1, lp - 0.1
    adv = torch.randn(3, 1, generator=gen)
    mask = torch.rand(3, 5, generator=gen) > 0.3
    rewards = torch.rand(6, generator=gen)

    _checked(rc.compute_dapo_clip_loss)(adv, lp, old, 0.2, 0.28)
    _checked(rc.compute_gspo_loss)(adv, lp, old, mask, 3e-4, 4e-4)
    _checked(rc.compute_cispo_loss)(adv, lp, old, 1.0, 0.28)
    _checked(rc.compute_cispo_loss)(adv, lp, old, None, 0.28)
    _checked(rc.compute_sapo_loss)(adv, lp, old, 1.0, 1.05)
    _checked(rc.kl_penalty)(lp, ref, "k2")
    _checked(rc.token_mean_constant)(mask)
    for name in rc.ADVANTAGE_ESTIMATORS:
        _checked(rc.compute_advantages)(rewards, 3, name, 1e-6)
    _checked(rc.dynamic_sampling_keep)(rewards, 3)
    _checked(rc.mask_truncated)(mask, torch.tensor([True, False, False]))
    _checked(rc.soft_overlong_penalty)(torch.tensor([3, 9]), 10, 4)
    _checked(rc.random_rewards)(rewards, gen)
    vmap(lambda a, p, o, m: _checked(rc.compute_gspo_loss)(a, p, o, m, 0.1, 0.1))(
        adv, lp, old, mask
    )
    vmap(lambda r: _checked(rc.compute_advantages)(r, 3, "rloo", 1e-6))(rewards.reshape(2, 3))
    with pytest.raises(Exception, match="(?i)type-check|shape|dimension|violates"):
        _checked(rc.compute_gspo_loss)(adv, lp, old, mask[:, :4], 0.1, 0.1)
