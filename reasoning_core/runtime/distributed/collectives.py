"""Sums and gathers over the ranks, how a batch is split over them, and the world-size check.

Every helper is the identity in a plain run (one process), so the one-process path computes
exactly what it computed before there were ranks. Sums go through float64 buffers: a metric
summed over two ranks rounds once, at the end.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from reasoning_core.runtime.distributed.world import active, rank, world_size
from reasoning_core.runtime.errors import ConfigError

T = TypeVar("T")


def is_sharded(model: torch.nn.Module) -> bool:
    """True when ``model`` is an FSDP2 module (its parameters are shards).

    Only :func:`~reasoning_core.runtime.distributed.sharding.shard_policy` imports
    ``torch.distributed.fsdp``, so a process that has not imported it holds no FSDP2 module:
    the check needs no import of its own. Importing FSDP takes 1-1.5 s of a CPU process's
    start, which ``snakemake`` (planning the study) and the ``rrl`` commands that train no
    sharded model need not pay."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def _comm_device() -> torch.device:
    """Where a collective's buffer lives: the CPU for gloo, this rank's GPU for NCCL."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sum_values(values: Mapping[str, float]) -> dict[str, float]:
    """Each value summed over the ranks (every rank passes the same keys)."""
    if not active():
        return dict(values)
    keys = list(values)
    buffer = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
    buffer = buffer.to(_comm_device())
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
    return dict(zip(keys, buffer.cpu().tolist(), strict=True))


def max_value(value: float) -> float:
    """The largest of the ranks' ``value``."""
    if not active():
        return value
    buffer = torch.tensor([float(value)], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(buffer, op=dist.ReduceOp.MAX)
    return float(buffer.item())


def sum_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over the ranks (a new tensor on ``tensor``'s device and dtype); each
    rank fills its own rows and leaves zeros elsewhere, so the sum is the whole."""
    if not active():
        return tensor
    buffer = tensor.detach().to(_comm_device(), copy=True)
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
    return buffer.to(tensor.device)


def gather_objects(obj: T) -> list[T]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in a plain run."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: T) -> T:
    """Rank 0's ``obj`` on every rank."""
    if not active():
        return obj
    box = [obj if rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@torch.no_grad()
def sum_gradients(model: torch.nn.Module) -> None:
    """Sum every parameter's gradient over the ranks, in place (what DDP's all-reduce does, once
    per optimizer step, after the accumulation); a no-op for an FSDP2 module, whose backward
    already summed them into its shards.

    Each rank's loss is already its share of the global batch mean (the normalizer is the
    global one), so the sum is the gradient of the batch mean. A parameter that got a gradient
    on some rank and none on another counts zeros there; one with a gradient on no rank keeps
    none, as in one process. One flat buffer per dtype: one collective each."""
    if not active() or is_sharded(model):  # FSDP2 has reduce-scattered them
        return
    params = [p for p in model.parameters() if p.requires_grad]
    present = torch.tensor([p.grad is not None for p in params], dtype=torch.float64)
    present = present.to(_comm_device())
    dist.all_reduce(present, op=dist.ReduceOp.MAX)
    used = [p for p, flag in zip(params, present.cpu().tolist(), strict=True) if flag]
    for p in used:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for p in used:
        by_dtype.setdefault(p.grad.dtype, []).append(p)
    for group in by_dtype.values():
        flat = torch.cat([p.grad.reshape(-1) for p in group]).to(_comm_device())
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat = flat.to(group[0].grad.device)
        offset = 0
        for p in group:
            n = p.grad.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n


def share(items: Sequence[T], parts: int | None = None, index: int | None = None) -> Sequence[T]:
    """This rank's contiguous share of ``items`` (``parts`` ranks, this one ``index``; by default
    the run's world): equal shares when ``parts`` divides the length, else the first ranks hold
    one more. In a plain run, all of ``items``."""
    parts = world_size() if parts is None else parts
    index = rank() if index is None else index
    base, extra = divmod(len(items), parts)
    start = index * base + min(index, extra)
    return items[start : start + base + (1 if index < extra else 0)]


def check_divides(cfg: Any, world: int, *names: str, what: str = "") -> None:
    """Raise :class:`ConfigError` unless each setting ``cfg.<name>`` is a multiple of the world
    size ``world``; the message names the setting, its value, the world size and ``what`` (how
    the setting is split over the ranks)."""
    for name in names:
        value = getattr(cfg, name)
        if value % world != 0:
            raise ConfigError(
                f"setting {name!r} ({value}) must be a multiple of the world size ({world} "
                f"processes under torchrun){what}; change it or launch "
                f"--nproc_per_node x --nnodes that divides it"
            )
