"""The static-cache engine on CPU (fp32, no graphs) against the Hugging Face engine.

Greedy decoding has clear winners on these tiny models (see tiny_model.build_model), so the two
engines' token ids must agree exactly; log-probs agree to float32 rounding (the attention and
padding differ: right-aligned rows here, left padding there).
"""

from __future__ import annotations

import copy
import json

import pytest
import sampling_table
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from project_root import load_script
from tiny_model import (
    LONG_PROMPT,
    PROMPTS,
    ascii_stop_from,
    build_model,
    make_eos_lover,
    reference_logprobs,
)

from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import Completion, RolloutEngine, SamplingParams
from reasoning_core.runtime.engines.static.engine import StaticEngine
from reasoning_core.runtime.engines.static.kernels import cache_bytes, row_buckets, sample_on_device

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, stop=[])
ALL_PROMPTS = PROMPTS + [LONG_PROMPT]


@pytest.fixture(scope="module")
def engine(model, tokenizer):
    return make_engine("static", model, tokenizer)


@pytest.fixture(scope="module")
def hf(model, tokenizer):
    return make_engine("hf", model, tokenizer)


def assert_same(ours: list[list[Completion]], theirs: list[list[Completion]]) -> None:
    """Same ids, text and finish reason; log-probs equal to float32 rounding."""
    assert len(ours) == len(theirs)
    for a_group, b_group in zip(ours, theirs, strict=True):
        assert len(a_group) == len(b_group)
        for a, b in zip(a_group, b_group, strict=True):
            assert (a.token_ids, a.text, a.finish_reason) == (b.token_ids, b.text, b.finish_reason)
            torch.testing.assert_close(
                torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
            )


def test_engine_satisfies_protocol(engine):
    assert isinstance(engine, RolloutEngine)
    assert isinstance(engine, StaticEngine)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"max_batch_size": 2},  # rows refilled as others finish
        {"span_step": 16},  # attention over more slots than used, masked
        {"prefill_tokens": 8},  # one prompt per prefill forward
    ],
)
def test_greedy_equals_hf_engine(model, tokenizer, hf, options):
    ours = make_engine("static", model, tokenizer, **options)
    params = GREEDY.replace(n=2)
    assert_same(ours.generate(ALL_PROMPTS, params), hf.generate(ALL_PROMPTS, params))
    if "max_batch_size" in options:
        assert ours.stats["refills"] > 0


@pytest.mark.parametrize("row_step", [None, 1, 8])
def test_finished_rows_are_compacted_and_outputs_unchanged(model, tokenizer, hf, row_step):
    """A stop string ends the rows at different steps; once no prompt waits, the live rows move
    into smaller row buckets (keys/values and state copied), which must not change them: at
    every row count (``row_step=1``), multiples of 8, and powers of two only (the default)."""
    full = hf.generate(ALL_PROMPTS, GREEDY.replace(max_tokens=40))
    last = full[-1][0].text
    # for each other prompt, a character of its greedy text that the last prompt's lacks: those
    # rows stop early, the last one runs to max_tokens alone
    stops = [
        next(ch for ch in c[0].text if ch.isascii() and ch.isprintable() and ch not in last)
        for c in full[:-1]
    ]
    params = GREEDY.replace(n=2, max_tokens=40, stop=stops)
    ours = make_engine("static", model, tokenizer, row_step=row_step)
    theirs = hf.generate(ALL_PROMPTS, params)
    assert [c[0].finish_reason for c in theirs] == ["stop", "stop", "stop", "length"]
    assert_same(ours.generate(ALL_PROMPTS, params), theirs)
    assert ours.stats["compactions"] > 0


def test_logprobs_equal_policy_logprobs(engine, model, tokenizer):
    # temperature/top_p change the sampling, not the returned (raw policy) log-probs
    params = SamplingParams(n=3, max_tokens=20, temperature=0.7, top_p=0.9, stop=[], seed=1)
    out = engine.generate(ALL_PROMPTS, params)
    for prompt, completions in zip(ALL_PROMPTS, out, strict=True):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            ref = reference_logprobs(model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("row_step", [None, 1])
def test_sampled_rows_with_refills_and_compaction_keep_policy_logprobs(model, tokenizer, row_step):
    """Rows stopped by stop strings at random steps are refilled, then compacted; a row whose
    cache was mixed up with another's would show other log-probs than the policy's."""
    engine = make_engine("static", model, tokenizer, max_batch_size=8, row_step=row_step)
    params = SamplingParams(n=4, max_tokens=30, stop=["e", "5"], seed=3)
    out = engine.generate(ALL_PROMPTS, params)
    assert engine.stats["refills"] > 0 and engine.stats["compactions"] > 0
    finish = {c.finish_reason for cs in out for c in cs}
    assert finish == {"stop", "length"} or finish == {"stop"}
    for prompt, completions in zip(ALL_PROMPTS, out, strict=True):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            ref = reference_logprobs(model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)
            body = c.text[:-1] if c.finish_reason == "stop" and c.text[-1:] in "e5" else c.text
            assert not any(s in body for s in params.stop)


def test_shapes_n_and_max_tokens(engine):
    out = engine.generate(PROMPTS, SamplingParams(n=4, max_tokens=16, stop=[], seed=0))
    assert len(out) == len(PROMPTS)
    for completions in out:
        assert len(completions) == 4
        for c in completions:
            assert 1 <= len(c.token_ids) <= 16
            assert len(c.logprobs) == len(c.token_ids)
            assert c.finish_reason in {"stop", "length"}
            assert c.finish_reason == "stop" or len(c.token_ids) == 16
            assert all(lp <= 0.0 for lp in c.logprobs)
        assert len({tuple(c.token_ids) for c in completions}) > 1
    one = engine.generate(PROMPTS, GREEDY.replace(max_tokens=1))
    assert all(len(c[0].token_ids) == 1 for c in one)


def test_seed_reproducible(engine, model, tokenizer):
    params = SamplingParams(n=2, max_tokens=12, stop=[], seed=7)
    first = engine.generate(PROMPTS, params)
    assert engine.generate(PROMPTS, params) == first
    # a fresh engine (new cache) gives the same completions too
    assert make_engine("static", model, tokenizer).generate(PROMPTS, params) == first
    assert engine.generate(PROMPTS, params.replace(seed=8)) != first


def test_identical_prompts_in_one_call_are_sampled_independently(engine):
    out = engine.generate(PROMPTS[:1] * 2, SamplingParams(max_tokens=16, stop=[], seed=5))
    assert out[0][0].token_ids != out[1][0].token_ids


@pytest.mark.parametrize("keep", [True, False])
def test_stop_strings_like_hf_engine(engine, hf, keep):
    full = hf.generate(PROMPTS, GREEDY)
    for i, prompt in enumerate(PROMPTS):
        stop = ascii_stop_from(full[i][0].text)
        params = GREEDY.replace(stop=[stop, "</answer>"], include_stop_str_in_output=keep)
        theirs = hf.generate([prompt], params)
        assert theirs[0][0].finish_reason == "stop"
        assert_same(engine.generate([prompt], params), theirs)


def test_min_tokens_like_hf_engine(model, tokenizer):
    eos_model = make_eos_lover(model)
    ours, theirs = (
        make_engine("static", eos_model, tokenizer),
        make_engine("hf", eos_model, tokenizer),
    )
    eos = tokenizer.eos_token_id
    plain = ours.generate(PROMPTS, SamplingParams(max_tokens=10, stop=[], seed=0))
    assert all(c[0].token_ids == [eos] and c[0].finish_reason == "stop" for c in plain)
    greedy = GREEDY.replace(max_tokens=12, min_tokens=6)
    assert_same(ours.generate(PROMPTS, greedy), theirs.generate(PROMPTS, greedy))
    params = SamplingParams(n=3, max_tokens=12, min_tokens=6, stop=[], seed=0)
    for prompt, completions in zip(PROMPTS, ours.generate(PROMPTS, params), strict=True):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            assert len(c.token_ids) >= 6 and eos not in c.token_ids[:6]
            assert c.finish_reason == "length" or c.token_ids[-1] == eos
            ref = reference_logprobs(eos_model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_min_tokens_ignores_early_stop_strings_like_hf_engine(engine, hf):
    full = hf.generate(PROMPTS[:1], GREEDY)[0][0]
    stop = ascii_stop_from(full.text, start=0)
    n_first = next(
        k
        for k in range(1, len(full.token_ids) + 1)
        if stop in hf.tokenizer.decode(full.token_ids[:k])
    )
    for keep in (True, False):
        params = GREEDY.replace(stop=[stop], min_tokens=n_first, include_stop_str_in_output=keep)
        ours = engine.generate(PROMPTS[:1], params)
        assert len(ours[0][0].token_ids) > n_first
        assert_same(ours, hf.generate(PROMPTS[:1], params))


def test_generation_config_eos_ids_end_a_row(model, tokenizer, hf):
    full = hf.generate(PROMPTS[:1], GREEDY)[0][0]
    chat = copy.deepcopy(model)
    chat.generation_config.eos_token_id = [tokenizer.eos_token_id, full.token_ids[5]]
    ours, theirs = make_engine("static", chat, tokenizer), make_engine("hf", chat, tokenizer)
    out = ours.generate(PROMPTS[:1], GREEDY)
    assert out[0][0].token_ids == full.token_ids[: full.token_ids.index(full.token_ids[5]) + 1]
    assert out[0][0].finish_reason == "stop"
    assert_same(out, theirs.generate(PROMPTS[:1], GREEDY))


def test_weights_changed_in_place_are_seen_without_restart(model, tokenizer):
    """The engine runs the live module: an in-place update (as an optimizer step makes) and a
    parameter replaced by a new tensor both change the next call's output, no sync needed."""
    policy = copy.deepcopy(model)
    engine = make_engine("static", policy, tokenizer)
    before = engine.generate(ALL_PROMPTS, GREEDY)
    with torch.no_grad():
        for p in policy.model.layers[0].parameters():
            p.add_(torch.randn_like(p) * 0.5)
        policy.lm_head.weight.mul_(-1.0)
    after = engine.generate(ALL_PROMPTS, GREEDY)
    assert after != before
    assert_same(after, make_engine("hf", policy, tokenizer).generate(ALL_PROMPTS, GREEDY))
    policy.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    replaced = engine.generate(ALL_PROMPTS, GREEDY)
    assert replaced != after
    assert_same(replaced, make_engine("hf", policy, tokenizer).generate(ALL_PROMPTS, GREEDY))


def test_sync_weights_copies_state(model, tokenizer, hf):
    engine = make_engine("static", build_model(len(tokenizer), seed=1), tokenizer)
    engine.sync_weights(model)
    assert_same(engine.generate(PROMPTS, GREEDY), hf.generate(PROMPTS, GREEDY))


def _qwen3(vocab):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        tie_word_embeddings=True, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return Qwen3ForCausalLM(config)


def _llama(vocab):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
        eos_token_id=0, pad_token_id=0, attention_bias=True,
    )  # fmt: skip
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("build", [_qwen3, _llama])
def test_other_architectures_equal_hf_engine(tokenizer, build):
    torch.manual_seed(0)
    other = build(len(tokenizer)).eval()
    with torch.no_grad():  # clear greedy winners, as tiny_model.build_model
        other.lm_head.weight.normal_(0.0, 0.3)
    params = GREEDY.replace(n=2, max_tokens=16)
    ours = make_engine("static", other, tokenizer).generate(ALL_PROMPTS, params)
    assert_same(ours, make_engine("hf", other, tokenizer).generate(ALL_PROMPTS, params))


def test_unsupported_model_and_settings_are_named(tokenizer, model):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="model_type.*'gpt2'.*engine 'hf'"):
        make_engine("static", gpt2, tokenizer)
    with pytest.raises(ValueError, match="cuda_graphs"):
        make_engine("static", model, tokenizer, cuda_graphs=True)
    with pytest.raises(ValueError, match="max_batch_size"):
        make_engine("static", model, tokenizer, max_batch_size=0)
    with pytest.raises(ValueError, match="row_step"):
        make_engine("static", model, tokenizer, row_step=0)


@settings(max_examples=8, deadline=None)
@given(
    words=st.lists(
        st.lists(st.sampled_from(["x", "=", " 3", " +", " 12", "<think>", " the", "\\boxed{"])),
        min_size=1,
        max_size=5,
    ),
    n=st.integers(1, 3),
    max_batch_size=st.sampled_from([1, 3, 4, 64]),
    max_tokens=st.integers(1, 12),
)
def test_property_greedy_equals_hf_engine_for_any_lengths_and_batches(
    engine, hf, model, tokenizer, words, n, max_batch_size, max_tokens
):
    """Any prompt lengths (1 to ~30 tokens), batch sizes, n and max_tokens: greedy outputs are
    the HF engine's."""
    prompts = ["User:" + "".join(w) for w in words]
    params = GREEDY.replace(n=n, max_tokens=max_tokens)
    ours = make_engine("static", model, tokenizer, max_batch_size=max_batch_size)
    assert_same(ours.generate(prompts, params), hf.generate(prompts, params))


@sampling_table.temperature_and_top_p
def test_device_sampling_follows_temperature_and_top_p(temperature, top_p, expected):
    logits = sampling_table.logits()
    params = SamplingParams(temperature=temperature, top_p=top_p, stop=[])
    count = torch.zeros(len(logits), dtype=torch.long)
    no_eos = torch.zeros(len(sampling_table.PROBS), dtype=torch.bool)
    gen = torch.Generator().manual_seed(0)
    tokens, logp, _, drawn = sample_on_device(logits, count, no_eos, params, gen)
    # the policy's log-probs, at temperature 1 and before top_p
    torch.testing.assert_close(logp, torch.tensor(sampling_table.PROBS).log()[tokens])
    sampling_table.assert_follows(tokens, drawn, expected)


@pytest.mark.parametrize(
    ("u", "expected"),
    [(0.0, [1, 0]), (0.5, [3, 2]), (1.0, [3, 2])],  # 1.0: past the largest U a draw can give
    ids=["lowest", "middle", "top"],
)
def test_the_draw_never_picks_a_zero_weight(monkeypatch, u, expected):
    """The inverse of the cumulative sum at U * total: zero weights (first, between, last)
    are skipped at either end of [0, 1], and frequencies follow the weights."""
    from reasoning_core.runtime.engines.static import kernels

    weights = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0], [0.5, 0.0, 0.5, 0.0, 0.0]])
    real = torch.rand
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.full(shape, u, dtype=kw["dtype"]))
    assert kernels._inverse_cdf(weights, None).tolist() == expected
    monkeypatch.setattr(torch, "rand", real)
    draws = kernels._inverse_cdf(
        weights[:1].expand(20000, -1).contiguous(), torch.Generator().manual_seed(0)
    )
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    torch.testing.assert_close(freq, torch.tensor([0, 0.25, 0, 0.75, 0]), atol=0.015, rtol=0)


def test_device_sampling_masks_eos_per_row_below_min_tokens():
    logits = torch.tensor([[5.0, 0.0, 0.0]]).expand(4, -1).contiguous()  # EOS (id 0) dominates
    eos = torch.tensor([True, False, False])
    count = torch.tensor([0, 2, 3, 7])
    params = SamplingParams(temperature=0.0, max_tokens=8, min_tokens=3, stop=[])
    tokens, logp, entropy, drawn = sample_on_device(logits, count, eos, params, None)
    assert tokens[:2].tolist() != [0, 0] and 0 not in tokens[:2].tolist()
    assert tokens[2:].tolist() == [0, 0]
    torch.testing.assert_close(
        logp, torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]
    )
    # every row's entropy is the raw distribution's, whether EOS was masked for it or not
    p = torch.tensor([5.0, 0.0, 0.0], dtype=torch.float64).softmax(-1)
    expected = float(-(p * p.log()).sum())
    torch.testing.assert_close(entropy, torch.full((4,), expected, dtype=torch.float32))
    assert drawn.tolist() == [0.0] * 4  # greedy: a point mass, with or without EOS masked


def test_device_sampling_log_prob_renormalizes_without_eos_below_min_tokens():
    """Sampled at temperature 1 with EOS masked, a token's sampling log-prob is its raw one
    minus log(1 - p(EOS)); from min_tokens on the two are equal."""
    logits = torch.tensor([[1.0, 0.5, -0.5]]).expand(2, -1).contiguous()
    eos = torch.tensor([True, False, False])
    params = SamplingParams(temperature=1.0, max_tokens=8, min_tokens=3, stop=[])
    gen = torch.Generator().manual_seed(0)
    tokens, logp, _, drawn = sample_on_device(logits, torch.tensor([0, 3]), eos, params, gen)
    p_eos = torch.softmax(logits[0], -1)[0]
    torch.testing.assert_close(drawn[0], logp[0] - torch.log1p(-p_eos))
    torch.testing.assert_close(drawn[1], logp[1])


def test_row_buckets_and_cache_size(model):
    assert row_buckets(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert row_buckets(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    # eager steps: every multiple of the step too (none at or above the capacity)
    assert row_buckets(100, 24) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 72, 96, 100]
    assert row_buckets(8, 8) == row_buckets(8) == [1, 2, 4, 8]
    from transformers import Qwen2Config

    config = Qwen2Config(
        hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    )
    # 2 x 28 layers x 256 rows x 2 heads x 1,152 slots x 128 dims x 2 bytes
    assert cache_bytes(config, 256, 128 + 1024) == 2 * 28 * 256 * 2 * 1152 * 128 * 2


@pytest.mark.slow
def test_compiled_decode_step_gives_the_same_greedy_outputs(model, tokenizer, hf):
    """``compile=True`` traces the decode step with fullgraph=True (no graph break, as CUDA
    graph capture needs); on this CPU inductor takes ~95 s for the first shape."""
    ours = make_engine("static", model, tokenizer, compile=True, span_step=64)
    assert_same(ours.generate(ALL_PROMPTS, GREEDY), hf.generate(ALL_PROMPTS, GREEDY))


@pytest.mark.gpu
@pytest.mark.parametrize("compile", [False, True])
def test_cuda_graphs_give_the_hf_engine_outputs(tokenizer, compile):
    """On a GPU, fp32: captured decode steps (row buckets, span buckets, refills) give the HF
    engine's greedy outputs, and sampled log-probs equal the policy's."""
    cpu_model = build_model(len(tokenizer))
    cuda_model = copy.deepcopy(cpu_model).cuda()
    ours = make_engine("static", cuda_model, tokenizer, max_batch_size=4, compile=compile)
    assert ours.cuda_graphs
    params = GREEDY.replace(n=3, max_tokens=40)
    theirs = make_engine("hf", cuda_model, tokenizer)
    assert_same(ours.generate(ALL_PROMPTS, params), theirs.generate(ALL_PROMPTS, params))
    assert ours.stats["graphs"] > 0 and ours.stats["refills"] > 0
    sampled = SamplingParams(n=2, max_tokens=30, stop=["e"], seed=0, top_p=0.9)
    for prompt, completions in zip(ALL_PROMPTS, ours.generate(ALL_PROMPTS, sampled), strict=True):
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in completions:
            ref = reference_logprobs(cpu_model, prompt_ids, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_rollout_gpu_benchmark_runs_tiny(tmp_path):
    """benchmarks/rollout_gpu.py (the H200 rollout measurement) must not rot: --tiny runs
    the same code on CPU and writes the JSON and the log, with the static/HF ratio."""
    bench = load_script("benchmarks/rollout_gpu.py")
    assert bench.main(["--tiny", "--out", str(tmp_path)]) == 0
    (report_path,) = tmp_path.glob("rollout_gpu_*.json")
    report = json.loads(report_path.read_text())
    for rows in (4, 8):
        static, hf = report["runs"][f"static_eager/rows{rows}"], report["runs"][f"hf/rows{rows}"]
        assert static["new_tokens_total"] == rows * 32 == hf["new_tokens_total"]
        assert static["ttft_seconds"] > 0 and static["logprob_max_abs_error"] < 1e-4
        ratio = static["new_tokens_per_s"] / hf["new_tokens_per_s"]
        assert report["summary"][f"ratio_static_eager_over_hf/rows{rows}"] == pytest.approx(ratio)
    check = report["runs"]["correctness_eager"]
    assert check["passed"] and check["greedy_rows_equal_hf"] == check["rows"] == 15
    assert check["refills"] > 0
    log = next(tmp_path.glob("rollout_gpu_*.log")).read_text()
    assert "static (eager) / hf engine" in log
