"""The HF engine against the static-KV-cache engine on CPU, on the tiny study's two sampling
workloads, in one run (a speed lever of the tiny study).

- eval: the 512 arithmetic test problems, n=1, up to 48 new tokens (every evaluation);
- rollout: 16 problems x n=8, up to 48 new tokens, min_tokens 4 (one GRPO rollout batch).

One torch thread, the study's base model (``--model``, a folder with model.safetensors, e.g.
``results/default/base`` after ``snakemake --cores 2 results/default/base/done.json``). The engines' random
streams differ, so their samples (and token counts) differ too: compare new tokens per second.
Rounds rotate over the engines so that a slow spell of the machine hits all of them.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/engine_cpu.py --model results/default/base --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import envs  # noqa: E402
from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402

ENGINES = {
    "hf64": ("hf", {"max_batch_size": 64}),
    "static64": ("static", {"max_batch_size": 64}),
    "static128": ("static", {"max_batch_size": 128}),
    "static512": ("static", {"max_batch_size": 512}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder (the tiny-world base)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--examples", type=int, default=512)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    task = envs.get_task("arithmetic")
    prompts = [task.format_prompt(ex, "r1_zero") for ex in task.load("test", limit=args.examples)]
    common = dict(temperature=1.0, top_p=1.0, max_tokens=48, stop=["</answer>"])
    workloads = {
        "eval": (prompts, SamplingParams(n=1, seed=0, **common)),
        "rollout": (prompts[:16], SamplingParams(n=8, min_tokens=4, seed=1, **common)),
    }
    engines = {
        name: make_engine(kind, model, tokenizer, **kw) for name, (kind, kw) in ENGINES.items()
    }
    rates: dict[str, dict[str, list[float]]] = {w: {e: [] for e in engines} for w in workloads}
    names = list(engines)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            for workload, (batch, params) in workloads.items():
                t0 = time.perf_counter()
                out = engines[name].generate(batch, params)
                seconds = time.perf_counter() - t0
                tokens = sum(len(c.token_ids) for cs in out for c in cs)
                rates[workload][name].append(tokens / seconds)
                print(
                    f"round {r} {name:10s} {workload:8s} {seconds:6.2f} s "
                    f"{tokens:6d} tokens {tokens / seconds:7.0f} tokens/s",
                    flush=True,
                )
    summary = {}
    for workload, per_engine in rates.items():
        base = statistics.median(per_engine["hf64"])
        summary[workload] = {
            name: {
                "median_tokens_per_s": statistics.median(v),
                "x_hf64": statistics.median(v) / base,
            }
            for name, v in per_engine.items()
        }
        line = ", ".join(f"{n} {s['x_hf64']:.2f}x" for n, s in summary[workload].items())
        print(f"{workload}: median tokens/s against hf64: {line}")
    print(json.dumps({"model": args.model, "rounds": args.rounds, "workloads": summary}))


if __name__ == "__main__":
    main()
