"""The engine's log-probs on the training batch's grid: placed where the re-tokenized text is
the sampled ids, and, on a model whose samples re-tokenize exactly, equal to the policy's own
forward at every response token."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tiny_model import PROMPTS, build_model, build_tokenizer, make_canonical_sampler

from reasoning_core import get_response_log_probs, logprob_mismatch, tis_weights
from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import Completion, SamplingParams
from reasoning_core.runtime.training.batching import tokenize_pairs
from reasoning_core.runtime.training.engine_check import (
    MISMATCH_KEYS,
    EngineCheck,
    MismatchSums,
    MismatchWarner,
    check_rollouts,
    engine_log_probs,
)


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
    whole = MismatchSums()
    whole.add(policy, values, aligned, mask)
    assert whole.metrics() == {
        "rollout/logprob_diff_mean": 0.125,
        "rollout/logprob_diff_max": 0.5,
        "rollout/ratio_outside": 0.0,
        "rollout/logprob_aligned": 4 / 8,
    }
    trimmed = MismatchSums()  # a micro batch of every row, as wide as its longest row (3)
    EngineCheck(values, aligned).measure(trimmed, torch.arange(3), policy[:, :3], mask[:, :3])
    assert trimmed.metrics()["rollout/logprob_diff_mean"] == pytest.approx(0.5 / 3)
    assert trimmed.metrics()["rollout/logprob_aligned"] == pytest.approx(3 / 6)


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


def test_the_sums_over_pieces_are_the_whole_batchs_statistics():
    """MismatchSums over micro batches (each cut to its own width) gives the statistics and
    TIS metadata of the whole batch at once."""
    gen = torch.Generator().manual_seed(0)
    policy = torch.randn(6, 9, generator=gen)
    values = policy + 0.3 * torch.randn(6, 9, generator=gen)
    mask = torch.rand(6, 9, generator=gen) > 0.3
    mask[2:5, 7:] = False  # rows 2-4 end by column 7 (their micro batch is that wide)
    aligned = mask & (torch.rand(6, 9, generator=gen) > 0.2)
    whole = MismatchSums()
    weights = whole.add(policy, values, aligned, mask, tis_cap=1.5)
    pieces = MismatchSums()
    for rows, width in (([0, 1], 9), ([2, 3, 4], 7), ([5], 9)):
        p, v = policy[rows, :width], values[rows, :width]
        w = pieces.add(p, v, aligned[rows, :width], mask[rows, :width], tis_cap=1.5)
        assert torch.equal(w, weights[rows, :width])
    assert pieces.metrics() == pytest.approx(whole.metrics(), rel=1e-6)
    expected_weights, meta = tis_weights(policy, values, aligned, cap=1.5)
    assert torch.equal(weights, expected_weights)
    metrics = whole.metrics()
    assert metrics["rollout/tis_weight_mean"] == pytest.approx(float(meta["tis_weight_mean"]))
    assert metrics["rollout/tis_clipped"] == pytest.approx(float(meta["tis_clipped"]))
    stats = logprob_mismatch(policy, values, aligned)
    assert metrics["rollout/logprob_diff_mean"] == pytest.approx(float(stats["logprob_diff_mean"]))
    assert metrics["rollout/logprob_diff_max"] == float(stats["logprob_diff_max"])
    assert metrics["rollout/logprob_aligned"] == int(aligned.sum()) / int(mask.sum())
    assert set(MismatchSums().metrics()) == set(MISMATCH_KEYS)  # no TIS keys without TIS


def test_a_completion_without_engine_log_probs_is_not_compared():
    """A completion the engine did not sample (NaN log-probs, as the tests' scripted answers
    carry) has no aligned position, so no NaN reaches a statistic or a weight."""
    labels = torch.tensor([[7, 5, 6], [7, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1]], dtype=torch.bool)
    rows = [completion([5, 6], [math.nan, math.nan]), completion([5, 6], [-1.0, math.nan])]
    values, aligned = engine_log_probs(labels, mask, rows)
    assert aligned.tolist() == [[False] * 3, [False, True, False]]
    assert torch.isfinite(values).all()


def test_check_rollouts_measures_now_with_old_log_probs_else_hands_a_live_check():
    labels = torch.tensor([[7, 5, 6]])
    mask = torch.tensor([[0, 1, 1]], dtype=torch.bool)
    engine = engine_log_probs(labels, mask, [completion([5, 6], [-1.0, -2.0])])
    old = torch.tensor([[0.0, -1.0, -1.0]])
    metrics, weights, live = check_rollouts(engine, mask, old, 1.5)
    assert live is None and weights.tolist() == [[1.0, 1.0, 1.5]]
    assert metrics["rollout/logprob_diff_mean"] == 0.5 and metrics["rollout/tis_clipped"] == 0.5
    metrics, weights, live = check_rollouts(engine, mask, None, None)
    assert metrics == {} and weights is None and live.tis_cap is None
    assert torch.equal(live.values, engine[0]) and torch.equal(live.aligned, engine[1])


def test_the_warning_is_printed_once_and_only_above_the_threshold(capsys):
    warn = MismatchWarner(0.03, "grpo")
    warn({})  # a line measured later (the first update's) has no key yet
    warn({"rollout/logprob_diff_mean": 0.03})
    assert capsys.readouterr().err == ""
    warn({"rollout/logprob_diff_mean": 0.05})
    warn({"rollout/logprob_diff_mean": 0.5})
    err = capsys.readouterr().err
    assert err.count("[grpo] warning:") == 1 and "0.05" in err and "stale weights" in err
    silent = MismatchWarner(None, "ei")
    silent({"rollout/logprob_diff_mean": 10.0})
    assert capsys.readouterr().err == ""
