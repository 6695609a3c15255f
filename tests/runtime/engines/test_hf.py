"""The Hugging Face rollout engine on a tiny random Qwen2 built in the test."""

from __future__ import annotations

import pytest
import sampling_table
import torch
from tiny_model import (
    LONG_PROMPT,
    PROMPTS,
    ascii_stop_from,
    build_model,
    make_eos_lover,
    reference_logprobs,
)

from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.hf import sample_tokens, sample_with_logprobs
from reasoning_core.runtime.engines.rollout import Completion, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, stop=[])


@pytest.fixture(scope="module")
def engine(model, tokenizer):
    return make_engine("hf", model, tokenizer)


def test_shapes_and_n_samples(engine):
    out = engine.generate(PROMPTS, SamplingParams(n=4, max_tokens=16, stop=[], seed=0))
    assert len(out) == len(PROMPTS)
    for completions in out:
        assert len(completions) == 4
        for c in completions:
            assert isinstance(c, Completion)
            assert 1 <= len(c.token_ids) <= 16
            assert len(c.logprobs) == len(c.token_ids)
            assert c.finish_reason in {"stop", "length"}
            assert all(lp <= 0.0 for lp in c.logprobs)
        # samples of one prompt differ (a random model at temperature 1 over 16 tokens)
        assert len({tuple(c.token_ids) for c in completions}) > 1


def test_seed_reproducible(engine):
    params = SamplingParams(n=2, max_tokens=12, stop=[], seed=7)
    first = engine.generate(PROMPTS, params)
    assert engine.generate(PROMPTS, params) == first
    assert engine.generate(PROMPTS, params.replace(seed=8)) != first


def test_logprobs_equal_policy_logprobs(engine, model, tokenizer):
    # temperature/top_p change the sampling, not the returned (raw policy) log-probs
    params = SamplingParams(n=2, max_tokens=20, temperature=0.7, top_p=0.9, stop=[], seed=1)
    out = engine.generate(PROMPTS + [LONG_PROMPT], params)
    for prompt, completions in zip(PROMPTS + [LONG_PROMPT], out, strict=True):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            ref = reference_logprobs(model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_batched_left_padding_matches_one_at_a_time(engine):
    prompts = PROMPTS + [LONG_PROMPT]
    together = engine.generate(prompts, GREEDY)
    alone = [engine.generate([p], GREEDY)[0] for p in prompts]
    assert [c[0].token_ids for c in together] == [c[0].token_ids for c in alone]


def test_small_max_batch_size_gives_same_results(model, tokenizer):
    params = SamplingParams(n=3, max_tokens=10, stop=[], temperature=0.0)
    big = make_engine("hf", model, tokenizer).generate(PROMPTS, params)
    small = make_engine("hf", model, tokenizer, max_batch_size=2).generate(PROMPTS, params)
    assert [[c.token_ids for c in cs] for cs in big] == [[c.token_ids for c in cs] for cs in small]


@pytest.mark.parametrize("keep", [True, False])
def test_stop_string_truncates_text(engine, keep):
    full = engine.generate(PROMPTS[:1], GREEDY)[0][0]
    stop = ascii_stop_from(full.text)
    idx = full.text.find(stop)
    out = engine.generate(PROMPTS[:1], GREEDY.replace(stop=[stop], include_stop_str_in_output=keep))
    c = out[0][0]
    assert c.finish_reason == "stop"
    assert c.text == (full.text[: idx + len(stop)] if keep else full.text[:idx])
    # tokens stop at the token that completed the stop string, and are a prefix of the full run
    assert c.token_ids == full.token_ids[: len(c.token_ids)]
    assert stop in engine.tokenizer.decode(c.token_ids)
    assert stop not in engine.tokenizer.decode(c.token_ids[:-1])


def test_sampled_stops_cut_at_first_occurrence(engine):
    stops = ["e", "5"]
    out = engine.generate(PROMPTS, SamplingParams(n=4, max_tokens=30, stop=stops, seed=3))
    stopped = 0
    for c in (c for cs in out for c in cs):
        body = c.text
        if c.finish_reason == "stop" and any(c.text.endswith(s) for s in stops):
            stopped += 1
            body = c.text[:-1]
        assert not any(s in body for s in stops)
    assert stopped > 0


def test_min_tokens_suppresses_eos(model, tokenizer):
    eos_model = make_eos_lover(model)
    engine = make_engine("hf", eos_model, tokenizer)
    eos = tokenizer.eos_token_id
    plain = engine.generate(PROMPTS, SamplingParams(max_tokens=10, stop=[], seed=0))
    assert all(c[0].token_ids == [eos] and c[0].finish_reason == "stop" for c in plain)
    params = SamplingParams(n=2, max_tokens=12, min_tokens=6, stop=[], seed=0)
    for prompt, completions in zip(PROMPTS, engine.generate(PROMPTS, params), strict=True):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            assert len(c.token_ids) >= 6
            assert eos not in c.token_ids[:6]
            # EOS, when it comes, is the first token after the minimum
            assert c.finish_reason == "length" or c.token_ids[-1] == eos
            # log-probs are the raw policy's, so the forced tokens have low log-prob
            ref = reference_logprobs(eos_model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_min_tokens_ignores_early_stop_strings(engine):
    full = engine.generate(PROMPTS[:1], GREEDY)[0][0]
    stop = ascii_stop_from(full.text, start=0)
    first_end = full.text.find(stop) + len(stop)
    # the token count at which the first occurrence is complete
    n_first = next(
        k
        for k in range(1, len(full.token_ids) + 1)
        if stop in engine.tokenizer.decode(full.token_ids[:k])
    )
    params = GREEDY.replace(stop=[stop], min_tokens=n_first)
    c = engine.generate(PROMPTS[:1], params)[0][0]
    assert len(c.token_ids) > n_first
    assert c.text.startswith(full.text[:first_end])
    if c.finish_reason == "stop":
        assert c.text.endswith(stop) and len(c.text) > first_end


def test_sync_weights_copies_state(model, tokenizer):
    other = build_model(len(tokenizer), seed=1)
    engine = make_engine("hf", other, tokenizer)
    engine.sync_weights(model)
    reference = make_engine("hf", model, tokenizer)
    assert engine.generate(PROMPTS, GREEDY) == reference.generate(PROMPTS, GREEDY)


@sampling_table.temperature_and_top_p
def test_sample_tokens_follows_temperature_and_top_p(temperature, top_p, expected):
    logits = sampling_table.logits()
    gen = torch.Generator().manual_seed(0)
    tokens, drawn = sample_with_logprobs(logits, temperature, top_p, gen)
    again = sample_tokens(logits, temperature, top_p, torch.Generator().manual_seed(0))
    assert torch.equal(again, tokens)  # the same draws, with or without the log-probs
    sampling_table.assert_follows(tokens, drawn, expected)


def test_tiny_top_p_is_greedy(engine):
    nucleus = SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=24, stop=[], seed=0)
    assert engine.generate(PROMPTS, nucleus) == engine.generate(PROMPTS, GREEDY)


def test_identical_prompts_in_one_call_are_sampled_independently(engine):
    out = engine.generate(PROMPTS[:1] * 2, SamplingParams(max_tokens=16, stop=[], seed=5))
    assert out[0][0].token_ids != out[1][0].token_ids


def _first_new_printable_token(tokenizer, token_ids, min_chars=1):
    """(k, piece): the first token of ``token_ids`` that is printable ASCII (at least
    ``min_chars`` of them, all distinct) whose id and characters do not occur before it, so a
    stop string made of them first completes at token k."""
    pieces = [tokenizer.decode([t]) for t in token_ids]
    return next(
        (k, p)
        for k, p in enumerate(pieces)
        if len(p.strip()) >= min_chars
        and p.isascii()
        and p.isprintable()
        and token_ids[k] not in token_ids[:k]
        and not any(ch in "".join(pieces[:k]) for ch in p.strip())
        and len(set(p.strip())) == len(p.strip())
    )


def test_generation_config_eos_ids_end_a_row(model, tokenizer):
    """Models whose generation_config lists extra EOS ids (chat models' end-of-turn token)
    stop on those too; a stop string that such an ordinary-token EOS completes still cuts
    the text."""
    import copy

    full = make_engine("hf", model, tokenizer).generate(PROMPTS[:1], GREEDY)[0][0]
    k, piece = _first_new_printable_token(tokenizer, full.token_ids)
    chat = copy.deepcopy(model)
    chat.generation_config.eos_token_id = [tokenizer.eos_token_id, full.token_ids[k]]
    engine = make_engine("hf", chat, tokenizer)
    c = engine.generate(PROMPTS[:1], GREEDY)[0][0]
    assert c.token_ids == full.token_ids[: k + 1] and c.finish_reason == "stop"
    assert c.text == tokenizer.decode(full.token_ids[: k + 1])
    stop = piece.strip()[-1]
    params = GREEDY.replace(stop=[stop], include_stop_str_in_output=False)
    c = engine.generate(PROMPTS[:1], params)[0][0]
    assert c.token_ids == full.token_ids[: k + 1]
    assert c.text == full.text[: full.text.index(stop)]


def test_earliest_ending_stop_string_wins_when_one_token_completes_two(engine):
    """A token that completes two stop strings at once cuts the text at the one that ends
    first, whatever their order in ``stop``."""
    full = engine.generate(PROMPTS[:1], GREEDY)[0][0]
    k, piece = _first_new_printable_token(engine.tokenizer, full.token_ids, min_chars=2)
    early, late = piece.strip()[0], piece.strip()[-1]
    cut = full.text.index(early)  # neither character occurs before token k
    for keep in (True, False):
        params = GREEDY.replace(stop=[late, early], include_stop_str_in_output=keep)
        c = engine.generate(PROMPTS[:1], params)[0][0]
        assert c.token_ids == full.token_ids[: k + 1]
        assert c.text == full.text[: cut + 1 if keep else cut]


def test_bad_params_rejected():
    for bad in ({"n": 0}, {"temperature": -0.1}, {"max_tokens": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_tokens=4, min_tokens=5)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="unknown engine"):
        make_engine("tgi", None)
