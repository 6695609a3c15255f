"""Peak memory of per-token log-probs + entropies: naive log-softmax vs reasoning_core's chunks.

Usage (one run prints everything; takes about a minute or two on one CPU thread):

    OMP_NUM_THREADS=1 python benchmarks/logprob_memory.py [--batch 2 --seq 1024 --vocab 151936]

Variants, each on the same bf16 logits (B, T, V), default B = 2, T = 1024, V = 151,936:

- naive: ``log_p = torch.log_softmax(logits.float(), -1)``;
  ``log_probs = log_p.gather(-1, labels[..., None])``; ``entropy = -(log_p.exp() * log_p).sum(-1)``.
- ours: ``reasoning_core.log_probs_from_logits(logits, labels, return_entropy=True)``.

Scenarios:

- (a) ``no_grad``: forward only, under ``torch.no_grad()``.
- (b) ``grad``: forward with autograd on, then ``log_probs.sum().backward()`` to the bf16 logits
  (the training case: the loss uses log-probs, the entropy is only logged, so the naive path
  computes it from ``log_p.detach()`` under ``no_grad``).
- (c) ``grad_entropy``: as (b) but back-propagating ``log_probs.sum() + entropy.sum()`` (an
  entropy bonus), with the naive entropy under autograd too.

How memory is measured: each (variant, scenario) runs in a fresh subprocess, so nothing is
shared or cached between them. The worker allocates the logits and labels, then resets the
kernel's peak-RSS counter (writing ``5`` to ``/proc/self/clear_refs``) and reads ``VmRSS`` as
the baseline; after the computation (and backward) it reads ``VmHWM``, the peak resident set
since the reset. "Extra peak" = VmHWM - baseline: everything the computation held at its worst
moment beyond the logits (for (b) and (c) that includes the bf16 gradient of the logits, which
both variants must produce). PyTorch's CPU allocator does not cache, and glibc returns large
(mmap-ed) blocks to the kernel on free, so RSS follows live tensors. Where ``clear_refs`` is not
writable the baseline is the VmHWM before the computation (the script says so); that can
only under-state the extra memory.

Accuracy: the log-probs and entropies of both variants are saved (float32, (B, T)) and compared;
for (b) and (c) the gradients of the first 16 positions are compared too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("naive", "ours")
SCENARIOS = ("no_grad", "grad", "grad_entropy")
GRAD_SLICE = 16


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def make_inputs(args: argparse.Namespace):
    """The same bf16 logits and labels in every process (seeded), filled block by block so
    that no full-size float32 temporary is ever allocated."""
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    logits = torch.empty(args.batch, args.seq, args.vocab, dtype=torch.bfloat16)
    for b in range(args.batch):
        for s in range(0, args.seq, 64):
            block = torch.randn(min(64, args.seq - s), args.vocab, generator=gen) * args.scale
            logits[b, s : s + 64] = block.to(torch.bfloat16)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen)
    return logits, labels


def float64_reference(args: argparse.Namespace):
    """Exact (float64) log-probs and entropies of the bf16 logits, 64 positions at a time."""
    import torch

    logits, labels = make_inputs(args)
    log_probs = torch.empty(args.batch, args.seq, dtype=torch.float64)
    entropy = torch.empty(args.batch, args.seq, dtype=torch.float64)
    for b in range(args.batch):
        for s in range(0, args.seq, 64):
            log_p = torch.log_softmax(logits[b, s : s + 64].double(), dim=-1)
            log_probs[b, s : s + 64] = log_p.gather(-1, labels[b, s : s + 64, None]).squeeze(-1)
            entropy[b, s : s + 64] = -(log_p.exp() * log_p).sum(-1)
    return log_probs, entropy


def worker(variant: str, scenario: str, args: argparse.Namespace, out: Path) -> None:
    import torch

    import reasoning_core

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    logits, labels = make_inputs(args)
    logits.requires_grad_(scenario != "no_grad")

    reset = _reset_peak()
    baseline_kb = _status_kb("VmRSS") if reset else _status_kb("VmHWM")
    start = time.perf_counter()
    with torch.set_grad_enabled(scenario != "no_grad"):
        if variant == "naive":
            log_p = torch.log_softmax(logits.float(), dim=-1)
            log_probs = log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            if scenario == "grad":
                with torch.no_grad():
                    d = log_p.detach()
                    entropy = -(d.exp() * d).sum(-1)
                    del d
            else:
                entropy = -(log_p.exp() * log_p).sum(-1)
            del log_p
        else:
            res = reasoning_core.log_probs_from_logits(
                logits, labels, chunk_size=args.chunk_size, return_entropy=True
            )
            log_probs, entropy = res["log_probs"], res["token_entropy"]
            del res
            if scenario == "grad":
                entropy = entropy.detach()
        if scenario == "grad":
            log_probs.sum().backward()
        elif scenario == "grad_entropy":
            (log_probs.sum() + entropy.sum()).backward()
    seconds = time.perf_counter() - start
    peak_kb = _status_kb("VmHWM")
    result = {
        "extra_peak_bytes": (peak_kb - baseline_kb) * 1024,
        "logits_bytes": logits.numel() * logits.element_size(),
        "seconds": seconds,
        "peak_reset": reset,
    }
    saved = {"log_probs": log_probs.detach().float(), "entropy": entropy.detach().float()}
    if logits.grad is not None:
        saved["grad_slice"] = logits.grad[:, :GRAD_SLICE].float().clone()
    torch.save(saved, out.with_suffix(".pt"))
    out.write_text(json.dumps(result))


def _gb(n: float) -> str:
    return f"{n / 2**30:7.3f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument(
        "--chunk-size", type=int, default=None, help="tokens per chunk (default: the library's)"
    )
    parser.add_argument("--scale", type=float, default=3.0, help="std of the random logits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", nargs=3, metavar=("VARIANT", "SCENARIO", "OUT"))
    args = parser.parse_args()
    if args.worker:
        variant, scenario, out = args.worker
        worker(variant, scenario, args, Path(out))
        return

    import torch

    from reasoning_core.logprobs import CHUNK_ELEMENTS

    chunk = args.chunk_size or max(1, CHUNK_ELEMENTS // args.vocab)
    print(
        f"B={args.batch} T={args.seq} V={args.vocab} bf16 logits, chunk_size={chunk} tokens, "
        f"torch {torch.__version__}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    results: dict[tuple[str, str], dict] = {}
    tensors: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in SCENARIOS:
            for variant in VARIANTS:
                out = Path(tmp) / f"{variant}_{scenario}.json"
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--worker",
                    variant,
                    scenario,
                    str(out),
                ]
                cmd += [
                    "--batch",
                    str(args.batch),
                    "--seq",
                    str(args.seq),
                    "--vocab",
                    str(args.vocab),
                ]
                cmd += ["--scale", str(args.scale)]
                if args.chunk_size is not None:
                    cmd += ["--chunk-size", str(args.chunk_size)]
                cmd += ["--seed", str(args.seed)]
                subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[1])
                results[variant, scenario] = json.loads(out.read_text())
                tensors[variant, scenario] = torch.load(out.with_suffix(".pt"))

    logits_bytes = results["naive", "no_grad"]["logits_bytes"]
    if not all(r["peak_reset"] for r in results.values()):
        print("note: /proc/self/clear_refs not writable; baselines are pre-computation VmHWM")
    print(f"logits themselves: {_gb(logits_bytes)}")
    print(
        f"{'scenario':<14}{'naive extra peak':>20}{'ours extra peak':>20}{'ratio':>8}"
        f"{'naive s':>9}{'ours s':>9}"
    )
    for scenario in SCENARIOS:
        naive, ours = results["naive", scenario], results["ours", scenario]
        ratio = ours["extra_peak_bytes"] / naive["extra_peak_bytes"]
        print(
            f"{scenario:<14}{_gb(naive['extra_peak_bytes']):>20}{_gb(ours['extra_peak_bytes']):>20}"
            f"{ratio:8.3f}{naive['seconds']:9.1f}{ours['seconds']:9.1f}"
        )
    print("max abs difference, ours vs naive (both float32):")
    worst_lp = worst_h = 0.0
    for scenario in SCENARIOS:
        a, b = tensors["ours", scenario], tensors["naive", scenario]
        d_lp = (a["log_probs"] - b["log_probs"]).abs().max().item()
        d_h = (a["entropy"] - b["entropy"]).abs().max().item()
        worst_lp, worst_h = max(worst_lp, d_lp), max(worst_h, d_h)
        line = f"  {scenario:<14} log_probs {d_lp:.3e}  entropy {d_h:.3e}"
        if "grad_slice" in a:
            diff = (a["grad_slice"] - b["grad_slice"]).abs().max().item()
            line += f"  bf16 grad of logits[:, :{GRAD_SLICE}] {diff:.3e}"
        print(line)
    ref_lp, ref_h = float64_reference(args)
    print("max abs error against a float64 reference (same bf16 logits):")
    for variant in VARIANTS:
        t = tensors[variant, "no_grad"]
        print(
            f"  {variant:<14} log_probs {(t['log_probs'].double() - ref_lp).abs().max().item():.3e}"
            f"  entropy {(t['entropy'].double() - ref_h).abs().max().item():.3e}"
        )
    ratios = {
        s: results["ours", s]["extra_peak_bytes"] / results["naive", s]["extra_peak_bytes"]
        for s in SCENARIOS
    }
    memory_ok = ratios["no_grad"] <= 0.25 and ratios["grad"] <= 0.5
    print(
        f"memory targets (ratio <= 0.25 no_grad, <= 0.5 grad): {'met' if memory_ok else 'NOT met'}"
    )
    print(
        f"accuracy targets against naive float32: log_probs <= 1e-5 "
        f"{'met' if worst_lp <= 1e-5 else 'NOT met'} ({worst_lp:.1e}), entropy <= 1e-4 "
        f"{'met' if worst_h <= 1e-4 else 'NOT met'} ({worst_h:.1e}); compare each path's "
        "error against float64 above: a gap to naive can be naive's own rounding"
    )


if __name__ == "__main__":
    main()
