"""The device side of the check: synchronisation, memory counters, and the model it measures
(a randomly initialised Qwen2.5-Math-1.5B, or a miniature one for ``--tiny``)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import torch

CONFIG_PATH = Path(__file__).resolve().parents[3] / "workflow/config/models/qwen2.5-math-1.5b.json"

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

OOM_ERRORS: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "OutOfMemoryError", None),) if t is not None
) or (torch.cuda.OutOfMemoryError,)


def sync(device: torch.device) -> None:
    """Wait for the queued GPU work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> int:
    """Zero the peak-memory counter (after the queued work is done); returns the bytes held now."""
    if device.type != "cuda":
        return 0
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def peak_bytes(device: torch.device) -> int:
    """Peak allocated bytes since the last :func:`reset_peak` (0 on CPU)."""
    if device.type != "cuda":
        return 0
    sync(device)
    return torch.cuda.max_memory_allocated(device)


def gib(nbytes: int, device: torch.device) -> float | None:
    """Bytes in GiB on a GPU; None on CPU (not measured there)."""
    return nbytes / 2**30 if device.type == "cuda" else None


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def model_config(tiny: bool) -> Any:
    """The Qwen2 config: Qwen2.5-Math-1.5B's (``CONFIG_PATH``) or :data:`TINY_CONFIG`."""
    from transformers import Qwen2Config

    return Qwen2Config(**(TINY_CONFIG if tiny else json.loads(CONFIG_PATH.read_text())))


def build_model(tiny: bool, device: torch.device, dtype: torch.dtype, attn: str):
    """A randomly initialised Qwen2 built directly on ``device`` in ``dtype`` (no float32 copy),
    the way ``from_pretrained(dtype=...)`` builds the trainers' policy (float32 RoPE buffer).
    Returns ``(model, model.config)``."""
    from transformers import Qwen2ForCausalLM

    config = model_config(tiny)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype, attn_implementation=attn)
    return model, model.config


def set_gradient_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """As the trainers do (:func:`reasoning_core.runtime.training.policy.load_policy`): non-reentrant
    checkpointing when asked, and never a KV cache in a training forward."""
    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    model.config.use_cache = False
