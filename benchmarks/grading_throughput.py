"""Grading throughput of `envs.grade_batch` on MATH-500 ground truths (a script, not a test).

Each MATH-500 answer is paired with responses from four families, in equal shares:

* exact: the ground truth itself inside well-formed r1_zero tags (decided in-process);
* equivalent: the same value written differently (`\\boxed{}`, `\\dfrac`, `a/b`, `$...$`, and
  for integers `x = n` or a trailing `.0`); some are decided in-process, the rest by
  math-verify;
* wrong: a different value (integer + 1, or the expression plus 1);
* malformed: format failures (no space between `</think>` and `<answer>`, no closing tag, no
  tags at all).

It reports responses/s with the per-item time limit active, per-item latency p50 / p99, the
grader's counters, and, as a same-run baseline, a plain sequential loop over
`r1_zero_reward_fn` on the main thread (math-verify with its own signal timeout). A second
"hard" mix sends only equivalent and wrong rewrites, more of which need math-verify, and a
last run sends every item of the mixed batch through the worker pool (no in-process shortcut).

    flock /tmp/rrl-heavy.lock python benchmarks/grading_throughput.py [--repeat 4] [--workers N]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import random
import re
import statistics
import time

import envs
from envs import rewards
from envs.rewards import r1_zero_reward_fn

logging.getLogger("math_verify").setLevel(logging.ERROR)


def R(answer: str) -> str:
    return f"Let me think step by step. </think> <answer> {answer} </answer>"


def frac_to_slash(gt: str) -> str:
    return re.sub(r"\\d?frac\{(\d+)\}\{(\d+)\}", r"(\1/\2)", gt)


def equivalent(gt: str, rng: random.Random) -> str:
    if re.fullmatch(r"-?\d+", gt):
        return rng.choice([f"{gt}.0", f"\\boxed{{{gt}}}", f"x = {gt}", f"${gt}$"])
    rewrites = [f"\\boxed{{{gt}}}", f"${gt}$", gt.replace("\\frac", "\\dfrac"), frac_to_slash(gt)]
    return rng.choice(rewrites)


def wrong(gt: str, rng: random.Random) -> str:
    if re.fullmatch(r"-?\d+", gt):
        return str(int(gt) + rng.choice([1, -1, 10]))
    return f"{gt} + 1"


def malformed(gt: str, rng: random.Random) -> str:
    return rng.choice(
        [
            f"thinking </think><answer> {gt} </answer>",
            f"thinking </think> <answer> {gt}",
            f"The answer is {gt}.",
        ]
    )


def make_batch(gts: list[str], families: list[str], seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    responses, truths = [], []
    for i, gt in enumerate(gts):
        family = families[i % len(families)]
        if family == "exact":
            responses.append(R(gt))
        elif family == "equivalent":
            responses.append(R(equivalent(gt, rng)))
        elif family == "wrong":
            responses.append(R(wrong(gt, rng)))
        else:
            responses.append(malformed(gt, rng))
        truths.append(gt)
    return responses, truths


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_batch(name, responses, truths, timeout, workers, fn=r1_zero_reward_fn) -> dict:
    t0 = time.perf_counter()
    out = envs.grade_batch(fn, responses, truths, timeout=timeout, num_workers=workers)
    wall = time.perf_counter() - t0
    s = out.stats
    row = {
        "mix": name,
        "responses": len(responses),
        "seconds": round(wall, 3),
        "responses_per_s": round(len(responses) / wall, 1),
        "latency_p50_ms": round(1000 * pct(s.latencies, 0.50), 3),
        "latency_p99_ms": round(1000 * pct(s.latencies, 0.99), 3),
        "fast": s.fast,
        "pooled": s.pooled,
        "timeouts": s.timeouts,
        "errors": s.errors,
        "mean_reward": round(statistics.fmean(r["reward"] for r in out), 4),
    }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=4, help="responses per MATH-500 problem")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--baseline", type=int, default=500, help="items for the sequential loop")
    args = ap.parse_args()

    gts = [e.ground_truth for e in envs.get_task("math").load("math500")]
    gts_rep = [g for g in gts for _ in range(args.repeat)]
    mixed = make_batch(gts_rep, ["exact", "equivalent", "wrong", "malformed"], seed=0)
    hard = make_batch(gts_rep, ["equivalent", "wrong"], seed=1)

    t0 = time.perf_counter()
    envs.grade_batch(r1_zero_reward_fn, [R("\\frac12")], ["0.5"], num_workers=args.workers)
    print(json.dumps({"pool_start_seconds": round(time.perf_counter() - t0, 3)}))

    # The first pass pays each worker's first-use costs (sympy / LaTeX grammar set-up, empty
    # caches); later passes show the steady state of a persistent pool during training.
    rows = [
        run_batch("mixed (first pass)", *mixed, args.timeout, args.workers),
        run_batch("mixed", *mixed, args.timeout, args.workers),
        run_batch("hard", *hard, args.timeout, args.workers),
        # A partial has no `fast` attribute: every item goes through the worker pool.
        run_batch(
            "mixed, all in workers",
            *mixed,
            args.timeout,
            args.workers,
            fn=functools.partial(r1_zero_reward_fn),
        ),
    ]
    for row in rows:
        print(json.dumps(row))

    # Same-run baseline: a sequential in-process loop on the main thread (math-verify in this
    # process, under its own signal.alarm limit, not in a grading worker).
    rewards.HARD_TIME_LIMIT = None
    for name, (responses, truths) in (("mixed", mixed), ("hard", hard)):
        n = min(args.baseline, len(responses))
        latencies = []
        t0 = time.perf_counter()
        for r, g in zip(responses[:n], truths[:n], strict=True):
            t = time.perf_counter()
            r1_zero_reward_fn(r, g)
            latencies.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        batch = next(row for row in rows if row["mix"] == name)
        print(
            json.dumps(
                {
                    "baseline": f"sequential r1_zero_reward_fn, {name}",
                    "responses": n,
                    "responses_per_s": round(n / wall, 1),
                    "latency_p50_ms": round(1000 * pct(latencies, 0.5), 3),
                    "latency_p99_ms": round(1000 * pct(latencies, 0.99), 3),
                    "grade_batch_speedup": round(batch["responses_per_s"] / (n / wall), 2),
                }
            )
        )


if __name__ == "__main__":
    main()
