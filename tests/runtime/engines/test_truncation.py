"""Finish reasons per engine and the truncation share built from them: a response that the
engine stops at ``max_tokens`` without its stop string or EOS is ``"length"``, every other one
``"stop"``, so ``truncated_share`` counts exactly the responses cut off at the token limit."""

from __future__ import annotations

import os

import pytest
from tiny_model import LONG_PROMPT, PROMPTS, save_tiny_model

from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import SamplingParams
from reasoning_core.runtime.training.rollouts import truncated_share

ALL_PROMPTS = PROMPTS + [LONG_PROMPT]
GREEDY = SamplingParams(temperature=0.0, max_tokens=40, stop=[])


def make(kind: str, model, tokenizer, tmp_path_factory):
    """The engine and a Hugging Face engine over the same weights (vLLM loads a saved folder)."""
    if kind == "vllm":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        folder = str(save_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))
        engine = make_engine(
            "vllm", folder, dtype="float32", max_model_len=512, kv_cache_memory_bytes=32 << 20
        )
        return engine, make_engine("hf", folder)
    return make_engine(kind, model, tokenizer), make_engine("hf", model, tokenizer)


@pytest.mark.parametrize("kind", ["hf", "static", pytest.param("vllm", marks=pytest.mark.vllm)])
def test_finish_reasons_say_which_responses_hit_the_token_limit(
    kind, model, tokenizer, tmp_path_factory
):
    """Stop strings end the first three prompts' greedy responses early; the last prompt's has
    none of them and runs to ``max_tokens``: one of four truncated, 3 of 4 when the limit is
    so low that no stop string is reached."""
    engine, hf = make(kind, model, tokenizer, tmp_path_factory)
    full = hf.generate(ALL_PROMPTS, GREEDY)
    last = full[-1][0].text
    stops = [
        next(ch for ch in c[0].text if ch.isascii() and ch.isprintable() and ch not in last)
        for c in full[:-1]
    ]
    try:
        out = engine.generate(ALL_PROMPTS, GREEDY.replace(stop=stops))
        reasons = [c.finish_reason for cs in out for c in cs]
        assert reasons == ["stop", "stop", "stop", "length"]
        assert len(out[-1][0].token_ids) == GREEDY.max_tokens
        assert truncated_share(reasons) == 0.25
        # min_tokens = max_tokens forbids EOS and stop strings: every response is cut off
        capped = engine.generate(ALL_PROMPTS, GREEDY.replace(max_tokens=3, min_tokens=3))
        assert truncated_share([c.finish_reason for cs in capped for c in cs]) == 1.0
    finally:
        if hasattr(engine, "close"):
            engine.close()


def test_truncated_share_of_nothing_is_zero():
    assert truncated_share([]) == 0.0
    assert truncated_share(["stop", "length", "length", "stop"]) == 0.5
