"""Does the static engine's draw change what an evaluation measures? One model evaluated on the
512 arithmetic test problems (temperature 1, 48 new tokens) with eval seeds 0..K-1, once with
the engine's draw (``kernels._inverse_cdf``) and once with the exponential race it replaced:
mean and standard deviation of the accuracy per draw. Equal means (within their standard
errors) say the new draw samples the same distribution on a real model; the standard
deviation is what one evaluation's sampling alone moves the accuracy by.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/draw_accuracy.py \\
        --model results/sft/default/seed~0/checkpoint --seeds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import envs  # noqa: E402
from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--examples", type=int, default=512)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(Path(__file__).parent))
    from sampling_draw import DRAWS, engine_draw

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    task = envs.get_task("arithmetic")
    examples = task.load("test", limit=args.examples)
    prompts = [task.format_prompt(ex, "r1_zero") for ex in examples]
    reward = task.reward_fn("r1_zero")
    engine = make_engine("static", model, tokenizer, max_batch_size=128)
    accuracy: dict[str, list[float]] = {name: [] for name in DRAWS}
    for seed in range(args.seeds):
        params = SamplingParams(temperature=1.0, max_tokens=48, stop=["</answer>"], seed=seed)
        for name, draw in DRAWS.items():
            with engine_draw(draw):
                out = engine.generate(prompts, params)
            correct = sum(
                reward(group[0].text, ex.ground_truth)["reward"]
                for group, ex in zip(out, examples, strict=True)
            )
            accuracy[name].append(correct / len(examples))
        print(f"eval seed {seed}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in accuracy.items()))
    summary = {
        name: {"mean": statistics.mean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0}
        for name, v in accuracy.items()
    }
    for name, s in summary.items():
        print(f"{name:12s} mean {100 * s['mean']:.1f}%  sd {100 * s['sd']:.1f} points")
    print(json.dumps({"model": args.model, "seeds": args.seeds, "accuracy": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
