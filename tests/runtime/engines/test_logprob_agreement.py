"""Every engine's log-probs of its sampled tokens against one full forward of the policy
(``get_response_log_probs``): equal to float32 rounding in sync, clearly apart when the engine
holds a copy that missed an optimizer step, equal again after a sync. Sizes measured in
benchmarks/engine_logprob_mismatch.txt (synced: mean ~5e-7, max ~3e-6; one unsynced AdamW
step at lr 1e-4: mean ~8e-2)."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from tiny_model import PROMPTS, build_model, save_tiny_model

from reasoning_core import (
    LossInputs,
    LossSettings,
    get_response_log_probs,
    grpo_loss,
    logprob_mismatch,
)
from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import SamplingParams

SYNCED_MEAN, SYNCED_MAX = 2e-6, 2e-5  # 4x and 7x the largest measured
STALE_MEAN = 1e-2  # a stale copy measured ~8e-2 after one step at lr 1e-4
SAMPLE = SamplingParams(n=4, max_tokens=24, stop=[], seed=0)


def forward(model, tokenizer, prompts, out):
    """``(logits, labels, mask, engine raw log-probs, engine sampling log-probs)`` of every
    completion, right-padded; logits of one plain forward of ``model`` (no cache)."""
    rows = []
    for prompt, group in zip(prompts, out, strict=True):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        rows += [(prompt_ids, c) for c in group]
    width = max(len(p) + len(c.token_ids) for p, c in rows) - 1
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.zeros_like(input_ids)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    raw, drawn = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
    for i, (p, c) in enumerate(rows):
        ids = torch.tensor(p + c.token_ids)
        span = slice(len(p) - 1, len(ids) - 1)
        input_ids[i, : len(ids) - 1], labels[i, : len(ids) - 1] = ids[:-1], ids[1:]
        mask[i, span] = True
        raw[i, span] = torch.tensor(c.logprobs)
        if c.sampling_logprobs is not None:
            drawn[i, span] = torch.tensor(c.sampling_logprobs)
    return input_ids, labels, mask, raw, drawn


def policy_log_probs(model, input_ids, labels):
    with torch.no_grad():
        return get_response_log_probs(model, input_ids, labels)["log_probs"]


def mismatch(model, tokenizer, prompts, out, field="raw"):
    input_ids, labels, mask, raw, drawn = forward(model, tokenizer, prompts, out)
    engine = raw if field == "raw" else drawn
    stats = logprob_mismatch(policy_log_probs(model, input_ids, labels), engine, mask)
    return {k: v.item() for k, v in stats.items()}


def one_adamw_step(model, tokenizer, prompts, out, lr=1e-4):
    """One AdamW step of ``model`` on a policy-gradient loss of the sampled responses."""
    input_ids, labels, mask, _, _ = forward(model, tokenizer, prompts, out)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    lp = get_response_log_probs(model, input_ids, labels)["log_probs"]
    advantages = torch.randn(len(lp), 1, generator=torch.Generator().manual_seed(0))
    inputs, settings = LossInputs(advantages=advantages), LossSettings("reinforce_with_baseline")
    grpo_loss(lp, mask, inputs, settings)[0].backward()
    optimizer.step()
    model.eval()


def nucleus_log_probs(logits, labels, temperature, top_p):
    """Reference: log-prob of each label under softmax(logits / T) cut to the top-p nucleus and
    renormalized, in float64."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    chosen = kept.gather(-1, labels[..., None]).squeeze(-1)
    return (chosen / kept.sum(-1)).log()


@pytest.fixture(scope="module")
def policy(tokenizer):
    return build_model(len(tokenizer))


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_engine_log_probs_equal_a_full_forward_in_sync(kind, policy, tokenizer):
    engine = make_engine(kind, copy.deepcopy(policy), tokenizer)
    out = engine.generate(PROMPTS, SAMPLE)
    for field in ("raw", "drawn"):  # temperature 1, top-p 1: the same distribution
        stats = mismatch(policy, tokenizer, PROMPTS, out, field)
        assert stats["logprob_diff_mean"] < SYNCED_MEAN, (field, stats)
        assert stats["logprob_diff_max"] < SYNCED_MAX, (field, stats)
        assert stats["ratio_outside"] == 0.0


@pytest.mark.parametrize("kind", ["hf", "static"])
@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 1.0), (1.3, 0.9), (0.7, 0.8)])
def test_sampling_log_probs_are_those_of_the_distribution_sampled(
    kind, temperature, top_p, policy, tokenizer
):
    """``logprobs`` stay the raw policy's; ``sampling_logprobs`` are the tempered nucleus'."""
    engine = make_engine(kind, policy, tokenizer)
    params = SAMPLE.replace(temperature=temperature, top_p=top_p)
    out = engine.generate(PROMPTS, params)
    input_ids, labels, mask, raw, drawn = forward(policy, tokenizer, PROMPTS, out)
    with torch.no_grad():
        logits = policy(input_ids).logits
    raw_stats = logprob_mismatch(policy_log_probs(policy, input_ids, labels), raw, mask)
    assert raw_stats["logprob_diff_max"].item() < SYNCED_MAX
    reference = nucleus_log_probs(logits, labels, temperature, top_p).float()
    drawn_stats = logprob_mismatch(reference, drawn, mask)
    assert drawn_stats["logprob_diff_max"].item() < SYNCED_MAX
    # and the two kinds of log-prob really differ here
    assert logprob_mismatch(raw, drawn, mask)["logprob_diff_mean"].item() > 1e-2


def test_greedy_sampling_log_probs_are_zero(policy, tokenizer):
    greedy = SAMPLE.replace(n=1, temperature=0.0)
    for kind in ("hf", "static"):
        out = make_engine(kind, policy, tokenizer).generate(PROMPTS, greedy)
        assert all(c.sampling_logprobs == [0.0] * len(c.token_ids) for g in out for c in g)


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_a_stale_engine_is_seen_and_a_sync_mends_it(kind, tokenizer):
    policy = build_model(len(tokenizer))
    engine = make_engine(kind, copy.deepcopy(policy), tokenizer)
    out = engine.generate(PROMPTS, SAMPLE)
    one_adamw_step(policy, tokenizer, PROMPTS, out)
    stale = engine.generate(PROMPTS, SAMPLE.replace(seed=1))
    assert mismatch(policy, tokenizer, PROMPTS, stale)["logprob_diff_mean"] > STALE_MEAN
    engine.sync_weights(policy)
    synced = engine.generate(PROMPTS, SAMPLE.replace(seed=1))
    assert mismatch(policy, tokenizer, PROMPTS, synced)["logprob_diff_mean"] < SYNCED_MEAN


@pytest.mark.vllm
def test_vllm_stale_and_synced(tmp_path):
    """vLLM (float32, the saved folder's tokenizer): in sync, one step stale, synced again."""
    from transformers import AutoModelForCausalLM

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    folder = save_tiny_model(tmp_path / "model")
    policy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    engine = make_engine(
        "vllm", str(folder), dtype="float32", max_model_len=512, kv_cache_memory_bytes=32 << 20
    )
    try:
        tokenizer = engine.tokenizer
        out = engine.generate(PROMPTS, SAMPLE)
        stats = mismatch(policy, tokenizer, PROMPTS, out)
        assert stats["logprob_diff_mean"] < SYNCED_MEAN and stats["logprob_diff_max"] < SYNCED_MAX
        drawn = mismatch(policy, tokenizer, PROMPTS, out, "drawn")  # temperature 1: raw
        assert drawn == stats
        one_adamw_step(policy, tokenizer, PROMPTS, out)
        stale = engine.generate(PROMPTS, SAMPLE.replace(seed=1))
        assert mismatch(policy, tokenizer, PROMPTS, stale)["logprob_diff_mean"] > STALE_MEAN
        engine.sync_weights(policy)
        synced = engine.generate(PROMPTS, SAMPLE.replace(seed=1))
        assert mismatch(policy, tokenizer, PROMPTS, synced)["logprob_diff_mean"] < SYNCED_MEAN
        tempered = engine.generate(PROMPTS, SAMPLE.replace(temperature=0.7))
        assert all(c.sampling_logprobs is None for g in tempered for c in g)
    finally:
        engine.close()
