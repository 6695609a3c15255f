"""How far each rollout engine's log-probs of its sampled tokens are from a full forward of the
policy (``get_response_log_probs``): in sync, and stale by one AdamW step that was not synced.

For each engine (hf, static, vLLM in float32 and in bfloat16 against the float32 policy) the
engine gets its own copy of the policy, samples ``--prompts`` x ``--n`` responses (temperature
1, top-p 1, so the raw and the sampling log-probs coincide), and :func:`logprob_mismatch`
compares its ``logprobs`` with the policy's over the response tokens; :func:`tis_weights` gives
the truncated importance weights (cap 2) the same tokens would get. Then, per learning rate,
the policy takes one AdamW step on a policy-gradient loss of those responses (random
advantages) and the engine, not synced, samples again: the stale rows. A sync brings the engine
back, and a synced row checks that it did. Last, ``--drift-steps`` steps at the first learning
rate with no sync at all (a broken sync): the engine falls further behind at every step.

The model is the engine tests' random tiny Qwen2 (tests/helpers/tiny_model.py: 2 layers,
hidden 64, 320 tokens) unless ``--model`` names a folder; one torch thread.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/engine_logprob_mismatch.py
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402

from reasoning_core import (  # noqa: E402
    LossInputs,
    LossSettings,
    get_response_log_probs,
    grpo_loss,
    logprob_mismatch,
    tis_weights,
)
from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402

PROMPTS = [
    "User: what is 12 * 4? Assistant: <think>",
    "x = 3",
    "The answer is \\boxed{",
    "Let x = 3, then x + 4 =",
]
ENGINES = {
    "hf": ("hf", {}),
    "static": ("static", {}),
    "vllm-float32": ("vllm", {"dtype": "float32"}),
    "vllm-bfloat16": ("vllm", {"dtype": "bfloat16"}),
}
VLLM_KWARGS = {"max_model_len": 512, "kv_cache_memory_bytes": 32 << 20, "seed": 0}


def load(model_dir: str | None):
    if model_dir is not None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        return model.eval(), AutoTokenizer.from_pretrained(model_dir)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
    from tiny_model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    return build_model(len(tokenizer)), tokenizer


def batch(tokenizer, prompts, completions):
    """Right-padded ``input_ids``, ``labels`` and ``response_mask`` of prompt + sampled ids,
    and the engine's log-probs at the same positions."""
    rows = []
    for prompt, group in zip(prompts, completions, strict=True):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        rows += [(prompt_ids, c.token_ids, c.logprobs) for c in group]
    width = max(len(p) + len(t) for p, t, _ in rows) - 1
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    engine = torch.zeros(len(rows), width)
    for i, (p, t, lp) in enumerate(rows):
        ids = torch.tensor(p + t)
        input_ids[i, : len(ids) - 1] = ids[:-1]
        labels[i, : len(ids) - 1] = ids[1:]
        mask[i, len(p) - 1 : len(ids) - 1] = True
        engine[i, len(p) - 1 : len(ids) - 1] = torch.tensor(lp)
    return input_ids, labels, mask, engine


def measure(engine, policy, tokenizer, params, prompts):
    out = engine.generate(prompts, params)
    input_ids, labels, mask, engine_lp = batch(tokenizer, prompts, out)
    with torch.no_grad():
        policy_lp = get_response_log_probs(policy, input_ids, labels)["log_probs"]
    stats = {k: v.item() for k, v in logprob_mismatch(policy_lp, engine_lp, mask).items()}
    _, tis = tis_weights(policy_lp, engine_lp, mask, cap=2.0)
    stats.update({k: v.item() for k, v in tis.items()})
    stats["tokens"] = int(mask.sum())
    return stats, (input_ids, labels, mask)


def optimizer_step(policy, lr, tensors, seed):
    input_ids, labels, mask = tensors
    policy.train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    lp = get_response_log_probs(policy, input_ids, labels)["log_probs"]
    gen = torch.Generator().manual_seed(seed)
    advantages = torch.randn(len(lp), 1, generator=gen)
    inputs, settings = LossInputs(advantages=advantages), LossSettings("reinforce_with_baseline")
    loss, _ = grpo_loss(lp, mask, inputs, settings)
    loss.backward()
    optimizer.step()
    policy.eval()


def row(name, state, stats):
    print(
        f"{name:14s} {state:19s} tokens {stats['tokens']:4d}  diff mean {stats['logprob_diff_mean']:.2e}"
        f"  max {stats['logprob_diff_max']:.2e}  outside [0.5, 2] {stats['ratio_outside']:.4f}"
        f"  tis mean {stats['tis_weight_mean']:.4f}  clipped {stats['tis_clipped']:.4f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder (default: tiny random)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--lrs", default="1e-5,1e-4")
    parser.add_argument(
        "--drift-steps", type=int, default=8, help="unsynced steps at the first lr, at the end"
    )
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    params = SamplingParams(n=args.n, max_tokens=args.max_tokens, stop=[], seed=0)
    for name in args.engines.split(","):
        kind, kwargs = ENGINES[name]
        policy, tokenizer = load(args.model)
        if kind == "vllm":
            engine = make_engine(kind, policy, tokenizer, **kwargs, **VLLM_KWARGS)
        else:
            engine = make_engine(kind, copy.deepcopy(policy), tokenizer)
        if kind == "vllm":  # vLLM encodes with the saved folder's tokenizer: compare on its ids
            tokenizer = engine.llm.get_tokenizer()
        stats, tensors = measure(engine, policy, tokenizer, params, PROMPTS)
        row(name, "synced", stats)
        for step, lr in enumerate(float(x) for x in args.lrs.split(",")):
            optimizer_step(policy, lr, tensors, seed=step)
            stats, tensors = measure(
                engine, policy, tokenizer, params.replace(seed=step + 1), PROMPTS
            )
            row(name, f"stale (lr {lr:g})", stats)
            engine.sync_weights(policy)
            stats, tensors = measure(
                engine, policy, tokenizer, params.replace(seed=step + 1), PROMPTS
            )
            row(name, "synced again", stats)
        lr = float(args.lrs.split(",")[0])
        for step in range(args.drift_steps):  # a broken sync: the engine falls further behind
            optimizer_step(policy, lr, tensors, seed=100 + step)
            stats, tensors = measure(
                engine, policy, tokenizer, params.replace(seed=100 + step), PROMPTS
            )
            row(name, f"stale {step + 1} (lr {lr:g})", stats)
        if hasattr(engine, "close"):
            engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
