"""The evaluation's ``entropy`` from the engine's per-token entropies (no second forward).

When every completion carries ``entropies`` (hf, static engines), ``evaluate_policy`` sums
them over each response's tokens (``generations.response_token_count``: the sampled ids that
make up the text, so a trailing EOS and the tokens past a dropped stop string are left out,
as the second forward's re-tokenized text leaves them out) instead of running the forward.
Checked against the forward itself: on a model whose samples re-tokenize to their own ids the
two values must agree to float rounding; on a random model (whose samples do not) the engine's
value must equal the forward over the sampled ids.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_model import build_model, build_tokenizer, make_canonical_sampler

from reasoning_core import get_response_log_probs
from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import Completion, SamplingParams
from reasoning_core.runtime.evaluation import generations
from reasoning_core.runtime.evaluation.loop import evaluate_policy


class WithoutEntropies:
    """The wrapped engine with ``entropies`` dropped from its completions (as vLLM returns
    them): ``evaluate_policy`` then runs the second forward on the very same samples (the
    path the engine's entropies replaced)."""

    def __init__(self, engine):
        self.engine = engine

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        return [[dataclasses.replace(c, entropies=None) for c in group] for group in out]

    def sync_weights(self, model):
        self.engine.sync_weights(model)


class Recording:
    """The wrapped engine, keeping every completion it returned (in order)."""

    def __init__(self, engine):
        self.engine = engine
        self.completions: list[Completion] = []

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        self.completions.extend(c for group in out for c in group)
        return out

    def sync_weights(self, model):
        self.engine.sync_weights(model)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def examples(task):
    return task.load("test", limit=6)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_response_tokens_are_the_ones_that_make_up_the_text(tokenizer):
    eos = tokenizer.eos_token_id
    body = ids(tokenizer, " x + 3")
    assert len(body) == 3

    def count(token_ids, text):
        c = Completion(text, token_ids, [0.0] * len(token_ids), "stop", [1.0] * len(token_ids))
        return generations.response_token_count(tokenizer, c)

    assert count(body + [eos], " x + 3") == 3  # EOS is not part of the text
    assert count(body, " x + 3") == 3  # length or a kept stop string ending the last token
    assert count(body, " x +") == 2  # a stop string " 3" left out of the text
    assert count(ids(tokenizer, " 12"), " 1") == 1  # a kept stop string " 1" inside a token
    assert count([eos], "") == 0
    two_bytes = ids(tokenizer, "é")  # one character, two byte tokens: both make it up
    assert len(two_bytes) == 2 and count(two_bytes, "é") == 2

    with_ent = Completion(" x + 3", body + [eos], [0.0] * 4, "stop", [0.5, 1.0, 2.0, 9.0])
    assert generations.completion_entropy_sums(tokenizer, [with_ent]) == ([3.5], [3])
    without = dataclasses.replace(with_ent, entropies=None)
    assert generations.completion_entropy_sums(tokenizer, [with_ent, without]) is None


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_engine_entropy_equals_the_second_forward_on_canonical_samples(
    kind, tokenizer, task, examples
):
    """A model that samples only tokens its text re-tokenizes to (``make_canonical_sampler``):
    both paths score the same tokens, so they differ by float rounding only (KV-cache decode
    vs one full pass: at most 5e-8 measured on these samples); EOS ends some responses and a stop
    string others, kept or dropped."""
    model = make_canonical_sampler(build_model(len(tokenizer)), tokenizer)
    engine = make_engine(kind, model, tokenizer)
    for keep in (True, False):
        params = SamplingParams(
            n=3, max_tokens=24, min_tokens=2, stop=[" ="], include_stop_str_in_output=keep, seed=0
        )
        recording = Recording(engine)
        new, records = evaluate_policy(
            recording, examples, task, "r1_zero", params, model=model, tokenizer=tokenizer
        )
        old, old_records = evaluate_policy(
            WithoutEntropies(engine), examples, task, "r1_zero", params, model=model,
            tokenizer=tokenizer,
        )  # fmt: skip
        assert old_records == records  # the same samples
        eos_ended = [c for c in recording.completions if c.token_ids[-1] == tokenizer.eos_token_id]
        stopped = [c for c in recording.completions if " =" in tokenizer.decode(c.token_ids)]
        assert eos_ended and stopped
        for c in recording.completions:  # the premise: the text re-tokenizes to the ids
            k = generations.response_token_count(tokenizer, c)
            assert ids(tokenizer, c.text) == c.token_ids[:k]
        assert new["entropy"] == pytest.approx(old["entropy"], abs=1e-5)
        assert new["time/entropy"] >= 0.0


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_engine_entropy_is_the_forward_over_the_sampled_ids(kind, tokenizer, task, examples):
    """On a random model the sampled ids are mostly not the text's tokenization (byte pieces),
    so the value is the forward's over the *sampled* response ids, token-weighted. (The old
    value, over the re-tokenized texts, is 0.044 to 0.051 nats higher on these samples.)"""
    model = build_model(len(tokenizer))
    recording = Recording(make_engine(kind, model, tokenizer))
    params = SamplingParams(n=2, max_tokens=20, stop=["</answer>"], seed=1)
    summary, records = evaluate_policy(
        recording, examples, task, "r1_zero", params, model=model, tokenizer=tokenizer
    )
    total, count = 0.0, 0
    with torch.no_grad():
        for record, c in zip(records, recording.completions, strict=True):
            k = generations.response_token_count(tokenizer, c)
            seq = torch.tensor([ids(tokenizer, record["prompt"]) + c.token_ids[:k]])
            out = get_response_log_probs(model, seq[:, :-1], seq[:, 1:], return_token_entropy=True)
            total += float(out["token_entropy"][0, -k:].sum()) if k else 0.0
            count += k
    assert summary["entropy"] == pytest.approx(total / count, abs=1e-5)
