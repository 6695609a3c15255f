"""The evaluation's entropy from the engine's per-token entropies against the second forward.

``evaluate_policy`` takes the mean token entropy of the eval responses from the entropies the
hf/static engines return with the tokens; before, it ran a second no-gradient forward over the
responses (what it still does for vLLM). This measures both ways in one process on the tiny
world's eval: the same engine, problems, sampling settings and seed, so both paths score the
same samples; the old path is the same engine with ``entropies`` stripped from its completions.
Rounds alternate new/old (``--rounds``); per path, the median over rounds of ``time/generate``
(now including the entropies), ``time/entropy`` and the whole ``evaluate_policy`` call, the
old/new ratio of each, and both entropy values (they differ where the sampled ids are not
the re-tokenization of the text, and by float rounding; see ``evaluate_policy``).

Model: ``--model`` (a model folder, e.g. the study's base ``results/base`` once built) or,
without it, a random-init model of the tiny world's shape (``TinyWorldConfig``: Qwen2
hidden 128, 4 layers, vocab 512) with its tokenizer trained on ``--tokenizer-docs`` documents.
A random model rarely stops early, so its responses are all ``--max-tokens`` long.

    OMP_NUM_THREADS=1 python benchmarks/eval_entropy.py --examples 512 --rounds 3

``--quick`` (8 problems, 1 round) checks that it runs. Prints readable lines, then one JSON
line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import envs  # noqa: E402
from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402
from reasoning_core.runtime.evaluation.loop import evaluate_policy  # noqa: E402

TIMES = ("time/generate", "time/entropy", "time/total")


class WithoutEntropies:
    """The wrapped engine with ``entropies`` dropped from its completions (as vLLM returns
    them): ``evaluate_policy`` then runs the second forward, on the same samples."""

    def __init__(self, engine):
        self.engine = engine

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        return [[dataclasses.replace(c, entropies=None) for c in group] for group in out]

    def sync_weights(self, model):
        self.engine.sync_weights(model)


def load_policy(args: argparse.Namespace):
    """``(model, tokenizer, description)``: the folder given, or a random tiny-world model."""
    if args.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        return model.eval(), AutoTokenizer.from_pretrained(args.model), args.model
    from reasoning_core.runtime.tinyworld.corpus import documents
    from reasoning_core.runtime.tinyworld.model import build_model, build_tokenizer
    from reasoning_core.runtime.tinyworld.world import TinyWorldConfig

    cfg = TinyWorldConfig()
    docs = documents(cfg, args.tokenizer_docs, seed=cfg.seed * 1000 + 11)
    tokenizer = build_tokenizer([p + r for p, r in docs], cfg.vocab_size)
    model = build_model(cfg, tokenizer.eos_token_id).eval()
    return model, tokenizer, "random init, tiny-world shape"


def one_eval(engine, model, tokenizer, examples, task, params) -> dict:
    t0 = time.perf_counter()
    summary, _ = evaluate_policy(
        engine, examples, task, "r1_zero", params, model=model, tokenizer=tokenizer
    )
    return {
        "entropy": summary["entropy"],
        "response_length": summary["response_length"],
        "time/generate": summary["time/generate"],
        "time/entropy": summary["time/entropy"],
        "time/total": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: random init, tiny-world shape)")
    parser.add_argument("--engine", default="hf", choices=["hf", "static"])
    parser.add_argument("--examples", type=int, default=512, help="arithmetic test problems")
    parser.add_argument("--n", type=int, default=1, help="samples per problem")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokenizer-docs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="8 problems, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.examples, args.rounds = 8, 1
    torch.set_num_threads(args.threads)

    model, tokenizer, description = load_policy(args)
    engine = make_engine(args.engine, model, tokenizer)
    task = envs.get_task("arithmetic")
    examples = task.load("test", limit=args.examples)
    params = SamplingParams(
        n=args.n, temperature=1.0, max_tokens=args.max_tokens, stop=["</answer>"], seed=0
    )
    one_eval(engine, model, tokenizer, examples[:2], task, params)  # warm-up (token table)

    runs: dict[str, list[dict]] = {"new": [], "old": []}
    for _ in range(args.rounds):
        runs["new"].append(one_eval(engine, model, tokenizer, examples, task, params))
        old_engine = WithoutEntropies(engine)
        runs["old"].append(one_eval(old_engine, model, tokenizer, examples, task, params))

    result: dict = {
        "model": description,
        "engine": args.engine,
        "examples": len(examples),
        "n": args.n,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "threads": args.threads,
    }
    print(
        f"eval entropy: {description}, engine {args.engine}, {len(examples)} problems x "
        f"n={args.n}, max_tokens {args.max_tokens}, {args.rounds} round(s), "
        f"{args.threads} thread(s)"
    )
    for path in ("new", "old"):
        rows = runs[path]
        medians = {k: statistics.median(r[k] for r in rows) for k in TIMES}
        result[path] = {
            **medians,
            "entropy": rows[0]["entropy"],
            "response_length": rows[0]["response_length"],
        }
        label = "engine entropies" if path == "new" else "second forward"
        print(
            f"  {path} ({label}): generate {medians['time/generate']:.3f} s, entropy "
            f"{medians['time/entropy']:.3f} s, whole eval {medians['time/total']:.3f} s; "
            f"entropy {rows[0]['entropy']:.6f}"
        )
    result["ratio_old_over_new"] = {
        k: result["old"][k] / result["new"][k] if result["new"][k] > 0 else None for k in TIMES
    }
    result["entropy_difference"] = result["new"]["entropy"] - result["old"]["entropy"]
    ratio = result["ratio_old_over_new"]
    print(
        f"  old/new: whole eval {ratio['time/total']:.3f}x, generate "
        f"{ratio['time/generate']:.3f}x; entropy new - old {result['entropy_difference']:+.2e}"
    )
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
