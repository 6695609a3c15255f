"""Does ``torch.compile`` lift the SFT training step's MFU? Eager against compiled, same run.

Builds the randomly initialised Qwen2.5-Math-1.5B (``rrl gpu-check``'s model) in bf16 and
times SFT optimizer steps (the trainers' ``sft_update``) at 128 + 1,024 tokens per row through
gpu_check.measure_train_step: eager at each micro batch, then the same with the training
forward compiled (inductor, as setting ``compile: true`` does). Prints MFU and the
compiled/eager tokens-per-second ratio per micro batch and writes a JSON summary.

    PYTHONPATH=$PWD python3 benchmarks/gpu_compile.py --out $OUT/gpu_compile.json
    python benchmarks/gpu_compile.py --tiny          # miniature model on CPU, a smoke test
    # --gradient-checkpointing: both sides checkpointed, as the GPU configs train
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reasoning_core.runtime import gpu_check as gc  # noqa: E402
from reasoning_core.runtime.training.policy import choose_attn_implementation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="miniature config on CPU")
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--out", default="gpu_compile.json")
    args = parser.parse_args(argv)
    if args.tiny:
        torch.set_num_threads(1)
        device, dtype, prompt, response = torch.device("cpu"), torch.float32, 8, 24
    elif torch.cuda.is_available():
        device, dtype, prompt, response = torch.device("cuda"), torch.bfloat16, 128, 1024
    else:
        parser.error("no CUDA GPU found; use --tiny on CPU")
    t0 = time.perf_counter()
    attn = choose_attn_implementation("auto", device, str(dtype).removeprefix("torch."))
    model, config = gc.build_model(args.tiny, device, dtype, attn)
    peak = gc.peak_flops(device)
    measured = None
    if device.type == "cuda":
        measured = gc.measure_matmul_peak(device, dtype, n=8192, seconds=1.0)["tflops_per_s"] * 1e12
    report: dict = {"device": str(device), "torch": torch.__version__, "runs": {}}
    if device.type == "cuda":
        report["device"] = torch.cuda.get_device_name(device)
    for mb in args.micro_batches:
        for compiled in (False, True):
            name = f"mb{mb}_{'compiled' if compiled else 'eager'}"
            try:
                r = gc.measure_train_step(
                    model,
                    config,
                    "sft",
                    micro_batch=mb,
                    prompt_len=prompt,
                    response_len=response,
                    steps=args.steps,
                    warmup=2,
                    device=device,
                    peak=peak,
                    measured_peak=measured,
                    compiled=compiled,
                    gradient_checkpointing=args.gradient_checkpointing,
                )
            except Exception as exc:  # an OOM or a compile failure: record it, go on
                r = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                gc.free_memory(device)
            report["runs"][name] = r
            print(f"[{time.perf_counter() - t0:6.1f}s] {name}: {gc.summary_line(r)}", flush=True)
        eager, comp = report["runs"][f"mb{mb}_eager"], report["runs"][f"mb{mb}_compiled"]
        if "tokens_per_s" in eager and "tokens_per_s" in comp:
            ratio = comp["tokens_per_s"] / eager["tokens_per_s"]
            report["runs"][f"mb{mb}_ratio"] = ratio
            print(f"micro batch {mb}: compiled/eager tokens/s = {ratio:.3f}", flush=True)
        Path(args.out).write_text(json.dumps(gc.json_safe(report), indent=1))
    report["wall_seconds"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(gc.json_safe(report), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
