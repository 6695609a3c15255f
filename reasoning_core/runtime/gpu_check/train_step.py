"""Timed optimizer steps through the trainers' own updates, and their out-of-memory back-off.

:func:`measure_train_step` times :func:`~reasoning_core.runtime.training.updates.sft_update` and
:func:`~reasoning_core.runtime.training.updates.grpo_update`, the functions the SFT, EI and GRPO
trainers step with (forward with entropy, loss, backward, clipping, AdamW, schedule), on a
synthetic batch of one micro batch. :func:`measure_oom_backoff` runs one ``sft_update`` that
must survive a real (or, with ``--tiny``, simulated) CUDA out-of-memory error.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from reasoning_core import LossSettings
from reasoning_core.runtime.gpu_check.device import (
    OOM_ERRORS,
    free_memory,
    gib,
    peak_bytes,
    reset_peak,
    set_gradient_checkpointing,
    sync,
)
from reasoning_core.runtime.gpu_check.flops import train_flops_per_token
from reasoning_core.runtime.training.batching import MicroBatchSize, TokenBatch
from reasoning_core.runtime.training.policy import set_compiled_forward
from reasoning_core.runtime.training.updates import (
    ScoredRollouts,
    fixed_log_probs,
    grpo_update,
    sft_update,
)


def synthetic_batch(config: Any, rows: int, prompt_len: int, response_len: int) -> TokenBatch:
    """A tokenized batch as :func:`~reasoning_core.runtime.training.batching.tokenize_pairs` returns
    it (on the CPU): random ids, ``prompt_len + response_len`` tokens per row, the response
    mask from the last prompt position on, every row full length."""
    g = torch.Generator(device="cpu").manual_seed(0)
    seq = prompt_len + response_len
    ids = torch.randint(0, config.vocab_size, (rows, seq + 1), generator=g)
    mask = torch.zeros(rows, seq, dtype=torch.bool)
    mask[:, prompt_len - 1 :] = True
    return TokenBatch(ids[:, :-1], ids[:, 1:], mask, torch.full((rows,), seq))


def _optimizer(model: torch.nn.Module, device: torch.device):
    """AdamW (fused on a GPU, as make_optimizer builds it) and a constant schedule."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.type == "cuda")
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)


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
    """Time full optimizer steps (``kind`` "sft": ``sft_update``; "grpo": ``grpo_update``
    with grpo_clip) of one micro batch each; at most ``steps`` timed steps, fewer when they
    pass ``max_seconds`` (at least one). ``compiled`` turns on the trainers' compiled training
    forward (setting ``compile``; its compilation falls in the warm-up steps)."""
    set_gradient_checkpointing(model, gradient_checkpointing)
    tokens = synthetic_batch(config, micro_batch, prompt_len, response_len)
    rows = list(range(micro_batch))
    opt, sched = _optimizer(model, device)
    # A fixed size: an out-of-memory error here is a measurement (measure_oom_backoff tests
    # the back-off).
    fixed = MicroBatchSize(micro_batch, backoff=False, name="gpu-check")
    common = dict(micro_batch_size=fixed, device=device, max_grad_norm=1.0)
    if kind == "sft":

        def one_step() -> None:
            sft_update(model, opt, sched, tokens, rows, **common)
    else:
        # The sampling policy's log-probs, scored once as the GRPO trainer does (not timed).
        advantages = torch.linspace(-1, 1, micro_batch)
        old = fixed_log_probs(model, tokens, device, fixed)
        rollouts = ScoredRollouts(tokens, advantages, advantages, old)
        loss = LossSettings("grpo_clip", cliprange=0.2)

        def one_step() -> None:
            grpo_update(model, opt, sched, rollouts, rows, loss=loss, **common)

    model.train()
    set_compiled_forward(model, compiled)
    try:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(warmup):
            one_step()
        sync(device)
        warmup_seconds = time.perf_counter() - t0
        base = reset_peak(device)
        t0 = time.perf_counter()
        done = 0
        while done < steps:
            one_step()
            done += 1
            if done < steps and time.perf_counter() - t0 > max_seconds:
                sync(device)
                if time.perf_counter() - t0 > max_seconds:
                    break
        sync(device)
        dt = (time.perf_counter() - t0) / done
        peak_memory = peak_bytes(device)
    finally:
        # Drop any gradients a failed step left; the optimizer state goes with this frame.
        opt.zero_grad(set_to_none=True)
        set_compiled_forward(model, False)
    seq = prompt_len + response_len
    tokens_per_step = micro_batch * seq
    flops = train_flops_per_token(config, seq) * tokens_per_step / dt
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
        "tokens_per_s": tokens_per_step / dt,
        "response_tokens_per_s": micro_batch * response_len / dt,
        "model_tflops_per_step": train_flops_per_token(config, seq) * tokens_per_step / 1e12,
        "model_tflops_per_s": flops / 1e12,
        "mfu": (flops / peak) if peak else None,
        "mfu_vs_measured_matmul": (flops / measured_peak) if measured_peak else None,
        "peak_memory_gib": gib(peak_memory, device),
        "memory_before_gib": gib(base, device),
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
    set_gradient_checkpointing(model, False)
    tokens = synthetic_batch(config, rows, prompt_len, response_len)
    opt, sched = _optimizer(model, device)
    micro = MicroBatchSize(rows, name="gpu-check")
    hook = None
    if simulate_above is not None:

        def refuse(module, args, kwargs):
            ids = args[0] if args else kwargs["input_ids"]
            if ids.shape[0] > simulate_above:
                raise OOM_ERRORS[0](f"simulated: {ids.shape[0]} rows > {simulate_above}")

        hook = model.register_forward_pre_hook(refuse, with_kwargs=True)
    model.train()
    try:
        sync(device)
        base = reset_peak(device)
        t0 = time.perf_counter()
        stats = sft_update(
            model,
            opt,
            sched,
            tokens,
            list(range(rows)),
            micro_batch_size=micro,
            device=device,
            max_grad_norm=1.0,
        )
        sync(device)
        seconds = time.perf_counter() - t0
        peak_memory = peak_bytes(device)
    finally:
        if hook is not None:
            hook.remove()
        opt.zero_grad(set_to_none=True)
    del opt, sched
    free_memory(device)
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
        "peak_memory_gib": gib(peak_memory, device),
        "memory_before_gib": gib(base, device),
        # After the optimizer is dropped: back to the weights alone if nothing leaked.
        "memory_after_gib": gib(after, device),
    }
