"""`rrl` with a record of each run: what tools/gpu/gpu_study.py puts first on PATH.

Runs ``reasoning_core.runtime.cli.main`` in this process with the given arguments, then
appends one JSON line to the file named by ``$RRL_JOB_STATS``::

    {"argv": [...], "out": <--out value>, "rc": <exit status>, "wall_seconds": ...,
     "cuda_peak_allocated_gib": ..., "cuda_peak_reserved_gib": ...,
     "nvml_peak_used_gib": ..., "nvml_start_used_gib": ...}

The trainers do not log GPU memory, and Snakemake's benchmark files hold the process's max RSS
only, so the peak is read here: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``
(the PyTorch allocator of this process: policy, optimizer state, activations, HF engine) and,
when ``pynvml`` (nvidia-ml-py) is importable, the device's used memory sampled every 0.2 s
(every process on GPU 0, the CUDA context included). On a CPU the memory fields are null.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

GIB = 2**30


class NvmlPeak:
    """The largest ``nvmlDeviceGetMemoryInfo(GPU 0).used`` seen by a sampling thread."""

    def __init__(self, period: float = 0.2) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._pynvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.start = self.peak = self._used()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._thread.start()

    def _used(self) -> int:
        return int(self._pynvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _run(self, period: float) -> None:
        while not self._stop.wait(period):
            self.peak = max(self.peak, self._used())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.peak = max(self.peak, self._used())


def _nvml() -> NvmlPeak | None:
    try:
        return NvmlPeak()
    except Exception:  # no pynvml, no driver, no GPU: the torch numbers (or nulls) remain
        return None


def _out_dir(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--out="):
            return arg.partition("=")[2]
    return None


def record(argv: list[str], rc: int, seconds: float, nvml: NvmlPeak | None) -> dict:
    entry = {"argv": argv, "out": _out_dir(argv), "rc": rc, "wall_seconds": round(seconds, 3)}
    entry["cuda_peak_allocated_gib"] = entry["cuda_peak_reserved_gib"] = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        entry["cuda_peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
        entry["cuda_peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / GIB, 3)
    entry["nvml_start_used_gib"] = None if nvml is None else round(nvml.start / GIB, 3)
    entry["nvml_peak_used_gib"] = None if nvml is None else round(nvml.peak / GIB, 3)
    path = os.environ.get("RRL_JOB_STATS")
    if path:
        with open(path, "a", encoding="utf-8") as f:  # one short line, appended at once
            f.write(json.dumps(entry) + "\n")
    return entry


def main(argv: list[str]) -> int:
    nvml = _nvml() if argv and argv[0] not in {"plot", "summary", "sft-data"} else None
    start = time.perf_counter()
    rc = 1  # stays 1 when the command dies of an exception
    try:
        from reasoning_core.runtime.cli import main as rrl

        rc = int(rrl(argv) or 0)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        if nvml is not None:
            nvml.stop()
        record(argv, rc, time.perf_counter() - start, nvml)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
