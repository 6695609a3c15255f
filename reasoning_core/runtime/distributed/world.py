"""The process group of a ``torchrun`` launch, and this process's place in it.

``torchrun --nproc_per_node N [--nnodes M ...] --no-python rrl <command> ...`` starts N x M
processes, each with ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (and the rendezvous's
``MASTER_ADDR``/``MASTER_PORT``) in its environment. :func:`init` reads them and joins the
group: gloo when the policy runs on a CPU, NCCL on CUDA (each process on GPU ``LOCAL_RANK``).
A ``WORLD_SIZE`` of 1 (or none) is a plain run: nothing is initialized, :func:`rank` is 0 and
:func:`world_size` 1.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from reasoning_core.runtime.errors import ConfigError

# The variables torchrun sets in each process it starts.
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_RANK = "RANK"
ENV_LOCAL_RANK = "LOCAL_RANK"
# How long a collective waits for the other ranks before the run fails: long enough for rank 0
# to evaluate alone (the others wait at the next collective), short enough not to hang a job.
TIMEOUT = timedelta(minutes=60)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None


def launched_world_size() -> int:
    """The world size a launcher asked for (``WORLD_SIZE``, 1 when unset), before :func:`init`."""
    return _env_int(ENV_WORLD_SIZE, 1)


def launched_rank() -> int:
    """This process's rank as the launcher set it (``RANK``, 0 when unset)."""
    return _env_int(ENV_RANK, 0)


def local_rank() -> int:
    """This process's rank on its node (``LOCAL_RANK``, 0 when unset): its GPU's index."""
    return _env_int(ENV_LOCAL_RANK, 0)


def active() -> bool:
    """True when this process is one rank of a group of more than one."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 in a plain run)."""
    return dist.get_rank() if active() else 0


def world_size() -> int:
    """Processes in the run (1 in a plain run)."""
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """True on rank 0, the one process that writes the run folder (and in a plain run)."""
    return rank() == 0


def backend_for(device: str) -> str:
    """gloo for a policy on the CPU, nccl for one on CUDA (``device`` as the setting reads:
    ``cpu``, ``cuda``, ``cuda:N`` or ``auto``)."""
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def device_name(device: str) -> str:
    """The device this rank's policy runs on: a CUDA setting (``cuda``, ``cuda:N``, ``auto`` on a
    GPU machine) becomes ``cuda:LOCAL_RANK``, one GPU per process; the CPU stays the CPU."""
    if not active() or backend_for(device) != "nccl":
        return device
    return f"cuda:{local_rank()}"


def init(device: str) -> bool:
    """Join the process group a launcher asked for (``WORLD_SIZE`` > 1) with the backend of
    ``device`` (:func:`backend_for`); True when this process is now one rank of several. A plain
    run, or one already initialized, is left as it is."""
    if launched_world_size() <= 1:
        return False
    if dist.is_initialized():
        return True
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend=backend, timeout=TIMEOUT)
    _joined.append(True)
    return True


# Whether :func:`init` made the process group. Only that group is ours to tear down: an
# in-process vLLM engine makes its own one-process group, which later engines in the same
# process still use.
_joined: list[bool] = []


def shutdown(*, wait: bool = True) -> None:
    """Leave the process group :func:`init` joined (with ``wait``, after a last barrier, so no
    rank tears it down while another still sums; without, at once: the run failed); a no-op in
    a plain run, whatever group another library made."""
    if _joined and dist.is_available() and dist.is_initialized():
        if wait and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()
    _joined.clear()


def barrier() -> None:
    """Wait for every rank; a no-op in a plain run."""
    if active():
        dist.barrier()
