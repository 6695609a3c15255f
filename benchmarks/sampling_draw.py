"""The static engine's draw of one token per row: the inverse of the cumulative sum at one
uniform per row (``kernels._inverse_cdf``, the engine's since 2026-12-01) against the race of
exponential clocks ``argmax(p / E)`` it replaced (one exponential per vocabulary entry, which
is how ``torch.multinomial`` draws one sample), in one run, one torch thread:

- ``draw``: the draw alone on (128, 512) probabilities (the tiny study's rows and vocabulary);
- ``eval``: a whole evaluation with the static engine (512 arithmetic test problems, 48 new
  tokens, 128 rows), the draw swapped in the engine's module. The two draws give other samples
  (another random stream), so token counts differ: compare new tokens per second.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/sampling_draw.py --model results/base --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import envs  # noqa: E402
from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402
from reasoning_core.runtime.engines.static import kernels  # noqa: E402


def exponential_race(weights: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """The replaced draw: ``argmax(w / E)``, ``E ~ Exp(1)`` i.i.d. per entry."""
    race = torch.empty_like(weights).exponential_(generator=generator)
    return (weights / race.clamp_min_(torch.finfo(race.dtype).tiny)).argmax(dim=-1)


DRAWS = {"race": exponential_race, "inverse_cdf": kernels._inverse_cdf}


@contextmanager
def engine_draw(draw: Callable[..., torch.Tensor]) -> Iterator[None]:
    """The static engine draws with ``draw`` inside the block (``sample_on_device`` calls
    ``kernels._inverse_cdf``); its own draw is back afterwards, whatever happens."""
    real = kernels._inverse_cdf
    kernels._inverse_cdf = draw
    try:
        yield
    finally:
        kernels._inverse_cdf = real


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder (the tiny-world base)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--examples", type=int, default=512)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    probs = torch.softmax(torch.randn(128, 512, generator=torch.Generator().manual_seed(0)), -1)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    task = envs.get_task("arithmetic")
    prompts = [task.format_prompt(ex, "r1_zero") for ex in task.load("test", limit=args.examples)]
    params = SamplingParams(temperature=1.0, max_tokens=48, stop=["</answer>"], seed=0)
    engine = make_engine("static", model, tokenizer, max_batch_size=128)
    draw_us: dict[str, list[float]] = {k: [] for k in DRAWS}
    eval_rate: dict[str, list[float]] = {k: [] for k in DRAWS}
    for r in range(args.rounds):
        for name in list(DRAWS)[:: 1 if r % 2 == 0 else -1]:
            fn = DRAWS[name]
            gen = torch.Generator().manual_seed(r)
            t0 = time.perf_counter()
            for _ in range(200):
                fn(probs, gen)
            draw_us[name].append((time.perf_counter() - t0) / 200 * 1e6)
            with engine_draw(fn):
                t0 = time.perf_counter()
                out = engine.generate(prompts, params)
                seconds = time.perf_counter() - t0
            tokens = sum(len(c.token_ids) for cs in out for c in cs)
            eval_rate[name].append(tokens / seconds)
            print(
                f"round {r} {name:12s} draw {draw_us[name][-1]:7.1f} us  eval {seconds:5.2f} s"
                f" {tokens:6d} tokens {tokens / seconds:7.0f} tokens/s",
                flush=True,
            )
    med_draw = {k: statistics.median(v) for k, v in draw_us.items()}
    med_eval = {k: statistics.median(v) for k, v in eval_rate.items()}
    print(
        f"draw (us, lower is better): median race {med_draw['race']:.1f}, "
        f"inverse_cdf {med_draw['inverse_cdf']:.1f}"
    )
    print(
        f"eval tokens/s: median race {med_eval['race']:.1f}, "
        f"inverse_cdf {med_eval['inverse_cdf']:.1f}"
    )
    speedup = {
        "draw": med_draw["race"] / med_draw["inverse_cdf"],
        "eval": med_eval["inverse_cdf"] / med_eval["race"],
    }
    print(
        f"speed-up of inverse_cdf over race: draw {speedup['draw']:.2f}x, "
        f"eval {speedup['eval']:.2f}x"
    )
    result = {"draw_us": med_draw, "eval_tokens_per_s": med_eval, "speedup": speedup}
    print(json.dumps({"rounds": args.rounds, "examples": len(prompts), **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
