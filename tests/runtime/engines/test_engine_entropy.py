"""The per-token entropies the hf and static engines return (``Completion.entropies``).

``entropies[i]`` must be the entropy of the raw policy (temperature 1, no top-p) at the
position of ``token_ids[i]``: what the evaluation's second forward computes for the same ids.
The reference here is that forward (``get_response_log_probs`` with ``return_token_entropy``,
one plain pass without a cache) over prompt + the sampled ids, on a tiny random Qwen2 in
float32 (tests/helpers/tiny_model.py).
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny_model import (
    LONG_PROMPT,
    PROMPTS,
    ascii_stop_from,
    make_eos_lover,
    reference_logprobs,
)

from reasoning_core import get_response_log_probs
from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import SamplingParams

ALL_PROMPTS = PROMPTS + [LONG_PROMPT]


@torch.no_grad()
def forward_entropies(model, prompt_ids: list[int], token_ids: list[int]) -> torch.Tensor:
    """Entropy at each of ``token_ids``' positions from one full no-cache forward."""
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    out = get_response_log_probs(model, ids[:, :-1], ids[:, 1:], return_token_entropy=True)
    start = len(prompt_ids) - 1
    return out["token_entropy"][0, start : start + len(token_ids)].float()


def cases(engine, tokenizer) -> list[SamplingParams]:
    """n > 1 with a stop string that occurs in a sample (kept, and cut off), min_tokens, and
    temperature/top-p (which change the draw, not the distribution whose entropy is returned)."""
    no_eos = SamplingParams(max_tokens=24, min_tokens=24, stop=[], seed=0)
    probe = engine.generate(PROMPTS[:1], no_eos)
    stop = ascii_stop_from(probe[0][0].text)
    return [
        SamplingParams(n=3, max_tokens=24, min_tokens=3, stop=[stop], seed=1),
        SamplingParams(
            n=2,
            max_tokens=24,
            min_tokens=2,
            temperature=0.7,
            top_p=0.9,
            stop=[stop],
            include_stop_str_in_output=False,
            seed=2,
        ),
    ]


@pytest.mark.parametrize("kind", ["hf", "static"])
@pytest.mark.parametrize("eos_lover", [False, True])
def test_entropies_equal_the_second_forward_on_the_sampled_ids(kind, eos_lover, model, tokenizer):
    """Every generated token, including a sampled EOS (the EOS-loving model ends most rows
    early; its EOS is masked below min_tokens, and the entropy stays the raw one)."""
    policy = make_eos_lover(model) if eos_lover else model
    engine = make_engine(kind, policy, tokenizer, max_batch_size=4)  # refills, several chunks
    reasons = set()
    for params in cases(engine, tokenizer):
        out = engine.generate(ALL_PROMPTS, params)
        for prompt, completions in zip(ALL_PROMPTS, out, strict=True):
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
            assert len(completions) == params.n
            for c in completions:
                assert len(c.entropies) == len(c.token_ids) == len(c.logprobs)
                ref = forward_entropies(policy, prompt_ids, c.token_ids)
                torch.testing.assert_close(torch.tensor(c.entropies), ref, atol=1e-4, rtol=0)
                assert all(0.0 <= h <= math.log(len(tokenizer)) + 1e-4 for h in c.entropies)
                ended_on_eos = c.token_ids[-1] in engine.eos_ids and c.finish_reason == "stop"
                reasons.add("eos" if ended_on_eos else c.finish_reason)
    assert "stop" in reasons or "eos" in reasons  # the cases did exercise an early end
    if eos_lover:
        assert "eos" in reasons


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_entropies_leave_the_sampling_as_it_was(kind, model, tokenizer):
    """Relations that pin the sampling path: the same seed gives the same completions
    (entropies too), another seed other tokens; the log-probs stay the raw policy's; and the
    call moves torch's global stream only when it samples from it (seed None), exactly as a
    second identical call does."""
    engine = make_engine(kind, model, tokenizer)
    params = SamplingParams(n=2, max_tokens=16, stop=[], seed=7)
    before = torch.get_rng_state()
    first = engine.generate(ALL_PROMPTS, params)
    assert torch.equal(torch.get_rng_state(), before)  # a seeded call draws from its own stream
    assert engine.generate(ALL_PROMPTS, params) == first
    assert engine.generate(ALL_PROMPTS, params.replace(seed=8)) != first
    for prompt, completions in zip(ALL_PROMPTS, first, strict=True):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            ref = reference_logprobs(model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)
    unseeded = params.replace(seed=None)
    torch.manual_seed(3)
    a = engine.generate(ALL_PROMPTS, unseeded)
    after_a = torch.rand(4)
    torch.manual_seed(3)
    b = engine.generate(ALL_PROMPTS, unseeded)
    assert a == b and torch.equal(torch.rand(4), after_a)
