"""The ``entropy`` of every eval line: the policy's mean token entropy over the eval responses.

``entropy`` = sum over all response tokens t of all responses of H_t, over their count
(token-weighted), with H_t = -sum_v p_v log p_v of the policy's next-token distribution at t.
Each check recomputes it independently: one plain forward per (prompt, response) of a tiny
Qwen2 (tests/tiny_model.py), a float64 softmax over the whole vocabulary, H summed by hand.
The runs that sample with the hf engine take their value from the engine's per-token
entropies; their model samples only tokens its text re-tokenizes to (``save_canonical_model``),
so the hand computation over the re-tokenized responses scores the same tokens.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny_model import build_model, build_tokenizer, save_canonical_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from reasoning_core.runtime.engines.rollout import Completion, SamplingParams
from reasoning_core.runtime.evaluation import evaluate, generations
from reasoning_core.runtime.evaluation.loop import evaluate_policy
from reasoning_core.runtime.run.metrics import read_metrics
from reasoning_core.runtime.trainers import sft
from reasoning_core.runtime.training.batching import MicroBatchSize


@torch.no_grad()
def entropy_by_hand(model, tokenizer, prompts, responses) -> tuple[float, float]:
    """(token-weighted mean, mean of per-response means) of the full-softmax entropy."""
    total, count, per_response = 0.0, 0, []
    for prompt, response in zip(prompts, responses, strict=True):
        p = tokenizer.encode(prompt, add_special_tokens=False)
        r = tokenizer.encode(response, add_special_tokens=False)
        logits = model(torch.tensor([p + r])).logits[0, len(p) - 1 : len(p) + len(r) - 1]
        probs = logits.double().softmax(-1)
        h = -(probs * probs.log()).sum(-1)  # no probability underflows to 0 in float64 here
        total += float(h.sum())
        count += len(r)
        per_response.append(float(h.mean()))
    return total / count, sum(per_response) / len(per_response)


def pairs_of(records) -> tuple[list[str], list[str]]:
    return [r["prompt"] for r in records], [r["response"] for r in records]


class Scripted:
    """Answers the k-th prompt with ``texts[k % len(texts)]``; holds no model."""

    def __init__(self, texts):
        self.texts = texts
        self.answered = 0

    def generate(self, prompts, params):
        out = []
        for _ in prompts:
            text = self.texts[self.answered % len(self.texts)]
            self.answered += 1
            out.append([Completion(text, [1] * max(1, len(text) // 3), [0.0], "stop")])
        return out

    def sync_weights(self, model):
        pass


# Different lengths, so the token-weighted mean and the mean of per-response means differ.
TEXTS = [
    " 2 + 3 = 5 </think> <answer> 5 </answer>",
    " x",
    " The answer is \\boxed{7}. Let x = 3, then x + 4 = 7. </think> <answer>7</answer>",
]


@pytest.fixture(scope="module")
def examples(task):
    return task.load("test", limit=5)


def test_eval_entropy_is_the_token_weighted_full_softmax_entropy(task, examples):
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer))
    params = SamplingParams(max_tokens=64)
    summary, records = evaluate_policy(
        Scripted(TEXTS), examples, task, "r1_zero", params, model=model, tokenizer=tokenizer
    )
    weighted, per_response = entropy_by_hand(model, tokenizer, *pairs_of(records))
    assert abs(weighted - per_response) > 1e-3  # the two means are told apart
    assert summary["entropy"] == pytest.approx(weighted, abs=1e-5)
    assert 0.0 <= summary["entropy"] <= math.log(len(tokenizer))
    assert summary["time/entropy"] >= 0.0
    # Micro batches change only the grouping of the forwards, not the value.
    for size in (1, 2, 5):
        got = evaluate.records_entropy(model, tokenizer, records, MicroBatchSize(size))
        assert got == pytest.approx(summary["entropy"], abs=1e-6)
    # Without a model there is no entropy, explicitly.
    summary, _ = evaluate_policy(Scripted(TEXTS), examples, task, "r1_zero", params)
    assert summary["entropy"] is None


def test_eval_entropy_draws_no_random_numbers_and_keeps_the_mode():
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer)).train()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    value = generations.mean_response_entropy(model, tokenizer, ["a b", "1 +"], TEXTS[:2])
    assert torch.equal(torch.get_rng_state(), before)
    assert model.training  # evaluated in eval mode, the caller's mode restored
    assert 0.0 < value <= math.log(len(tokenizer))


def test_rrl_eval_lines_and_summary_carry_entropy(tmp_path, monkeypatch, examples):
    """The hf engine (the model it samples with) and a vLLM-like engine that holds no Hugging
    Face module (the model is loaded again from model_path) give the hand-computed entropy on
    the eval line and in summary.json; ``entropy: false`` writes null."""
    model_dir = save_canonical_model(tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = [
        "--set",
        f"model_path={model_dir}",
        "--set",
        "task=arithmetic",
        "--set",
        "eval_examples=5",
    ]
    base += ["--set", "eval_max_tokens=16", "--set", "device=cpu"]

    def outputs(out):
        (line,) = read_metrics(out)
        summary = json.loads((out / "summary.json").read_text())["metrics"]
        gens = (out / "generations" / "step_000000.jsonl").read_text().splitlines()
        records = [json.loads(x) for x in gens]
        return line, summary, records

    assert evaluate.main([*base, "--set", "engine=hf", "--out", str(tmp_path / "hf")]) == 0
    line, summary, records = outputs(tmp_path / "hf")
    weighted, _ = entropy_by_hand(model, tokenizer, *pairs_of(records))
    assert line["entropy"] == pytest.approx(weighted, abs=1e-5)
    assert summary["entropy"] == line["entropy"]
    assert "time/entropy" in line
    assert json.loads((tmp_path / "hf" / "done.json").read_text())["engine"] == "hf"

    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: Scripted(TEXTS))
    assert evaluate.main([*base, "--out", str(tmp_path / "vllm_like")]) == 0
    line, summary, records = outputs(tmp_path / "vllm_like")
    weighted, _ = entropy_by_hand(model, tokenizer, *pairs_of(records))
    assert line["entropy"] == pytest.approx(weighted, abs=1e-5)
    assert summary["entropy"] == line["entropy"]

    off = [*base, "--set", "entropy=false", "--out", str(tmp_path / "off")]
    assert evaluate.main(off) == 0
    line, summary, _ = outputs(tmp_path / "off")
    assert line["entropy"] is None and summary["entropy"] is None


def test_in_training_eval_lines_carry_entropy(tmp_path):
    """Every eval line of a trainer has ``entropy``; at step 0 the policy is the base model,
    so the value is the hand computation over that evaluation's generations."""
    model_dir = save_canonical_model(tmp_path / "model")
    cfg = {
        "model_path": str(model_dir),
        "task": "arithmetic",
        "eval_examples": 6,
        "eval_max_tokens": 16,
        "eval_every": 2,
        "progress": False,
        "save_every": 0,
        "save_checkpoint": False,
        "sft_pool_size": 8,
        "epochs": 1,
        "batch_size": 4,
        "gradient_accumulation_steps": 2,
        "lr": 1e-3,
    }
    argv = [a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    out = tmp_path / "run"
    assert sft.main([*argv, "--out", str(out)]) == 0
    evals = [r for r in read_metrics(out) if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2]
    vocab = math.log(len(AutoTokenizer.from_pretrained(model_dir)))
    for r in evals:
        assert 0.0 <= r["entropy"] <= vocab and r["time/entropy"] <= r["time/eval"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    gens = (out / "generations" / "step_000000.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in gens]
    weighted, _ = entropy_by_hand(model, tokenizer, *pairs_of(records))
    assert evals[0]["entropy"] == pytest.approx(weighted, abs=1e-5)
