"""The engine's log-probs on the training batch's grid: placed where the re-tokenized text is
the sampled ids, and, on a model whose samples re-tokenize exactly, equal to the policy's own
forward at every response token."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_model import PROMPTS, build_model, build_tokenizer, make_canonical_sampler

from reasoning_core import get_response_log_probs, logprob_mismatch
from reasoning_core.runtime.batching import tokenize_pairs
from reasoning_core.runtime.engine_logprobs import engine_log_probs, mismatch_metrics
from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.rollout import Completion, SamplingParams


def completion(ids, logprobs, sampling=None):
    return Completion("", ids, logprobs, "stop", sampling_logprobs=sampling)


def test_log_probs_are_placed_on_the_leading_positions_that_match():
    labels = torch.tensor([[7, 5, 6, 8, 0], [7, 5, 6, 8, 0], [7, 9, 9, 0, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 1, 1, 1, 0], [0, 1, 1, 0, 0]], dtype=torch.bool)
    rows = [
        completion([5, 6, 8, 0], [-1.0, -2.0, -3.0, -4.0]),  # + a trailing EOS the text drops
        completion([5, 4, 8], [-1.0, -2.0, -3.0]),  # differs at its second token
        completion([3, 9], [-1.0, -2.0]),  # differs at once
    ]
    values, aligned = engine_log_probs(labels, mask, rows)
    assert aligned.tolist() == [
        [False, True, True, True, False],
        [False, True, False, False, False],
        [False] * 5,
    ]
    assert values[0].tolist() == [0.0, -1.0, -2.0, -3.0, 0.0]
    assert values[1].tolist() == [0.0, -1.0, 0.0, 0.0, 0.0]
    assert values[2].abs().sum() == 0
    policy = values.clone()
    policy[0, 1] = -1.5  # one compared token off by 0.5; the unaligned positions are ignored
    policy[2] = -7.0
    assert mismatch_metrics(policy, values, aligned, mask) == {
        "rollout/logprob_diff_mean": 0.125,
        "rollout/logprob_diff_max": 0.5,
        "rollout/ratio_outside": 0.0,
        "rollout/logprob_aligned": 4 / 8,
    }
    trimmed = mismatch_metrics(policy[:, :3], values, aligned, mask)  # a micro batch's width
    assert trimmed["rollout/logprob_diff_mean"] == pytest.approx(0.5 / 3)
    assert trimmed["rollout/logprob_aligned"] == pytest.approx(3 / 6)


def test_missing_log_probs_and_a_row_count_mismatch_are_named():
    labels, mask = torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2)
    with pytest.raises(ValueError, match="completion 0 has no sampling_logprobs"):
        engine_log_probs(labels, mask, [completion([0, 0], [0.0, 0.0])], "sampling_logprobs")
    with pytest.raises(ValueError, match="1 token rows but 2 completions"):
        engine_log_probs(labels, mask, [completion([0], [0.0])] * 2)


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_on_exactly_re_tokenized_samples_every_response_token_is_compared(kind):
    tokenizer = build_tokenizer()
    policy = make_canonical_sampler(build_model(len(tokenizer)), tokenizer)
    engine = make_engine(kind, copy.deepcopy(policy), tokenizer)
    params = SamplingParams(n=4, max_tokens=16, stop=[], seed=0)
    out = [c for group in engine.generate(PROMPTS, params) for c in group]
    prompts = [p for p in PROMPTS for _ in range(params.n)]
    tokens = tokenize_pairs(prompts, [c.text for c in out], tokenizer)
    values, aligned = engine_log_probs(tokens.labels, tokens.response_mask, out)
    assert torch.equal(aligned, tokens.response_mask) and aligned.any()

    def diff_mean():
        with torch.no_grad():
            lp = get_response_log_probs(policy, tokens.input_ids, tokens.labels)
        return logprob_mismatch(lp["log_probs"], values, aligned)["logprob_diff_mean"].item()

    assert diff_mean() < 2e-6  # measured 1.0-1.2e-7 (hf, static)
    with torch.no_grad():  # the policy moves, the engine's copy does not: a stale engine
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 1e-2)
    assert diff_mean() > 1e-2  # measured 0.20-0.27
