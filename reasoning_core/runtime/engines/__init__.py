"""The rollout engines behind :class:`~reasoning_core.runtime.engines.rollout.RolloutEngine`, and the
one factory that builds them.

- :mod:`~reasoning_core.runtime.engines.hf`: :class:`HFEngine`, our own batched sampling loop
  over a Hugging Face model (any machine);
- :mod:`~reasoning_core.runtime.engines.vllm`: :class:`VLLMEngine`, an in-process ``vllm.LLM``
  with weight sync (vLLM itself is imported only when such an engine starts);
- :mod:`~reasoning_core.runtime.engines.static`: :class:`StaticEngine`, the live policy module
  decoded over a preallocated KV cache, decode steps captured as CUDA graphs on a GPU.

Setting ``engine: auto`` picks one with :func:`resolve_engine`: ``vllm`` when the ``vllm``
package imports and the policy is on a CUDA device, else ``static`` on a CUDA device, else
``hf`` (the CPU).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from reasoning_core.runtime.engines.hf import HFEngine
from reasoning_core.runtime.engines.rollout import RolloutEngine
from reasoning_core.runtime.engines.static.engine import StaticEngine
from reasoning_core.runtime.engines.vllm import VLLMEngine

ENGINES = ("hf", "static", "vllm")
ENGINE_SETTINGS = ("auto", *ENGINES)  # the values of setting `engine`
# The default of setting `engine`, the trainers' and rrl eval's alike: the best engine the
# device has (resolve_engine), hf on a CPU.
ENGINE_DEFAULT = "auto"


@functools.cache
def vllm_importable() -> bool:
    """True when ``import vllm`` succeeds here (asked once per process: it takes seconds)."""
    try:
        import vllm  # noqa: F401
    except Exception:  # not installed, or installed but broken (a CUDA/torch mismatch)
        return False
    return True


def resolve_engine(engine: str, device: str | torch.device) -> str:
    """The engine setting ``engine`` means on ``device`` (the policy's): itself when it names
    one; for ``auto``, ``vllm`` when :func:`vllm_importable` and ``device`` is CUDA, ``static``
    on CUDA without vLLM, ``hf`` otherwise. vLLM is not even imported off CUDA."""
    if engine != "auto":
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; expected one of {list(ENGINE_SETTINGS)}")
        return engine
    if torch.device(device).type != "cuda":
        return "hf"
    return "vllm" if vllm_importable() else "static"


def make_engine(kind: str, model: Any, tokenizer: Any = None, **kwargs: Any) -> RolloutEngine:
    """Build a rollout engine.

    Args:
        kind: ``"hf"``, ``"static"`` or ``"vllm"``.
        model: a Hugging Face causal LM (``torch.nn.Module``) or the path of a model folder.
            vLLM always loads from a folder; given a module, the ``"vllm"`` engine first saves it
            (with ``tokenizer``) to a temporary folder.
        tokenizer: the tokenizer (optional when ``model`` is a folder that holds one).
        kwargs: engine options, see :class:`HFEngine` (``max_batch_size``, ``dtype``),
            :class:`StaticEngine` and
            :class:`VLLMEngine` (``dtype``, ``seed``, ``max_model_len``, ``kv_cache_memory_bytes``,
            ``gpu_memory_utilization``, ``enforce_eager``, any ``vllm.LLM`` argument).
    """
    if kind == "hf":
        return HFEngine(model, tokenizer, **kwargs)
    if kind == "static":
        return StaticEngine(model, tokenizer, **kwargs)
    if kind == "vllm":
        if isinstance(model, (str, Path)):
            return VLLMEngine(model, tokenizer=tokenizer, **kwargs)
        return VLLMEngine.from_module(model, tokenizer, **kwargs)
    raise ValueError(f"unknown engine kind {kind!r}; expected one of {list(ENGINES)}")


__all__ = [
    "ENGINES",
    "ENGINE_SETTINGS",
    "HFEngine",
    "StaticEngine",
    "VLLMEngine",
    "make_engine",
    "resolve_engine",
    "vllm_importable",
]
