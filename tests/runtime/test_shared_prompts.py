"""``shared_prompt_log_probs``: each distinct prompt of a micro batch computed once, its
responses on its KV cache. Same response log-probs, entropies and gradients as the full
forward (up to float rounding) on batches with repeated and distinct prompts of different
lengths, responses of different lengths and a row without response tokens."""

from __future__ import annotations

import pytest
import torch
from tiny_model import build_model, build_tokenizer

from reasoning_core import get_response_log_probs
from reasoning_core.runtime.batching import policy_log_probs, tokenize_pairs

PROMPTS = ["1 + 2 =", "x + 3 =", "1 + 2 =", "12 + 3 + 4 =", "x + 3 =", "1 + 2 ="]
RESPONSES = [" 3", " x + 3 = 7 </answer>", " 12 + 12", " 19", " 4", ""]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def batch(tokenizer):
    return tokenize_pairs(PROMPTS, RESPONSES, tokenizer)


def both(model, batch, **kw):
    micro = {k: batch[k] for k in ("input_ids", "labels", "response_mask")}
    full = policy_log_probs(model, micro, torch.device("cpu"), **kw)
    shared = policy_log_probs(model, micro, torch.device("cpu"), share_prompts=True, **kw)
    return full, shared


def test_response_positions_match_the_full_forward_and_the_rest_are_zero(tokenizer, batch):
    model = build_model(len(tokenizer), seed=0).eval()
    mask = batch["response_mask"]
    assert mask.sum(1).tolist()[-1] == 0 and mask.sum(1).min() < mask.sum(1).max()
    (lp, ent), (slp, sent) = both(model, batch)
    assert slp.shape == lp.shape == sent.shape
    torch.testing.assert_close(slp[mask], lp[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(sent[mask], ent[mask], rtol=0, atol=1e-5)
    assert not slp[~mask].any() and not sent[~mask].any()
    _, (no_ent_lp, no_ent) = both(model, batch, with_entropy=False)
    assert no_ent is None
    torch.testing.assert_close(no_ent_lp, slp, rtol=0, atol=0)


def test_gradients_match_the_full_forward(tokenizer, batch):
    mask = batch["response_mask"]
    weights = torch.linspace(-1.0, 2.0, mask.numel()).reshape(mask.shape)
    grads = []
    for share in (False, True):
        model = build_model(len(tokenizer), seed=0).train()
        lp, ent = policy_log_probs(
            model,
            {k: batch[k] for k in ("input_ids", "labels", "response_mask")},
            torch.device("cpu"),
            share_prompts=share,
        )
        ((lp * weights + 0.1 * ent) * mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for full, shared in zip(*grads, strict=True):  # rounding, relative to each tensor's scale
        assert full.abs().max() > 0
        assert (shared - full).abs().max() <= 1e-4 * full.abs().max()


def test_every_distinct_prompt_runs_once(tokenizer, batch):
    """The prompt forward sees the three distinct prompts (plus the empty row's stand-in);
    the response forward one row per response."""
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
    rows = len(PROMPTS)
    full, head, body = seen
    assert full[0] == rows and head[0] == 4 and body[0] == rows
    assert body[1] == int(batch["response_mask"].sum(1).max())


def test_a_batch_without_response_tokens_scores_nothing(tokenizer):
    batch = tokenize_pairs(["1 + 2 ="], [""], tokenizer)
    micro = {k: batch[k] for k in ("input_ids", "labels", "response_mask")}
    lp, ent = policy_log_probs(
        build_model(len(tokenizer), seed=0), micro, torch.device("cpu"), share_prompts=True
    )
    assert lp.shape == batch["labels"].shape and not lp.any() and not ent.any()
    full = get_response_log_probs(
        build_model(len(tokenizer), seed=0), batch["input_ids"], batch["labels"]
    )
    assert full["log_probs"].shape == lp.shape
