"""Where a tiny-world GRPO run and a 512-problem evaluation spend their time on one CPU thread,
each phase against its floor; and the static engine's decoding against an older commit's.

Parts (``--parts``, the first three by default):

* ``profile``: one short GRPO run (the committed study config
  ``results/default/grpo/default/seed~0/config.yaml``, ``--grpo-steps`` steps, its own evaluation
  cut to one problem) and one ``rrl eval`` of ``--examples`` problems, in this process, on the tiny-world
  base model (``workflow/resources/tiny_world``). The static engine's methods, the policy's
  forward and the optimizer step are wrapped with timers (a wrapped call's time excludes the
  wrapped calls inside it); grading, training and preparation come from the runs' ``time/``
  metrics. Each phase is printed with its seconds and, where it
  is made of matrix products, its floor: the products' counted FLOPs (2 per multiply-add:
  every linear layer, the LM head, and attention over the slots attended) divided by this
  core's float32 matrix-product rate, measured in the same run on the model's own shapes
  (``(rows, hidden) x (hidden, intermediate)`` at 128 and 512 rows, the best median).
  ``achieved / floor`` = seconds / floor seconds. Phases with no products (sampling, host
  bookkeeping, grading, the optimizer, Python) have no FLOP floor; "other" is wall time not
  inside any phase. On a loaded machine a phase's seconds include the waits for the core, so
  its ratio to the floor is larger than on a quiet one.
* ``decode``: the static engine's new tokens per second on the evaluation's sampling (the
  ``--examples`` test prompts, n=1, temperature 1, up to 48 new tokens, ``</answer>`` stops;
  with and without the prefill's seconds) and on four GRPO rollout batches (the first
  ``4 * rows / 8`` prompts, ``rows / 8`` per call in groups of 8 samples, at least 4 tokens
  each) at ``--rows`` rows, this tree against ``--base`` (a commit, exported with ``git archive`` and
  put first on ``PYTHONPATH``; ``--head`` does the same for another commit), in alternating
  subprocesses (``--rounds`` pairs; the machine is shared, so a ratio is only taken within a
  pair). Each subprocess also decodes 64 prompts
  greedily; the prompts whose token ids match the base's are counted, and their log-probs
  compared.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/profile_cpu.py | tee benchmarks/profile_cpu.txt

* ``step``: one decode step of the static engine at ``--rows`` rows (the first count) over
  ``--spans`` attended slots, in this process, against two floors: its products' FLOPs at
  the measured product rate (as above), and the bytes of cached keys and values its
  attention reads at this core's measured read rate (a sum over a tensor far larger than the
  caches). Beside it, the step's matrix products alone (the same calls, shapes and cache
  slices, nothing between them): what no rewrite of the other operations can go below
  without faster products. With ``--compile``, also the step under ``torch.compile`` (the
  engine's ``compile: true``), its first call's seconds included.

* ``blas``: the decode step's projections and LM head alone (each layer's q, k, v, o, gate, up
  and down products at ``--rows`` rows, the model's own weight shapes) through three float32
  matrix-product libraries on one thread: MKL (torch's ``F.linear``), oneDNN (torch's
  ``mkldnn_linear`` on tensors converted to its layout once) and numpy's BLAS (OpenBLAS in
  numpy's wheels). Milliseconds per step's products and GFLOP/s, the best of three medians,
  and each library's largest difference from torch's result: whether another library would
  give a faster decode step on this CPU.

* ``fork``: whether a process forked after a ``torch.compile`` compilation reuses it, as jobs
  forked from ``rrl job-server`` would. This process compiles the static engine's decode step
  at ``--rows`` rows (as the engine's ``compile: true`` does: ``fullgraph``, dynamic shapes)
  at the first two ``--spans``, and the training forward (``torch.compile`` of the model, as
  the trainers' ``compile: true``) with its backward on 32 rows of 64 and 72 tokens (``--tiny``:
  8 rows of 16 and 24), each
  first call's seconds printed. A forked process then builds a new engine and loads the model
  again, compiles them the same way and calls them at every span and at 64, 72 and 80 tokens:
  its first call's seconds and the compilations it made (dynamo's graph count), then the
  median milliseconds of the eager and the compiled call. ``--compile-backend`` picks
  torch.compile's backend (``inductor``; the tests use ``eager``, which traces without
  generating code).

``--tiny`` shrinks the parts (8 problems, one GRPO step of 8 rollouts, one pair; 5 timed steps
and a 16 MB read) for the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS, for the blas part

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "workflow" / "resources" / "tiny_world"
GRPO_CONFIG = ROOT / "results" / "default" / "grpo" / "default" / "seed~0" / "config.yaml"
PARTS = ("profile", "decode", "step", "blas", "fork")
DEFAULT_PARTS = PARTS[:3]
BASE = "c5a3f4f"  # the static engine before its fused CPU decode step


# -- timers --------------------------------------------------------------------------------


class Phases:
    """Self time per phase: a wrapped call's seconds minus those of wrapped calls inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.flops: dict[str, float] = {}
        self._stack: list[float] = []  # per open call: seconds spent in its wrapped children

    def add_flops(self, phase: str, flops: float) -> None:
        self.flops[phase] = self.flops.get(phase, 0.0) + flops

    def timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                total = time.perf_counter() - t0
                inner = self._stack.pop()
                self.seconds[phase] = self.seconds.get(phase, 0.0) + total - inner
                if self._stack:
                    self._stack[-1] += total

        return wrapper


@contextlib.contextmanager
def patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """``owner.name`` replaced for the block (restored after, also when inherited)."""
    own = name in vars(owner)
    old = vars(owner).get(name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, old)
        else:
            delattr(owner, name)


class Shape:
    """The model's sizes and FLOP counts (2 per multiply-add)."""

    def __init__(self, config: Any) -> None:
        hidden, inter = config.hidden_size, config.intermediate_size
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.dim = getattr(config, "head_dim", None) or hidden // self.heads
        self.layers, self.vocab, self.hidden, self.inter = (
            config.num_hidden_layers,
            config.vocab_size,
            hidden,
            inter,
        )
        q, kv = self.heads * self.dim, self.kv_heads * self.dim
        # q, k, v, o projections and the gated MLP, per token and layer
        self.layer_macs = hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inter

    def forward(self, tokens: int, attended: float, logits: int) -> float:
        """FLOPs of a forward over ``tokens`` tokens that together attend ``attended``
        (query, key) pairs per layer, with the LM head on ``logits`` positions."""
        attention = 2 * 2 * self.heads * self.dim * attended  # scores and the weighted sum
        return (
            2 * self.layer_macs * tokens * self.layers
            + attention * self.layers
            + 2 * self.hidden * self.vocab * logits
        )


def matmul_rate(shape: Shape, reps: int) -> float:
    """FLOP/s of this core's float32 ``(rows, hidden) x (hidden, intermediate)`` product at
    128 and 512 rows (the decode and prefill sizes), the better median."""
    best = 0.0
    for rows in (128, 512):
        x, w = torch.randn(rows, shape.hidden), torch.randn(shape.inter, shape.hidden)
        seconds = median_seconds(lambda x=x, w=w: torch.nn.functional.linear(x, w), reps, 0)
        best = max(best, 2 * rows * shape.hidden * shape.inter / seconds)
    return best


def median_seconds(fn: Callable[[], Any], reps: int, warmup: int = 3) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# -- the profile part -----------------------------------------------------------------------


def instrument(phases: Phases, shape: Shape) -> contextlib.ExitStack:
    """Wrap the static engine's prefill, decode forward, sampling, host bookkeeping and the
    rest of its ``generate``; the policy's no-grad forwards (old log-probs, the engine check,
    entropies: timed) and its training forwards (counted only: their backward runs outside
    them); and AdamW's step."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM

    import reasoning_core.runtime.engines.static.engine as static_engine
    from reasoning_core.runtime.engines.static.engine import StaticEngine
    from reasoning_core.runtime.engines.static.text import TextMixin

    step_logits, prefill = StaticEngine._step_logits, StaticEngine._prefill
    forward = Qwen2ForCausalLM.forward

    def step(self: Any, b: int, span: int) -> Any:
        phases.add_flops("decode forward", shape.forward(b, b * span, b))
        return step_logits(self, b, span)

    def prefill_counted(self: Any, ids: Any, last: Any, rows: Any, src: Any) -> Any:
        p, width = ids.shape
        phases.add_flops("prefill", shape.forward(p * width, p * width * (width + 1) / 2, p))
        return prefill(self, ids, last, rows, src)

    no_grad_forward = phases.timed("policy forward, no grad", forward)

    def forward_counted(self: Any, input_ids: Any = None, *args: Any, **kwargs: Any) -> Any:
        rows, width = input_ids.shape
        flops = shape.forward(rows * width, rows * width * (width + 1) / 2, rows * width)
        if torch.is_grad_enabled():
            phases.add_flops("forward/backward", 3 * flops)  # the backward: two forwards
            return forward(self, input_ids, *args, **kwargs)
        phases.add_flops("policy forward, no grad", flops)
        return no_grad_forward(self, input_ids, *args, **kwargs)

    wraps = [
        (StaticEngine, "_step_logits", phases.timed("decode forward", step)),
        (StaticEngine, "_prefill", phases.timed("prefill", prefill_counted)),
        (
            static_engine,
            "sample_on_device",
            phases.timed("sampling", static_engine.sample_on_device),
        ),
        (TextMixin, "_advance", phases.timed("host bookkeeping", TextMixin._advance)),
        (StaticEngine, "_collect", phases.timed("host bookkeeping", StaticEngine._collect)),
        (StaticEngine, "generate", phases.timed("engine other", StaticEngine.generate)),
        (Qwen2ForCausalLM, "forward", forward_counted),
        (torch.optim.AdamW, "step", phases.timed("optimizer", torch.optim.AdamW.step)),
    ]
    stack = contextlib.ExitStack()
    for owner, name, replacement in wraps:
        stack.enter_context(patched(owner, name, replacement))
    return stack


def time_sums(out: Path, split: str) -> dict[str, float]:
    """Sums of the ``time/`` keys of a run's metric lines of ``split``."""
    from reasoning_core.runtime.run.metrics import read_metrics

    sums: dict[str, float] = {}
    for line in read_metrics(out / "metrics.jsonl"):
        if line.get("split", split) != split:
            continue
        for key, value in line.items():
            if key.startswith("time/") and isinstance(value, int | float):
                sums[key] = sums.get(key, 0.0) + value
    return sums


def report(title: str, wall: float, phases: Phases, extra: dict[str, float], rate: float) -> None:
    """Print one table: phase, seconds, share of the wall time, floor, achieved / floor."""
    rows = dict(phases.seconds)
    rows.update(extra)
    rows["other (Python, set-up, I/O)"] = max(0.0, wall - sum(rows.values()))
    print(f"\n{title}: {wall:.2f} s wall")
    print(f"{'phase':34s} {'seconds':>8s} {'share':>6s} {'floor ms':>9s} {'achieved/floor':>14s}")
    for phase, seconds in rows.items():
        flops = phases.flops.get(phase)
        floor = "" if flops is None else f"{1e3 * flops / rate:9.2f}"
        ratio = "" if flops is None else f"{seconds / (flops / rate):14.1f}"
        print(f"{phase:34s} {seconds:8.2f} {seconds / wall:6.1%} {floor:>9s} {ratio:>14s}")


def run_instrumented(
    main: Callable[[list[str]], Any], argv: list[str], shape: Shape
) -> tuple[float, Phases]:
    """Wall seconds of ``main(argv)`` and its phases."""
    phases = Phases()
    with instrument(phases, shape):
        t0 = time.perf_counter()
        main(argv)
        return time.perf_counter() - t0, phases


def profile_part(args: argparse.Namespace, model: Path, out: Path) -> None:
    from transformers import AutoConfig

    from reasoning_core.runtime.evaluation import evaluate
    from reasoning_core.runtime.trainers import grpo

    torch.set_num_threads(1)
    shape = Shape(AutoConfig.from_pretrained(model))
    rate = matmul_rate(shape, 50 if args.tiny else 400)
    print(f"matrix-product rate: {rate / 1e9:.1f} GFLOP/s (float32, one thread, model shapes)")
    print(f"forward FLOPs per token without attention: {shape.forward(1, 0, 1) / 1e6:.2f} M")

    sets = {
        "model_path": model,
        "n_grpo_steps": args.grpo_steps,
        "eval_every": 10**6,
        "eval_at_start": False,
        "eval_examples": 1,  # the run's final evaluation; the evaluation is profiled below
        "save_checkpoint": False,
        "progress": False,
        **(TINY_GRPO if args.tiny else {}),
    }
    argv = ["--config", str(GRPO_CONFIG), "--out", str(out / "grpo")]
    argv += [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    wall, phases = run_instrumented(grpo.main, argv, shape)
    sums = time_sums(out / "grpo", "train")
    train = sums.get("time/train", 0.0) - phases.seconds.get("optimizer", 0.0)
    prepare = sums.get("time/prepare", 0.0) - phases.seconds.get("policy forward, no grad", 0.0)
    # old log-probs are the no-grad forwards inside prepare; 0 when the config needs none
    phases.seconds.setdefault("policy forward, no grad", 0.0)
    extra = {
        "grading": sums.get("time/grade", 0.0),
        "forward/backward": train,
        "prepare (tokens, advantages)": prepare,
    }
    report(f"GRPO, {args.grpo_steps} steps", wall, phases, extra, rate)

    sets = {
        "model_path": model,
        "task": "arithmetic",
        "engine": "static",
        "device": "cpu",
        "eval_examples": args.examples,
        "eval_max_tokens": 8 if args.tiny else 48,
        "eval_batch_size": 128,
    }
    argv = ["--out", str(out / "eval")] + [
        x for k, v in sets.items() for x in ("--set", f"{k}={v}")
    ]
    wall, phases = run_instrumented(evaluate.main, argv, shape)
    sums = time_sums(out / "eval", "eval")
    report(
        f"evaluation, {args.examples} problems",
        wall,
        phases,
        {"grading": sums.get("time/grade", 0.0)},
        rate,
    )


# -- the decode part ------------------------------------------------------------------------


def decode_worker(model: str, rows: int, examples: int, rounds: int) -> dict[str, Any]:
    """New tokens/s of the static engine on the evaluation's sampling and on GRPO rollout
    batches (best of ``rounds`` after a warm-up call), and 64 greedy completions' token ids
    (a digest) and log-probs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import envs
    from reasoning_core.runtime.engines import make_engine
    from reasoning_core.runtime.engines.rollout import SamplingParams

    torch.set_num_threads(1)
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model)
    task = envs.get_task("arithmetic")
    prompts = [task.format_prompt(ex, "r1_zero") for ex in task.load("test", limit=examples)]
    engine = make_engine("static", policy, tokenizer, max_batch_size=rows)
    common = dict(top_p=1.0, max_tokens=48, stop=["</answer>"])
    params = SamplingParams(n=1, seed=0, temperature=1.0, **common)
    # the study's GRPO rollout batch: prompts in groups of 8 samples, at least 4 tokens each
    group = SamplingParams(n=8, seed=0, temperature=1.0, min_tokens=4, **common)
    per_call = max(1, rows // 8)
    batches = [prompts[i : i + per_call] for i in range(0, 4 * per_call, per_call)][:4]
    engine.generate(prompts[:rows], params)
    rates, decode, grpo = [], [], []
    for _ in range(rounds):
        prefill = engine.stats["prefill_seconds"]
        t0 = time.perf_counter()
        out = engine.generate(prompts, params)
        seconds = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) for cs in out for c in cs)
        rates.append(tokens / seconds)
        decode.append(tokens / (seconds - engine.stats["prefill_seconds"] + prefill))
        t0, grpo_tokens = time.perf_counter(), 0
        for i, batch in enumerate(batches):
            out = engine.generate(batch, group.replace(seed=i))
            grpo_tokens += sum(len(c.token_ids) for cs in out for c in cs)
        grpo.append(grpo_tokens / (time.perf_counter() - t0))
    greedy = engine.generate(prompts[:64], SamplingParams(n=1, seed=0, temperature=0.0, **common))
    ids = json.dumps([c.token_ids for cs in greedy for c in cs])
    return {
        "tokens_per_s": max(rates),
        "decode_tokens_per_s": max(decode),
        "grpo_tokens_per_s": max(grpo),
        "tokens": tokens,
        "greedy_digest": hashlib.sha256(ids.encode()).hexdigest()[:16],
        "greedy_ids": [c.token_ids for cs in greedy for c in cs],
        "greedy_logprobs": [c.logprobs for cs in greedy for c in cs],
    }


def export(commit: str, into: Path) -> Path:
    """``git archive`` of ``commit`` unpacked into ``into`` (its reasoning_core and envs)."""
    archive = subprocess.run(
        ["git", "archive", commit, "reasoning_core", "envs"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def decode_part(args: argparse.Namespace, model: Path, out: Path) -> None:
    base = export(args.base, out / "base")
    head = ROOT if args.head is None else export(args.head, out / "head")
    trees = {"base": base, "head": head}
    name = "this tree" if args.head is None else args.head
    print(f"\ndecode at {args.rows} rows: {name} (head) against {args.base} (base), new tokens/s")
    keys = {
        "evaluation": "tokens_per_s",
        "without prefill": "decode_tokens_per_s",
        "GRPO batches": "grpo_tokens_per_s",
    }
    ratios: dict[tuple[int, str], list[float]] = {(r, k): [] for r in args.rows for k in keys}
    digests: dict[str, set[str]] = {"base": set(), "head": set()}
    greedy: dict[str, dict[str, Any]] = {}
    for pair in range(args.rounds):
        for rows in args.rows:
            got: dict[str, dict[str, Any]] = {}
            order = ["base", "head"] if pair % 2 == 0 else ["head", "base"]
            for name in order:
                env = {**os.environ, "PYTHONPATH": f"{trees[name]}{os.pathsep}{ROOT}"}
                cmd = [
                    sys.executable,
                    __file__,
                    "--worker",
                    str(model),
                    str(rows),
                    str(args.examples),
                ]
                cmd += ["--tiny"] if args.tiny else []
                run = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
                got[name] = json.loads(run.stdout.strip().splitlines()[-1])
                digests[name].add(got[name]["greedy_digest"])
                greedy[name] = got[name]
            parts = []
            for label, key in keys.items():
                ratio = got["head"][key] / got["base"][key]
                ratios[(rows, label)].append(ratio)
                parts.append(
                    f"{label}: base {got['base'][key]:6.0f} head {got['head'][key]:6.0f} "
                    f"ratio {ratio:.2f}"
                )
            print(f"pair {pair} rows {rows}: " + "; ".join(parts), flush=True)
    for rows in args.rows:
        medians = ", ".join(
            f"{label} {statistics.median(ratios[(rows, label)]):.2f}" for label in keys
        )
        print(f"rows {rows}: median ratio head/base over {args.rounds} pairs: {medians}")
    same = digests["base"] == digests["head"] and len(digests["head"]) == 1
    print(f"greedy token ids of 64 prompts identical to the base's: {same}")
    pairs = list(zip(greedy["base"]["greedy_ids"], greedy["head"]["greedy_ids"], strict=True))
    equal = sum(a == b for a, b in pairs)
    diffs = [
        abs(x - y)
        for (a, b), la, lb in zip(
            pairs, greedy["base"]["greedy_logprobs"], greedy["head"]["greedy_logprobs"], strict=True
        )
        if a == b
        for x, y in zip(la, lb, strict=True)
    ]
    print(
        f"greedy: {equal} of {len(pairs)} prompts' token ids equal; their log-probs differ by at "
        f"most {max(diffs, default=0.0):.2e}"
    )


# -- the step part --------------------------------------------------------------------------


def read_rate(megabytes: int = 256) -> float:
    """Bytes/s of one thread summing a float32 tensor of ``megabytes`` (far larger than the
    caches, so it streams from memory), the best of three."""
    x = torch.ones(megabytes * 2**20 // 4)
    return x.numel() * 4 / min(median_seconds(x.sum, 1, warmup=1) for _ in range(3))


def step_products(engine: Any, b: int, span: int) -> Callable[[], None]:
    """The decode step's matrix products alone: every projection (with its bias), the
    attention's two batched products over the cache's own slices, and the LM head, with
    inputs of the step's shapes made once."""
    cache = engine._cache
    hidden = engine.model.config.hidden_size
    group = engine.num_heads // engine.kv_heads
    x = torch.randn(b, hidden)
    q = torch.randn(b, engine.kv_heads, group, engine.head_dim)
    probs = torch.softmax(torch.randn(b, engine.kv_heads, group, span), dim=-1)
    inter = torch.randn(b, engine.model.config.intermediate_size)
    heads_out = torch.randn(b, engine.num_heads * engine.head_dim)

    def run() -> None:
        for layer, keys, values in zip(engine.layers, cache.keys, cache.values, strict=True):
            attn, mlp = layer.self_attn, layer.mlp
            attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
            torch.matmul(q, keys[:b, :, :span].transpose(2, 3))
            torch.matmul(probs, values[:b, :, :span])
            attn.o_proj(heads_out)
            mlp.gate_proj(x), mlp.up_proj(x), mlp.down_proj(inter)
        engine.model.lm_head(x)

    return run


def step_inputs(cache: Any, rows: int, span: int) -> tuple[Any, Any, Any]:
    """The decode step's inputs with every one of ``rows`` rows attending ``span`` slots."""
    cache.pos[:rows] = span - 1
    return cache.tok[:rows], cache.pos[:rows], cache.slots[:span]


def step_part(args: argparse.Namespace, model: Path) -> None:
    from transformers import AutoConfig

    from reasoning_core.runtime.engines.static import StaticEngine

    torch.set_num_threads(1)
    rows, reps = args.rows[0], 5 if args.tiny else 50
    shape = Shape(AutoConfig.from_pretrained(model))
    rate = matmul_rate(shape, 50 if args.tiny else 400)
    bandwidth = read_rate(16 if args.tiny else 256)
    print(
        f"\ndecode step at {rows} rows, one thread: product rate {rate / 1e9:.1f} GFLOP/s, "
        f"read rate {bandwidth / 1e9:.1f} GB/s"
    )
    engines = {"eager": StaticEngine(str(model), max_batch_size=rows)}
    if args.compile:
        engines["compiled"] = StaticEngine(str(model), max_batch_size=rows, compile=True)
    header = f"{'span':>5s} {'step ms':>8s} {'products ms':>12s} {'FLOP floor':>11s} "
    header += f"{'read floor':>11s} {'step/floors':>12s}"
    print(header + (f" {'compiled ms':>12s} {'first s':>8s}" if args.compile else ""))
    caches = {name: e._ensure_cache(rows, max(args.spans)) for name, e in engines.items()}
    for span in args.spans:
        step: dict[str, float] = {}  # engine -> median seconds of a step
        first: dict[str, float] = {}  # engine -> seconds of its first step at this span
        with torch.no_grad():
            for name, engine in engines.items():
                cache = caches[name]
                inputs = step_inputs(cache, rows, span)
                t0 = time.perf_counter()
                engine._step_fn(*inputs)
                first[name] = time.perf_counter() - t0
                step[name] = median_seconds(lambda e=engine, a=inputs: e._step_fn(*a), reps)
            products = median_seconds(step_products(engines["eager"], rows, span), reps)
        flop_floor = shape.forward(rows, rows * span, rows) / rate
        kv_bytes = 2 * shape.layers * rows * shape.kv_heads * span * shape.dim * 4
        read_floor = kv_bytes / bandwidth
        compiled = ""
        if args.compile:
            compiled = f"{1e3 * step['compiled']:12.2f} {first['compiled']:8.1f}"
        print(
            f"{span:5d} {1e3 * step['eager']:8.2f} {1e3 * products:12.2f} "
            f"{1e3 * flop_floor:11.2f} {1e3 * read_floor:11.2f} "
            f"{step['eager'] / (flop_floor + read_floor):12.1f} {compiled}"
        )


def blas_part(args: argparse.Namespace, model: Path) -> None:
    import numpy as np
    from transformers import AutoConfig

    torch.set_num_threads(1)
    rows, reps = args.rows[0], 5 if args.tiny else 200
    shape = Shape(AutoConfig.from_pretrained(model))
    q, kv = shape.heads * shape.dim, shape.kv_heads * shape.dim
    # (in, out) of each product of one decode step: per layer, then the LM head
    layer = [(shape.hidden, q), (shape.hidden, kv), (shape.hidden, kv), (q, shape.hidden)]
    layer += [(shape.hidden, shape.inter)] * 2 + [(shape.inter, shape.hidden)]
    products = layer * shape.layers + [(shape.hidden, shape.vocab)]
    gen = torch.Generator().manual_seed(0)
    pairs = [
        (torch.randn(rows, i, generator=gen), torch.randn(o, i, generator=gen)) for i, o in products
    ]
    flops = sum(2 * rows * i * o for i, o in products)
    host = [(x.numpy(), w.t().contiguous().numpy()) for x, w in pairs]
    # name -> (the step's products, one output made a dense torch tensor for the comparison)
    libraries: dict[str, tuple[Callable[[], list[Any]], Callable[[Any], torch.Tensor]]] = {
        "MKL (torch F.linear)": (
            lambda: [torch.nn.functional.linear(x, w) for x, w in pairs],
            lambda out: out,
        ),
    }
    if torch.backends.mkldnn.is_available():
        dnn = [(x.to_mkldnn(), w.to_mkldnn()) for x, w in pairs]
        libraries["oneDNN (mkldnn_linear)"] = (
            lambda: [torch._C._nn.mkldnn_linear(x, w, None) for x, w in dnn],
            lambda out: out.to_dense(),
        )
    else:
        print("oneDNN: not in this torch build (torch.backends.mkldnn), left out")
    libraries["numpy's BLAS (matmul)"] = (lambda: [x @ w for x, w in host], torch.from_numpy)
    print(
        f"\ndecode step's {len(products)} projections and LM head at {rows} rows, one thread "
        f"({flops / 1e6:.0f} MFLOP a step); numpy {np.__version__}"
    )
    print(f"{'library':24s} {'ms a step':>10s} {'GFLOP/s':>8s} {'vs MKL':>7s} {'max diff':>9s}")
    reference = libraries["MKL (torch F.linear)"][0]()
    base = None
    for name, (run, dense) in libraries.items():
        seconds = min(median_seconds(run, reps) for _ in range(3))
        base = base or seconds
        results = [dense(out) for out in run()]
        diff = max(float((a - b).abs().max()) for a, b in zip(reference, results, strict=True))
        print(
            f"{name:24s} {1e3 * seconds:10.3f} {flops / seconds / 1e9:8.1f} "
            f"{base / seconds:7.2f} {diff:9.1e}"
        )


def fork_part(args: argparse.Namespace, model: Path) -> None:
    from torch._dynamo.utils import counters
    from transformers import AutoModelForCausalLM

    from reasoning_core.runtime.engines.static import StaticEngine

    torch.set_num_threads(1)
    rows, spans, backend = args.rows[0], args.spans, args.compile_backend
    # the tiny mode's training batches: 8 rows of 16, 24 and 32 tokens
    width, lengths, reps = (8, (16, 24, 32), 3) if args.tiny else (32, (64, 72, 80), 20)
    gen = torch.Generator().manual_seed(0)
    batches = {n: torch.randint(0, 256, (width, n), generator=gen) for n in lengths}

    def engine() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
        """(eager step at a span, compiled step at a span) of a new engine."""
        e = StaticEngine(str(model), max_batch_size=rows)
        cache = e._ensure_cache(rows, max(spans))
        compiled = torch.compile(e._decode, fullgraph=True, dynamic=True, backend=backend)

        def at(fn: Callable[..., Any]) -> Callable[[int], Any]:
            def call(span: int) -> Any:
                with torch.no_grad():
                    return fn(*step_inputs(cache, rows, span))

            return call

        return at(e._decode), at(compiled)

    def policy() -> tuple[Callable[[int], Any], Callable[[int], Any]]:
        """(eager, compiled) forward and backward of a newly loaded model on n tokens a row."""
        m = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
        compiled = torch.compile(m, backend=backend)  # as training/policy.py's compile

        def at(fn: Callable[..., Any]) -> Callable[[int], Any]:
            def call(n: int) -> None:
                ids = batches[n]
                logits = fn(input_ids=ids).logits[:, :-1]
                picked = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])
                picked.mean().backward()
                m.zero_grad(set_to_none=True)

            return call

        return at(m), at(compiled)

    def first_call(fn: Callable[[int], Any], size: int) -> tuple[float, int]:
        """Seconds of one call and the graphs dynamo compiled during it."""
        graphs = counters["stats"]["unique_graphs"]
        t0 = time.perf_counter()
        fn(size)
        return time.perf_counter() - t0, counters["stats"]["unique_graphs"] - graphs

    cases = {
        f"decode step, {rows} rows, span": (engine, spans),
        f"training fwd+bwd, {width} rows x": (policy, lengths),
    }
    print(f"\ncompiled here (backend {backend}), then in a forked process, one thread")
    parent: dict[tuple[str, int], float] = {}
    for name, (make, sizes) in cases.items():
        _, compiled = make()
        for size in sizes[:2]:
            parent[name, size] = first_call(compiled, size)[0]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked process: new objects, the same compiled code
        status = 1
        try:
            got = []
            for name, (make, sizes) in cases.items():
                eager, compiled = make()
                for size in sizes:
                    seconds, graphs = first_call(compiled, size)
                    eager_s = median_seconds(lambda f=eager, s=size: f(s), reps, 1)
                    compiled_s = median_seconds(lambda f=compiled, s=size: f(s), reps, 1)
                    got.append((name, size, seconds, graphs, eager_s, compiled_s))
            os.write(write, json.dumps(got).encode())
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        got = json.loads(pipe.read() or "[]")
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        raise RuntimeError("fork part: the forked process failed (its traceback is above)")
    print(
        f"{'':34s} {'here: first s':>13s} {'forked: first s':>15s} {'compilations':>12s} "
        f"{'eager ms':>9s} {'compiled ms':>11s} {'ratio':>6s}"
    )
    for name, size, seconds, graphs, eager_s, compiled_s in got:
        here = parent.get((name, size))
        print(
            f"{f'{name} {size}':34s} {'' if here is None else f'{here:.1f}':>13s} "
            f"{seconds:15.2f} {graphs:12d} {1e3 * eager_s:9.2f} {1e3 * compiled_s:11.2f} "
            f"{eager_s / compiled_s:6.2f}"
        )


# The tiny mode's GRPO: one step of 8 rollouts in groups of 4, 8 new tokens.
TINY_GRPO = dict(rollout_batch_size=8, group_size=4, train_batch_size=8, sampling_max_tokens=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"any of {PARTS}")
    parser.add_argument("--model", default=str(MODEL), help="tiny-world model folder")
    parser.add_argument("--out", default=None, help="run folder (default: a temporary one)")
    parser.add_argument("--grpo-steps", type=int, default=5)
    parser.add_argument("--examples", type=int, default=512)
    parser.add_argument("--rows", default="128", help="decode part's row counts, e.g. 64,128,256")
    parser.add_argument("--rounds", type=int, default=3, help="decode part's pairs")
    parser.add_argument("--base", default=BASE, help="decode part's baseline commit")
    parser.add_argument(
        "--head", default=None, help="decode part's other commit (default: this tree)"
    )
    parser.add_argument(
        "--spans", default="32,64,96", help="step part's attended slots, e.g. 32,64,96"
    )
    parser.add_argument(
        "--compile", action="store_true", help="step part: also the compiled step (slow start)"
    )
    parser.add_argument(
        "--compile-backend", default="inductor", help="fork part's torch.compile backend"
    )
    parser.add_argument("--tiny", action="store_true", help="seconds-long version (tests)")
    parser.add_argument("--worker", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        model, rows, examples = args.worker
        print(json.dumps(decode_worker(model, int(rows), int(examples), 1 if args.tiny else 2)))
        return 0
    args.rows = [int(r) for r in args.rows.split(",")]
    args.spans = [int(s) for s in args.spans.split(",")]
    if args.tiny:
        args.grpo_steps, args.examples, args.rounds = 1, 8, 1
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; choose from {PARTS}")
    load = os.getloadavg()[0]
    print(f"load at start {load:.2f}; torch {torch.__version__}, one thread")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        if "profile" in parts:
            profile_part(args, Path(args.model), out)
        if "decode" in parts:
            decode_part(args, Path(args.model), out)
        if "step" in parts:
            step_part(args, Path(args.model))
        if "blas" in parts:
            blas_part(args, Path(args.model))
        if "fork" in parts:
            fork_part(args, Path(args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
