"""Probes beside the training step: log-prob memory (chunked against naive), sampled
generation throughput with the KV cache, and which SDPA kernels take the model's attention."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from reasoning_core import log_probs_from_logits
from reasoning_core.runtime.gpu_check.device import (
    free_memory,
    gib,
    peak_bytes,
    reset_peak,
    set_gradient_checkpointing,
    sync,
)


def measure_logprob_memory(config, device, *, batch: int, seq: int) -> dict[str, Any]:
    """Extra peak memory (beyond the bf16 logits) of naive vs chunked log-probs, fwd+bwd."""
    g = torch.Generator(device=device).manual_seed(1)
    labels = torch.randint(0, config.vocab_size, (batch, seq), device=device, generator=g)
    results: dict[str, float | None] = {}
    for name in ("naive", "chunked"):
        logits = torch.randn(
            batch, seq, config.vocab_size, device=device, dtype=torch.bfloat16, generator=g
        )
        logits.requires_grad_(True)
        base = reset_peak(device)
        if name == "naive":
            lp = torch.log_softmax(logits.float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        else:
            lp = log_probs_from_logits(logits, labels)["log_probs"]
        lp.sum().backward()
        results[name] = gib(peak_bytes(device) - base, device)
        del logits, lp
        free_memory(device)
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
    sync(device)
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=attention_mask, **kwargs)
    sync(device)
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
            sync(device)
            result[name] = True
        except Exception as exc:  # noqa: BLE001 - a diagnostic: record why it was refused
            result[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return result
