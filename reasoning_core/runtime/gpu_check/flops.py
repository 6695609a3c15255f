"""The FLOP model of the check: model FLOPs per trained token, datasheet peaks, the measured
matrix-product ceiling. MFU = model FLOPs per second over a peak."""

from __future__ import annotations

import time
from typing import Any

import torch

from reasoning_core.runtime.gpu_check.device import sync

# Dense (no sparsity) bf16 tensor-core peaks from the vendor datasheets, the MFU denominator.
# Matched as substrings of torch.cuda.get_device_name, most specific first. The H200 SXM
# ("NVIDIA H200") has the H100 SXM's arithmetic (989 TFLOP/s dense bf16); the lending
# workplace's notes record 769 to 798 TFLOP/s for an 8192³ bf16 product of random data on its
# H200 machines, which is why the check also measures its own matrix-product ceiling
# (`measure_matmul_peak`) and reports MFU against both.
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


def matmul_params(config: Any) -> int:
    """Parameters that take part in matrix products per token (the LM head counts once even
    when tied to the embedding; the embedding lookup itself is not a matmul)."""
    d, f, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    hd = d // config.num_attention_heads
    kv = config.num_key_value_heads * hd
    attn = d * d + 2 * d * kv + d * d  # q, k, v, o
    mlp = 3 * d * f
    return L * (attn + mlp) + d * config.vocab_size


def train_flops_per_token(config: Any, seq_len: int) -> float:
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


def measure_matmul_peak(
    device: torch.device, dtype: torch.dtype, *, n: int, seconds: float
) -> dict[str, Any]:
    """Time back-to-back ``n``³ products on random data for about ``seconds``: the rate the
    GPU's matrix units actually reach here (the realistic ceiling for MFU), 2n³ FLOPs each."""
    g = torch.Generator(device=device).manual_seed(3)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    c = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b, out=c)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        torch.mm(a, b, out=c)
    sync(device)
    per = max((time.perf_counter() - t0) / 5, 1e-9)
    iterations = max(5, min(int(seconds / per), 100_000))
    t0 = time.perf_counter()
    for _ in range(iterations):
        torch.mm(a, b, out=c)
    sync(device)
    dt = time.perf_counter() - t0
    return {
        "n": n,
        "dtype": str(dtype),
        "iterations": iterations,
        "seconds": dt,
        "tflops_per_s": 2 * n**3 * iterations / dt / 1e12,
    }
