"""The policy and what moves it: device, dtype, threads and seeds, attention kernel, the model
and tokenizer, the (optionally compiled) training forward, AdamW and its learning-rate schedule.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import torch

from reasoning_core.runtime.distributed.world import device_name
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.rng import seed_everything
from reasoning_core.runtime.training.settings import CommonConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Key of the torch.compile wrapper in the policy's instance dict (see set_compiled_forward).
COMPILED_FORWARD = "_rrl_compiled_forward"


def resolve_device(name: str) -> torch.device:
    """``"auto"`` is the GPU when there is one, else the CPU; any other name as torch reads it.
    Under ``torchrun`` on CUDA, each rank's own GPU (``cuda:LOCAL_RANK``)."""
    name = device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def setup_torch(cfg: CommonConfig) -> None:
    """Threads and seeds. One thread on CPU unless configured otherwise."""
    torch.set_num_threads(cfg.num_threads)
    seed_everything(cfg.seed)


def choose_attn_implementation(requested: str, device: torch.device, dtype: str) -> str:
    """Resolve ``attn_implementation``: "auto" takes FlashAttention 2 on a GPU in a half
    precision when the ``flash_attn`` package is importable, and PyTorch SDPA otherwise."""
    if requested != "auto":
        if requested == "flash_attention_2" and device.type != "cuda":
            raise ConfigError(
                "setting 'attn_implementation': flash_attention_2 needs a CUDA device"
            )
        return requested
    if device.type == "cuda" and dtype in ("bfloat16", "float16"):
        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
    return "sdpa"


def load_policy(cfg: CommonConfig) -> tuple[Any, Any]:
    """Load the model (in ``cfg.dtype`` on ``cfg.device``) and its tokenizer from ``model_path``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = resolve_device(cfg.device)
    model = AutoModelForCausalLM.from_pretrained(
        cfg.model_path,
        dtype=DTYPES[cfg.dtype],
        attn_implementation=choose_attn_implementation(cfg.attn_implementation, device, cfg.dtype),
    )
    model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if cfg.gradient_checkpointing:
        # Non-reentrant checkpointing works with inputs that do not require grad.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # Training forwards (log-probs, entropy) have no use for a KV cache; the HF engine asks for
    # one explicitly, and generate() follows generation_config, so sampling keeps its cache.
    model.config.use_cache = False
    model.train()
    set_compiled_forward(model, cfg.compile)
    return model, tokenizer


def set_compiled_forward(model: torch.nn.Module, on: bool) -> None:
    """Make :func:`training_forward` return ``torch.compile(model)`` (on) or the model (off).

    The wrapper shares the parameters and sits in the instance dict, not registered as a
    submodule, so it never enters the state dict or the checkpoints."""
    if on:
        model.__dict__[COMPILED_FORWARD] = torch.compile(model)
    else:
        model.__dict__.pop(COMPILED_FORWARD, None)


def training_forward(model: torch.nn.Module) -> Any:
    """What the training and scoring passes call: the compiled wrapper when ``compile`` is
    on for this policy, else the model itself."""
    return model.__dict__.get(COMPILED_FORWARD, model)


def make_optimizer(model: torch.nn.Module, cfg: CommonConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters with the config's rate, betas, epsilon and decay."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        params,
        lr=cfg.lr,
        betas=(float(cfg.betas[0]), float(cfg.betas[1])),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
        # One fused kernel per step on a GPU instead of a loop over the parameter tensors.
        fused=bool(params) and params[0].is_cuda,
    )


def lr_factor(
    step: int, *, total_steps: int, warmup_steps: int, kind: str, min_ratio: float
) -> float:
    """Multiplier of the base learning rate before optimizer step ``step`` (0-based): linear
    warm-up over ``warmup_steps`` (from 1/warmup), then constant, cosine or linear decay to
    ``min_ratio`` at ``total_steps``.

    With ``p = min(1, (step - warmup) / max(1, total - warmup))``: cosine is
    ``min + (1 - min) (1 + cos(pi p)) / 2``, linear ``min + (1 - min)(1 - p)``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    if kind == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - progress)
    raise ValueError(f"unknown lr_scheduler {kind!r}")


def make_scheduler(
    optimizer: torch.optim.Optimizer, cfg: CommonConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The config's schedule (:func:`lr_factor`) over ``total_steps`` optimizer steps."""

    def factor(step: int) -> float:
        return lr_factor(
            step,
            total_steps=total_steps,
            warmup_steps=cfg.warmup_steps,
            kind=cfg.lr_scheduler,
            min_ratio=cfg.min_lr_ratio,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
