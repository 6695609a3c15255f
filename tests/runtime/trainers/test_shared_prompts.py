"""``shared_prompt_log_probs``: the rows that share a prompt packed into one sequence (the
prompt once, then each response under a mask that hides the other responses). Same response
log-probs, entropies and gradients as the full forward (up to float rounding) on batches with
repeated and distinct prompts of different lengths, responses of different lengths and a row
without response tokens; with SDPA and eager attention, and with gradient checkpointing."""

from __future__ import annotations

import pytest
import torch
from tiny_model import build_model, build_tokenizer

from reasoning_core import get_response_log_probs
from reasoning_core.runtime.training.batching import (
    MicroBatch,
    check_packable,
    policy_log_probs,
    tokenize_pairs,
)

PROMPTS = ["1 + 2 =", "x + 3 =", "1 + 2 =", "12 + 3 + 4 =", "x + 3 =", "1 + 2 ="]
RESPONSES = [" 3", " x + 3 = 7 </answer>", " 12 + 12", " 19", " 4", ""]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def batch(tokenizer):
    return tokenize_pairs(PROMPTS, RESPONSES, tokenizer)


def whole(batch):
    """Every row of a token batch as one micro batch (its full width)."""
    return MicroBatch(torch.arange(batch.rows), batch.input_ids, batch.labels, batch.response_mask)


def both(model, batch, **kw):
    micro = whole(batch)
    full = policy_log_probs(model, micro, torch.device("cpu"), **kw)
    shared = policy_log_probs(model, micro, torch.device("cpu"), share_prompts=True, **kw)
    return full, shared


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_response_positions_match_the_full_forward_and_the_rest_are_zero(
    tokenizer, batch, attention
):
    model = build_model(len(tokenizer), seed=0).eval()
    model.set_attn_implementation(attention)
    mask = batch.response_mask
    assert mask.sum(1).tolist()[-1] == 0 and mask.sum(1).min() < mask.sum(1).max()
    (lp, ent), (slp, sent) = both(model, batch)
    assert slp.shape == lp.shape == sent.shape
    torch.testing.assert_close(slp[mask], lp[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(sent[mask], ent[mask], rtol=0, atol=1e-5)
    assert not slp[~mask].any() and not sent[~mask].any()
    _, (no_ent_lp, no_ent) = both(model, batch, with_entropy=False)
    assert no_ent is None
    torch.testing.assert_close(no_ent_lp, slp, rtol=0, atol=0)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_gradients_match_the_full_forward(tokenizer, batch, checkpointing):
    mask = batch.response_mask
    weights = torch.linspace(-1.0, 2.0, mask.numel()).reshape(mask.shape)
    grads = []
    for share in (False, True):
        model = build_model(len(tokenizer), seed=0).train()
        if checkpointing and share:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        lp, ent = policy_log_probs(
            model,
            whole(batch),
            torch.device("cpu"),
            share_prompts=share,
        )
        ((lp * weights + 0.1 * ent) * mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for full, shared in zip(*grads, strict=True):  # rounding, relative to each tensor's scale
        assert full.abs().max() > 0
        assert (shared - full).abs().max() <= 1e-4 * full.abs().max()


def test_responses_with_unscored_tokens_inside_match_the_full_forward(tokenizer, batch):
    """A multi-turn episode's row: tokens the policy did not produce (a tool's result) between
    its response tokens are context, not scored; packed, the scored positions keep the full
    forward's log-probs, entropies and gradients, and the unscored ones are 0."""
    mask = batch.response_mask.clone()
    row = int(mask.sum(1).argmax())  # the longest response: hide two tokens inside it
    cols = mask[row].nonzero().flatten()
    assert len(cols) >= 5
    mask[row, cols[2:4]] = False
    gapped = MicroBatch(torch.arange(batch.rows), batch.input_ids, batch.labels, mask)
    weights = torch.linspace(-1.0, 2.0, mask.numel()).reshape(mask.shape)
    out, grads = [], []
    for share in (False, True):
        model = build_model(len(tokenizer), seed=0).train()
        lp, ent = policy_log_probs(model, gapped, torch.device("cpu"), share_prompts=share)
        ((lp * weights + 0.1 * ent) * mask).sum().backward()
        out.append((lp.detach(), ent.detach()))
        grads.append([p.grad.clone() for p in model.parameters()])
    (lp, ent), (slp, sent) = out
    torch.testing.assert_close(slp[mask], lp[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(sent[mask], ent[mask], rtol=0, atol=1e-5)
    assert not slp[~mask].any() and not sent[~mask].any()
    for full, shared in zip(*grads, strict=True):
        assert full.abs().max() > 0
        assert (shared - full).abs().max() <= 1e-4 * full.abs().max()


def test_each_prompt_is_packed_once_with_its_responses(tokenizer, batch):
    """One forward over one packed row per distinct prompt with responses (the empty row
    adds nothing), as long as the longest prompt plus its responses."""
    model = build_model(len(tokenizer), seed=0).eval()
    seen = []
    hook = model.model.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    try:
        both(model, batch)
    finally:
        hook.remove()
    full, packed = seen
    assert full[0] == len(PROMPTS)
    counts = batch.response_mask.sum(1)
    prompt_len = batch.lengths - counts + 1  # lengths: one past the last label index
    packs: dict[str, int] = {}
    for prompt, p, c in zip(PROMPTS, prompt_len.tolist(), counts.tolist(), strict=True):
        if c:
            packs[prompt] = packs.get(prompt, p) + c
    assert len(packs) == 3 and packed == (3, max(packs.values()))


def test_flash_attention_is_refused_naming_the_setting(tokenizer):
    model = build_model(len(tokenizer), seed=0)
    check_packable(model)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="share_prompts.*flash_attention_2"):
        check_packable(model)


def test_a_batch_without_response_tokens_scores_nothing(tokenizer):
    batch = tokenize_pairs(["1 + 2 ="], [""], tokenizer)
    micro = whole(batch)
    lp, ent = policy_log_probs(
        build_model(len(tokenizer), seed=0), micro, torch.device("cpu"), share_prompts=True
    )
    assert lp.shape == batch.labels.shape and not lp.any() and not ent.any()
    full = get_response_log_probs(
        build_model(len(tokenizer), seed=0), batch.input_ids, batch.labels
    )
    assert full["log_probs"].shape == lp.shape
