"""The check's harness: named sections, each isolated (its error recorded, the next one runs),
a JSON report rewritten atomically after each, a time budget and a watchdog."""

from __future__ import annotations

import json
import math
import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from reasoning_core.runtime.gpu_check.device import OOM_ERRORS, free_memory

# Test hook: a comma-separated list of section names that raise a simulated CUDA out-of-memory error
# when they start (tests/runtime/gpu_check/test_gpu_check.py checks the others still run).
ENV_FAIL_SECTIONS = "RRL_GPU_CHECK_FAIL"


def log(message: str) -> None:
    print(f"[gpu-check] {message}", flush=True)


def json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


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
        text = json.dumps(json_safe(self.report), indent=2) + "\n"
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
            log(f"ABORT: {self.report['aborted']}; partial JSON written to {self.out}")
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
            log(f"{self.elapsed():6.1f}s {label}: skipped (time budget)")
            return None
        self.current = label
        log(f"{self.elapsed():6.1f}s {label} ...")
        start = time.perf_counter()
        error = None
        try:
            if name in os.environ.get(ENV_FAIL_SECTIONS, "").split(","):
                raise OOM_ERRORS[0](f"simulated out of memory in {label} ({ENV_FAIL_SECTIONS})")
            result = fn()
        except Exception as exc:  # noqa: BLE001 - one section's failure must not lose the rest
            error = {
                "error": f"{type(exc).__name__}: {str(exc)[:1500]}",
                "oom": isinstance(exc, OOM_ERRORS) or "out of memory" in str(exc),
                "traceback": traceback.format_exc()[-3000:],
            }
        if error is not None:  # outside the except block: the traceback's frames are gone
            result = error
            self.failed.append(label)
            if self.model is not None:
                for p in self.model.parameters():
                    p.grad = None
            free_memory(self.device)
            log(f"{self.elapsed():6.1f}s {label}: FAILED {error['error'][:300]}")
        result["section_seconds"] = time.perf_counter() - start
        self.set(name, result, parent)
        if error is None:
            log(f"{self.elapsed():6.1f}s {label}: {summary_line(result)}")
        self.current = None
        return None if error is not None else result


def fmt(value: Any, spec: str, scale: float = 1.0, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value * scale:{spec}}{suffix}"


def summary_line(r: dict[str, Any]) -> str:
    if "seconds_per_step" in r:
        return (
            f"{r['seconds_per_step']:.3f} s/step, {r['tokens_per_s']:,.0f} tok/s, "
            f"{r['model_tflops_per_s']:.4g} TFLOP/s, MFU {fmt(r['mfu'], '.1f', 100, '%')} of "
            f"spec, {fmt(r['mfu_vs_measured_matmul'], '.1f', 100, '%')} of measured matmul, "
            f"peak {fmt(r['peak_memory_gib'], '.1f', suffix=' GiB')}"
        )
    if "tflops_per_s" in r:
        return f"{r['tflops_per_s']:.4g} TFLOP/s ({r['iterations']} products of {r['n']}³)"
    if "naive_extra_gib" in r:
        return (
            f"extra memory naive {fmt(r['naive_extra_gib'], '.2f', suffix=' GiB')}, chunked "
            f"{fmt(r['chunked_extra_gib'], '.2f', suffix=' GiB')}, ratio {fmt(r['ratio'], '.3f')}"
        )
    if "new_tokens_per_s" in r:
        return f"{r['new_tokens_per_s']:,.0f} new tok/s ({r['seconds']:.1f} s)"
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in r.items()
        if not isinstance(v, dict)
    )[:400]
