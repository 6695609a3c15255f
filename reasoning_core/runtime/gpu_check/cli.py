"""``rrl gpu-check``: the plan of measurements, their order, and the command line."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from reasoning_core.runtime.gpu_check.device import build_model, gib, model_config, sync
from reasoning_core.runtime.gpu_check.flops import (
    matmul_params,
    measure_matmul_peak,
    peak_flops,
    train_flops_per_token,
)
from reasoning_core.runtime.gpu_check.harness import GpuCheck, json_safe, log
from reasoning_core.runtime.gpu_check.probes import (
    measure_generate,
    measure_logprob_memory,
    probe_sdpa,
)
from reasoning_core.runtime.gpu_check.train_step import measure_oom_backoff, measure_train_step
from reasoning_core.runtime.training.policy import choose_attn_implementation

NOT_CHECKED = (
    "vLLM placement (second GPU or colocated) and weight sync into vLLM "
    "on GPU: the check machine has one GPU and no vLLM"
)


def plan_sizes(tiny: bool, micro_batch: int) -> dict[str, Any]:
    """Sizes of every measurement (all at ``prompt_len + response_len`` tokens per sequence)."""
    if tiny:
        return dict(
            prompt_len=16,
            response_len=48,
            warmup=1,
            matmul_n=256,
            matmul_seconds=0.2,
            generate_batch=4,
            generate_new_tokens=16,
            sweep=[(2, True), (4, False)],
            oom_rows=8,
            oom_simulate_above=2,
        )
    return dict(
        prompt_len=128,
        response_len=1024,
        warmup=2,
        matmul_n=8192,
        matmul_seconds=1.0,
        generate_batch=64,
        generate_new_tokens=256,
        # The GPU configs' micro batch (2 sequences, checkpointing), then larger ones.
        sweep=[(2, True), (8, False), (16, False), (16, True)],
        # 64 x 1,152 tokens without checkpointing needs several times an H200's memory
        # (activations of ~70k tokens), so the back-off must step down (64 -> 32 -> 16 ...).
        oom_rows=64,
        oom_simulate_above=None,
    )


def run_check(
    tiny: bool,
    *,
    micro_batch: int,
    steps: int,
    gradient_checkpointing: bool,
    attn: str | None = None,
    out: str | Path | None = None,
    budget_seconds: float = 150.0,
    hard_limit_seconds: float | None = None,
    sweep: bool = True,
    dtype: str | None = None,
) -> dict[str, Any]:
    """Run every section and return the report (also written to ``out`` after each section)."""
    device = torch.device("cuda" if torch.cuda.is_available() and not tiny else "cpu")
    if dtype is None:
        dtype = "bfloat16" if device.type == "cuda" else "float32"
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    attn = choose_attn_implementation(attn or "auto", device, str(dtype).removeprefix("torch."))
    plan = plan_sizes(tiny, micro_batch)
    check = GpuCheck(
        Path(out) if out is not None else None,
        budget_seconds=budget_seconds,
        hard_limit_seconds=hard_limit_seconds,
        device=device,
        report={
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "dtype": str(dtype),
            "attn_implementation": attn,
            "tiny": tiny,
            "gradient_checkpointing": gradient_checkpointing,
            "micro_batch": micro_batch,
            "steps": steps,
            "budget_seconds": budget_seconds,
            "hard_limit_seconds": hard_limit_seconds,
            "peak_bf16_flops": peak_flops(device),
            "not_checked": NOT_CHECKED,
        },
    )
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        check.set("transformers", transformers.__version__)
        log(
            f"device {check.report['device']}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}, {dtype}, attention {attn}"
        )
        config = model_config(tiny)
        seq = plan["prompt_len"] + plan["response_len"]
        sizes = [(micro_batch, gradient_checkpointing)] * 2 + (plan["sweep"] if sweep else [])
        # Model FLOPs of every timed and warm-up step (checkpointing recomputes a forward: x4/3).
        total = sum(
            train_flops_per_token(config, seq) * mb * seq * (4 / 3 if on else 1) for mb, on in sizes
        ) * (steps + plan["warmup"])
        # The out-of-memory back-off section ends with one step over all its rows.
        total += train_flops_per_token(config, seq) * plan["oom_rows"] * seq
        plan["train_tflop_total"] = total / 1e12
        check.set("plan", plan)
        log(
            f"plan: {len(sizes)} training measurements at {plan['prompt_len']} + "
            f"{plan['response_len']} tokens, ~{total / 1e12:,.0f} TFLOP in all "
            f"(~{total / 300e12:.0f} s at 300 TFLOP/s)"
        )
        run_sections(
            check,
            tiny,
            device,
            dtype,
            attn,
            plan,
            micro_batch,
            steps,
            gradient_checkpointing,
            sweep,
        )
        with check.lock:
            check.report["failed_sections"] = check.failed
            check.report["skipped_sections"] = check.skipped
            check.report["complete"] = not check.failed and not check.skipped
            check.write()
        return check.report
    finally:
        check.cancel_watchdog()


def run_sections(check, tiny, device, dtype, attn, plan, micro_batch, steps, ckpt, sweep):
    prompt_len, response_len = plan["prompt_len"], plan["response_len"]
    seq = prompt_len + response_len

    def env() -> dict[str, Any]:
        info: dict[str, Any] = {"cpu_threads": torch.get_num_threads()}
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            info.update(
                capability=".".join(map(str, torch.cuda.get_device_capability(device))),
                total_memory_gib=props.total_memory / 2**30,
                multiprocessors=props.multi_processor_count,
                sdpa_flash_enabled=torch.backends.cuda.flash_sdp_enabled(),
                sdpa_mem_efficient_enabled=torch.backends.cuda.mem_efficient_sdp_enabled(),
            )
        return info

    check.section("env", env)
    measured = check.section(
        "matmul_peak",
        lambda: measure_matmul_peak(
            device, dtype, n=plan["matmul_n"], seconds=plan["matmul_seconds"]
        ),
    )
    measured_peak = measured["tflops_per_s"] * 1e12 if measured else None
    check.set("measured_matmul_flops", measured_peak)

    def build() -> dict[str, Any]:
        nonlocal attn
        t = time.perf_counter()
        fallback = None
        try:
            model, config = build_model(tiny, device, dtype, attn)
        except Exception as exc:  # noqa: BLE001
            if attn != "flash_attention_2":
                raise
            fallback = f"flash_attention_2 failed ({type(exc).__name__}: {str(exc)[:300]}); sdpa"
            attn = "sdpa"
            model, config = build_model(tiny, device, dtype, attn)
        sync(device)
        check.model, check.config = model, config
        parameters = sum(p.numel() for p in model.parameters())
        check.set("attn_implementation", model.config._attn_implementation)
        check.set("parameters", parameters)
        check.set("matmul_parameters", matmul_params(config))
        info = {
            "parameters": parameters,
            "matmul_parameters": matmul_params(config),
            "param_dtype": str(next(model.parameters()).dtype),
            "attn_implementation": model.config._attn_implementation,
            "build_seconds": time.perf_counter() - t,
            "memory_gib": gib(torch.cuda.memory_allocated(device), device)
            if device.type == "cuda"
            else None,
            "train_flops_per_token": train_flops_per_token(config, seq),
        }
        if fallback:
            info["attn_fallback"] = fallback
        return info

    check.section("model", build)
    check.section("sdpa_probe", lambda: probe_sdpa(device, dtype, model_config(tiny), seq))

    def train(kind: str, mb: int, on: bool, n_steps: int) -> Callable[[], dict[str, Any]]:
        return lambda: measure_train_step(
            check.model,
            check.config,
            kind,
            micro_batch=mb,
            prompt_len=prompt_len,
            response_len=response_len,
            steps=n_steps,
            warmup=plan["warmup"],
            device=device,
            gradient_checkpointing=on,
            peak=peak_flops(device),
            measured_peak=measured_peak,
        )

    def needs_model(name: str, fn: Callable[[], dict[str, Any]], parent: str | None = None):
        if check.model is None:
            check.set(name, {"skipped": "no model (its section failed)"}, parent)
            check.skipped.append(name)
            return None
        return check.section(name, fn, parent)

    needs_model("sft", train("sft", micro_batch, ckpt, steps))
    needs_model("grpo", train("grpo", micro_batch, ckpt, steps))
    check.section(
        "logprob_memory",
        lambda: measure_logprob_memory(
            check.config if check.model is not None else model_config(tiny),
            device,
            batch=micro_batch,
            seq=seq,
        ),
    )
    needs_model(
        "generate",
        lambda: measure_generate(
            check.model,
            check.config,
            device,
            batch=plan["generate_batch"],
            prompt_len=prompt_len,
            new_tokens=plan["generate_new_tokens"],
        ),
    )
    if sweep:
        for mb, on in plan["sweep"]:
            name = f"mb{mb}" + ("_ckpt" if on else "")
            needs_model(name, train("sft", mb, on, max(2, steps - 2)), parent="sft_sweep")
    needs_model(
        "oom_backoff",
        lambda: measure_oom_backoff(
            check.model,
            check.config,
            device,
            rows=plan["oom_rows"],
            prompt_len=prompt_len,
            response_len=response_len,
            simulate_above=plan["oom_simulate_above"],
        ),
    )
    results = [
        r
        for r in [check.report.get("sft"), check.report.get("grpo")]
        + list(check.report.get("sft_sweep", {}).values())
        if isinstance(r, dict) and r.get("model_tflops_per_s")
    ]
    if results:
        best = max(results, key=lambda r: r["model_tflops_per_s"])
        check.set(
            "best_train",
            {k: best.get(k) for k in ("micro_batch", "gradient_checkpointing", "tokens_per_s")}
            | {k: best.get(k) for k in ("mfu", "mfu_vs_measured_matmul", "peak_memory_gib")},
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl gpu-check",
        description="Prepared GPU readiness check for Qwen2.5-Math-1.5B.",
    )
    parser.add_argument("--tiny", action="store_true", help="miniature config on CPU (CI smoke)")
    parser.add_argument("--out", default="gpu_check.json", help="JSON summary path")
    parser.add_argument("--micro-batch", type=int, default=None, help="default 4 (tiny: 2)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps, default 5 (tiny: 2)")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--attn", default=None, choices=["sdpa", "eager", "flash_attention_2"])
    parser.add_argument(
        "--dtype",
        default=None,
        choices=["bfloat16", "float32"],
        help="model dtype (default bfloat16 on a GPU, float32 on CPU)",
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the SFT micro-batch sweep")
    parser.add_argument(
        "--budget-seconds",
        type=float,
        default=150.0,
        help="sections not started by then are skipped (default 150)",
    )
    parser.add_argument(
        "--hard-limit-seconds",
        type=float,
        default=210.0,
        help="write the JSON and exit with status 3 at this time (default 210; 0 disables)",
    )
    args = parser.parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        parser.error("no CUDA GPU found; use --tiny to run the miniature check on CPU")
    if args.tiny:
        torch.set_num_threads(1)
    report = run_check(
        args.tiny,
        micro_batch=args.micro_batch or (2 if args.tiny else 4),
        steps=args.steps or (2 if args.tiny else 5),
        gradient_checkpointing=args.gradient_checkpointing,
        attn=args.attn,
        out=args.out,
        budget_seconds=args.budget_seconds,
        hard_limit_seconds=args.hard_limit_seconds or None,
        sweep=not args.no_sweep,
        dtype=args.dtype,
    )
    print(json.dumps(json_safe(report), separators=(",", ":")), flush=True)
    log(
        f"done in {report['wall_seconds']:.1f} s, JSON at {args.out}; "
        f"failed {report['failed_sections'] or 'none'}, skipped {report['skipped_sections'] or 'none'}"
    )
    sys.stdout.flush()
    return 1 if report["failed_sections"] else 0
