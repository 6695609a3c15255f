"""What the SFT, expert-iteration and GRPO trainers share.

* :class:`CommonConfig`: model, task, placement (device, dtype, threads, engine), optimizer and
  schedule, evaluation and saving settings. Each trainer's config dataclass extends it.
* :func:`load_policy`, :func:`make_optimizer`, :func:`make_scheduler`.
* :class:`RunContext`: the run folder (``config.yaml``, ``metrics.jsonl``, generations,
  ``state/``, ``checkpoint/``, ``done.json``), wall-clock bookkeeping, resume.
* :class:`Evaluator`: weight sync + sampled evaluation on a fixed set of eval problems.
* :func:`sft_update`: one optimizer step of SFT (negative log-likelihood of the responses) on a
  batch of (prompt, response) pairs, split into micro batches (gradient accumulation).
* helpers to tokenize a batch once and cut it into column-trimmed micro batches.
* :class:`MicroBatchSize`: the micro-batch size a run works with, made smaller for the rest of
  the run when a GPU runs out of memory (setting ``oom_backoff``).

Randomness is keyed by step (question sampling, data order and rollout seeds are functions of
``(seed, step)``), so a resumed run draws exactly what an uninterrupted run would.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np
import torch

from reasoning_core.runtime.config import ConfigError, check_same_settings, save_config
from reasoning_core.runtime.metrics import MetricsWriter, write_generations, write_json_atomic

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ENV_EXIT_AFTER = "RRL_EXIT_AFTER_STEP"  # test hook: hard-exit right after this optimizer step
# Settings a resumed run may change: where and how it runs, not what it computes.
RESUME_MAY_CHANGE = {
    "device", "num_threads", "progress", "oom_backoff", "gradient_checkpointing",
    "attn_implementation", "engine_kwargs", "save_every", "compile",
}  # fmt: skip


@dataclass
class CommonConfig:
    """Settings shared by every trainer. Defaults follow the CS336 handout where it gives one."""

    # What to train and on which task.
    model_path: str = ""
    task: str = "math"
    train_split: str = "train"
    eval_split: str = "test"
    template: str = "r1_zero"
    seed: int = 0
    # Placement (GPU-friendly knobs; CPU is the default).
    device: str = "cpu"  # "cpu", "cuda", "cuda:N" or "auto"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    num_threads: int = 1  # torch threads on CPU: 2 threads ran ~3x slower than 1 here
    gradient_checkpointing: bool = False
    # On a CUDA out-of-memory error in a training or scoring pass, redo that optimizer step
    # (or pass) with a smaller micro batch (a divisor of the last one, so the gradient is the
    # same batch mean) and keep that size for the rest of the run. Off: the error stops the run.
    oom_backoff: bool = True
    # "auto": FlashAttention 2 on a GPU in bf16/fp16 when flash-attn is installed, else SDPA.
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = "auto"
    # Run the training and scoring forwards (log-probs, entropy) through torch.compile; sampling
    # and evaluation stay eager. Measured on an H200 (benchmarks/RESULTS.md): SFT steps 1.15-1.18x
    # the eager tokens/s at micro batch 4-16, 2.3x at micro batch 2 with gradient checkpointing,
    # after 55-90 s of compilation per micro-batch shape.
    compile: bool = False
    # Rollout engine. vLLM runs in-process: colocated on the policy's GPU (give it a memory
    # share with engine_kwargs.gpu_memory_utilization) or, on two GPUs, with the policy on
    # device "cuda:1" while vLLM takes cuda:0 (see README, "GPU runs").
    # "static": preallocated KV cache and CUDA-graph decode steps, no vLLM needed.
    engine: Literal["hf", "static", "vllm"] = "hf"
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    # Optimizer and schedule (AdamW).
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    adam_eps: float = 1e-8
    lr_scheduler: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    max_grad_norm: float = 1.0
    # Evaluation (sampled, fixed problems, fixed seed).
    eval_examples: int | None = 512
    eval_every: int = 0  # in the trainer's own unit of steps; 0 = only at start and end
    eval_at_start: bool = True
    eval_temperature: float = 1.0
    eval_top_p: float = 1.0
    eval_max_tokens: int = 1024
    eval_seed: int = 0  # same default as `rrl eval`, so step 0 matches the zero-shot run
    eval_batch_size: int | None = 256  # prompts per engine call, as `rrl eval` (None: all at once)
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    # Saving.
    save_every: int = 10  # resumable state every N steps of the trainer's unit; 0 = never
    save_checkpoint: bool = True
    progress: bool = True

    def validate(self) -> None:
        """Fail before any work with a message that names the setting."""
        if not self.model_path:
            raise ConfigError("setting 'model_path' is required (a Hugging Face model folder)")
        from reasoning_core.runtime.checkpoint import check_model_folder

        # config.json, complete weights and a tokenizer, each named when missing or damaged.
        check_model_folder(self.model_path)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"setting 'betas' must be two numbers in [0, 1), got {self.betas}")
        _positive(self, "lr", "num_threads", "eval_max_tokens")
        _non_negative(self, "warmup_steps", "eval_every", "save_every", "weight_decay")
        if self.eval_examples is not None and self.eval_examples < 1:
            raise ConfigError("setting 'eval_examples' must be >= 1 (or null for all)")
        if self.max_grad_norm <= 0:
            raise ConfigError("setting 'max_grad_norm' must be > 0")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError("setting 'min_lr_ratio' must lie in [0, 1]")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"setting 'device' is {self.device!r} but no CUDA GPU is available")
        import envs

        try:
            task = envs.get_task(self.task)
            task.check_template(self.template)
            task.check_split(self.train_split)
            task.check_split(self.eval_split)
            check_pair = getattr(task, "check_split_pair", None)
            if check_pair is not None:
                check_pair(self.train_split, self.eval_split)
        except ValueError as exc:
            raise ConfigError(f"setting 'task'/'template'/'*_split': {exc}") from exc


def _positive(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"setting {name!r} must be > 0, got {getattr(cfg, name)}")


def _non_negative(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"setting {name!r} must be >= 0, got {getattr(cfg, name)}")


def check_at_least_one(cfg: Any, *names: str) -> None:
    """Raise ConfigError unless each ``cfg.<name>`` (a count) is >= 1."""
    for name in names:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"setting {name!r} must be >= 1, got {getattr(cfg, name)}")


def check_divisible(cfg: Any, numerator: str, denominator: str) -> None:
    """Raise ConfigError unless ``cfg.<numerator>`` is a positive multiple of ``cfg.<denominator>``."""
    a, b = getattr(cfg, numerator), getattr(cfg, denominator)
    if b <= 0:
        raise ConfigError(f"setting {denominator!r} must be > 0, got {b}")
    if a <= 0 or a % b != 0:
        raise ConfigError(
            f"setting {numerator!r} ({a}) must be a positive multiple of {denominator!r} ({b})"
        )


# ---------------------------------------------------------------------------------------------
# Model, optimizer, schedule


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def setup_torch(cfg: CommonConfig) -> None:
    """Threads and seeds. One thread on CPU unless configured otherwise."""
    torch.set_num_threads(cfg.num_threads)
    seed_everything(cfg.seed)


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


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
        import importlib.util

        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
    return "sdpa"


def load_policy(cfg: CommonConfig):
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
    if cfg.compile:
        # In the instance dict, not registered as a submodule: the compiled wrapper (which
        # shares the parameters) must not enter the state dict or the checkpoints.
        model.__dict__[_COMPILED_FORWARD] = torch.compile(model)
    return model, tokenizer


_COMPILED_FORWARD = "_rrl_compiled_forward"


def training_forward(model):
    """What the training and scoring passes call: the compiled wrapper when ``compile`` is
    on for this policy, else the model itself."""
    return model.__dict__.get(_COMPILED_FORWARD, model)


def make_optimizer(model: torch.nn.Module, cfg: CommonConfig) -> torch.optim.AdamW:
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
    ``min_ratio`` at ``total_steps``."""
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


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: CommonConfig, total_steps: int):
    def factor(step: int) -> float:
        return lr_factor(
            step,
            total_steps=total_steps,
            warmup_steps=cfg.warmup_steps,
            kind=cfg.lr_scheduler,
            min_ratio=cfg.min_lr_ratio,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def step_rng(seed: int, *keys: int) -> np.random.Generator:
    """A generator that depends only on ``(seed, *keys)``: resumable without saved state."""
    return np.random.default_rng([seed, *keys])


def step_seed(seed: int, *keys: int) -> int:
    """A 31-bit sampling seed derived from ``(seed, *keys)``."""
    return int(step_rng(seed, *keys).integers(0, 2**31 - 1))


# ---------------------------------------------------------------------------------------------
# Batches: tokenize once, cut into micro batches trimmed to their own longest row


def tokenize_pairs(prompts: list[str], responses: list[str], tokenizer) -> dict[str, torch.Tensor]:
    """``tokenize_prompt_and_output`` on the whole batch, plus each row's used length."""
    from reasoning_core import tokenize_prompt_and_output

    batch = tokenize_prompt_and_output(
        prompt_strs=prompts, output_strs=responses, tokenizer=tokenizer
    )
    mask = batch["response_mask"].bool()
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    # Used length of a row = one past its last response token (responses end the sequence).
    lengths = torch.where(mask, positions + 1, torch.zeros_like(positions)).amax(dim=1)
    batch["lengths"] = lengths
    batch["response_mask"] = mask
    return batch


def micro_batches(
    batch: dict[str, torch.Tensor], rows: list[int] | torch.Tensor, size: int
) -> Iterator[dict]:
    """Slices of ``rows`` of ``size`` rows each; columns trimmed to the longest row of the slice."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    for start in range(0, len(rows), size):
        idx = rows[start : start + size]
        width = max(1, int(batch["lengths"][idx].max()))
        yield {
            "rows": idx,
            "input_ids": batch["input_ids"][idx, :width],
            "labels": batch["labels"][idx, :width],
            "response_mask": batch["response_mask"][idx, :width],
        }


T = TypeVar("T")


def smaller_micro_batch(size: int) -> int:
    """The largest proper divisor of ``size`` (``size`` over its smallest prime factor): every
    batch the old size divided evenly, the new one divides too (8 -> 4, 6 -> 3, 5 -> 1)."""
    if size <= 1:
        raise ValueError(f"no micro batch smaller than {size}")
    factor = next((f for f in range(2, math.isqrt(size) + 1) if size % f == 0), size)
    return size // factor


class MicroBatchSize:
    """The micro-batch size of a run's training and scoring passes.

    :meth:`call` runs ``fn(size)``. When that raises ``torch.OutOfMemoryError`` (a CUDA
    allocation failed) and ``backoff`` is on, the partial work is dropped (``reset``, e.g. the
    accumulated gradients, then the CUDA cache is emptied) and ``fn`` runs again with
    :func:`smaller_micro_batch` of the size, which the run keeps from then on. The optimizer
    step is the same batch mean either way: only the accumulation is split finer. At micro
    batch 1 the error is raised with a note on what else frees memory.
    """

    def __init__(self, size: int, *, backoff: bool = True, name: str = "train") -> None:
        if size < 1:
            raise ValueError(f"micro batch size must be >= 1, got {size}")
        self.size = int(size)
        self.initial = int(size)
        self.backoff = backoff
        self.name = name
        self.failed_sizes: list[int] = []  # sizes that ran out of memory, in order

    @property
    def changed(self) -> bool:
        return self.size != self.initial

    def call(self, fn: Callable[[int], T], *, reset: Callable[[], None] | None = None) -> T:
        while True:
            size = self.size
            try:
                return fn(size)
            except torch.OutOfMemoryError as exc:
                if not self.backoff or size == 1:
                    exc.add_note(
                        f"[{self.name}] out of memory at micro batch {size}"
                        + ("" if self.backoff else " (setting 'oom_backoff' is off)")
                        + ": turn on 'gradient_checkpointing', lower 'sampling_max_tokens' or"
                        " the rollout engine's memory share (engine_kwargs."
                        "gpu_memory_utilization), or use a larger GPU"
                    )
                    raise
                reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                self.failed_sizes.append(size)
            # Outside the except block: the traceback, and the activations its frames held,
            # are gone before the cache is emptied.
            if reset is not None:
                reset()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.size = smaller_micro_batch(size)
            print(
                f"[{self.name}] CUDA out of memory at micro batch {size} ({reason}); redoing "
                f"this pass with micro batch {self.size}, kept for the rest of the run",
                file=sys.stderr,
                flush=True,
            )


def with_micro_batch(
    size: int | MicroBatchSize, fn: Callable[[int], T], *, reset: Callable[[], None] | None = None
) -> T:
    """``fn(size)`` for a plain size; through :meth:`MicroBatchSize.call` (out-of-memory
    back-off) for a :class:`MicroBatchSize`."""
    if isinstance(size, MicroBatchSize):
        return size.call(fn, reset=reset)
    return fn(size)


def policy_log_probs(model, micro: dict, device: torch.device, *, with_entropy: bool = True):
    """Log-probs (and token entropy) of ``micro``'s labels under ``model``, on ``device``."""
    from reasoning_core import get_response_log_probs

    out = get_response_log_probs(
        model=training_forward(model),
        input_ids=micro["input_ids"].to(device),
        labels=micro["labels"].to(device),
        return_token_entropy=with_entropy,
    )
    return out["log_probs"], out.get("token_entropy")


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor) -> tuple[float, int]:
    """(sum over masked tokens, token count) as Python numbers, for running means."""
    mask = mask.to(values.device, values.dtype)
    return float((values.detach() * mask).sum()), int(mask.sum())


def sft_update(
    model,
    optimizer: torch.optim.Optimizer,
    scheduler,
    batch: dict[str, torch.Tensor],
    rows: list[int] | torch.Tensor,
    *,
    micro_batch_size: int | MicroBatchSize,
    device: torch.device,
    max_grad_norm: float,
    normalize_constant: float = 1.0,
) -> dict[str, float]:
    """One AdamW step of SFT on ``rows`` of a tokenized batch (gradient accumulation over micro
    batches of ``micro_batch_size``; exact batch mean even when the last one is smaller). A
    :class:`MicroBatchSize` redoes the accumulation with smaller micro batches on CUDA
    out-of-memory.

    Returns ``loss`` (per-example summed NLL / normalize_constant, batch mean), ``grad_norm``
    (before clipping), ``entropy`` (mean token entropy of the responses), ``response_length``
    (mean response tokens) and ``lr`` (the rate this step used)."""
    from reasoning_core import sft_microbatch_train_step

    rows = torch.as_tensor(rows, dtype=torch.long)
    n = len(rows)
    lr = optimizer.param_groups[0]["lr"]

    def accumulate(size: int) -> tuple[float, float, int]:
        optimizer.zero_grad(set_to_none=True)
        total_loss, ent_sum, ent_count = 0.0, 0.0, 0
        for micro in micro_batches(batch, rows, size):
            log_probs, entropy = policy_log_probs(model, micro, device)
            mask = micro["response_mask"].to(device)
            # Scale so that the accumulated gradient is the mean over all n examples.
            loss, _ = sft_microbatch_train_step(
                policy_log_probs=log_probs,
                response_mask=mask,
                gradient_accumulation_steps=1,
                normalize_constant=normalize_constant * n / len(micro["rows"]),
            )
            total_loss += float(loss.detach())
            s, c = masked_token_mean(entropy, mask)
            ent_sum, ent_count = ent_sum + s, ent_count + c
        return total_loss, ent_sum, ent_count

    reset = lambda: optimizer.zero_grad(set_to_none=True)  # noqa: E731
    total_loss, ent_sum, ent_count = with_micro_batch(micro_batch_size, accumulate, reset=reset)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return {
        "loss": total_loss,
        "grad_norm": float(grad_norm),
        "entropy": ent_sum / max(1, ent_count),
        "response_length": float(batch["response_mask"][rows].sum(dim=1).float().mean()),
        "lr": lr,
    }


@torch.no_grad()
def response_entropy(
    model, batch: dict, device: torch.device, micro_batch_size: int | MicroBatchSize
) -> float:
    """Mean token entropy of the responses of a tokenized batch under ``model`` (no gradient)."""
    was_training = model.training
    model.eval()
    rows = list(range(batch["input_ids"].shape[0]))

    def score(size: int) -> tuple[float, int]:
        total, count = 0.0, 0
        for micro in micro_batches(batch, rows, size):
            _, entropy = policy_log_probs(model, micro, device)
            s, c = masked_token_mean(entropy, micro["response_mask"])
            total, count = total + s, count + c
        return total, count

    try:
        total, count = with_micro_batch(micro_batch_size, score)
    finally:
        model.train(was_training)
    return total / max(1, count)


# ---------------------------------------------------------------------------------------------
# Rollouts and grading


def check_sampling(cfg: Any) -> None:
    """Validate the rollout sampling settings (``sampling_*``) that EI and GRPO share."""
    if not 0 <= cfg.sampling_min_tokens <= cfg.sampling_max_tokens:
        raise ConfigError("setting 'sampling_min_tokens' must lie in [0, sampling_max_tokens]")
    if cfg.sampling_temperature <= 0:
        raise ConfigError("setting 'sampling_temperature' must be > 0 (sampled rollouts)")


def rollout_params(cfg: Any):
    """The ``SamplingParams`` of training rollouts: ``group_size`` samples per prompt from the
    ``sampling_*`` settings, stop strings kept in the output (the seed is set per step)."""
    from reasoning_core.runtime.rollout import SamplingParams

    return SamplingParams(
        n=cfg.group_size,
        temperature=cfg.sampling_temperature,
        top_p=cfg.sampling_top_p,
        max_tokens=cfg.sampling_max_tokens,
        min_tokens=cfg.sampling_min_tokens,
        stop=list(cfg.stop),
        include_stop_str_in_output=True,
    )


def make_rollout_engine(cfg: CommonConfig, model, tokenizer):
    from reasoning_core.runtime.rollout import make_engine

    return make_engine(cfg.engine, model, tokenizer, **cfg.engine_kwargs)


def grade(reward_fn, responses: list[str], ground_truths: list[str]) -> list[dict]:
    import envs

    return envs.grade_batch(reward_fn, responses, ground_truths)


def reward_means(scores: list[dict]) -> dict[str, float]:
    n = max(1, len(scores))
    return {
        "reward": sum(s["reward"] for s in scores) / n,
        "format_reward": sum(s["format_reward"] for s in scores) / n,
        "answer_reward": sum(s["answer_reward"] for s in scores) / n,
    }


# ---------------------------------------------------------------------------------------------
# Evaluation


class Evaluator:
    """Sampled evaluation on a fixed list of eval problems with a fixed seed."""

    def __init__(self, cfg: CommonConfig, task, tokenizer):
        from reasoning_core.runtime.rollout import SamplingParams

        self.cfg = cfg
        self.task = task
        self.tokenizer = tokenizer
        self.examples = task.load(cfg.eval_split, limit=cfg.eval_examples)
        self.params = SamplingParams(
            n=1,
            temperature=cfg.eval_temperature,
            top_p=cfg.eval_top_p,
            max_tokens=cfg.eval_max_tokens,
            stop=list(cfg.stop),
            include_stop_str_in_output=True,
            seed=cfg.eval_seed,
        )

    def __call__(self, engine, model, step: int, run: RunContext) -> dict[str, Any]:
        """Sync weights, evaluate, write generations, log an ``eval`` line; return it."""
        from reasoning_core.runtime.evaluate import evaluate_policy

        t0 = time.perf_counter()
        was_training = model.training
        model.eval()
        engine.sync_weights(model)
        t1 = time.perf_counter()
        result = evaluate_policy(
            engine,
            self.examples,
            self.task,
            self.cfg.template,
            self.params,
            batch_size=self.cfg.eval_batch_size,
            progress=self.cfg.progress,  # a full MATH eval takes minutes even on a GPU
        )
        model.train(was_training)
        t2 = time.perf_counter()
        summary = result.summary
        write_generations(run.out, step, result.records)
        values = {
            "accuracy": summary["answer_reward"],
            "format_reward": summary["format_reward"],
            "reward": summary["reward"],
            "num_examples": summary["num_examples"],
            "response_length": summary["response_length"],
            "time/sync": t1 - t0,
            "time/eval": t2 - t1,
        }
        record = run.log(values, step=step, split="eval")
        run.last_eval = record
        return record


# ---------------------------------------------------------------------------------------------
# The run folder


def is_done(out: str | Path) -> bool:
    """True when ``out`` holds a finished run (its ``done.json`` is written last)."""
    return (Path(out) / "done.json").is_file()


def start_run(cfg: CommonConfig, out: str | Path, method: str) -> tuple[torch.device, Any] | None:
    """How every trainer starts: None (after saying so) when ``out`` is already complete;
    otherwise set threads and seeds and return ``(device, task)``."""
    import envs

    if is_done(out):
        print(f"[{method}] {out} is already complete (done.json)", file=sys.stderr)
        return None
    setup_torch(cfg)
    return resolve_device(cfg.device), envs.get_task(cfg.task)


def load_questions(cfg: Any, task, need: int, message: str) -> list:
    """The training questions (``train_split``, ``train_examples`` of them); ConfigError with
    ``message`` (``{n}``: the number loaded) when there are fewer than ``need``."""
    questions = task.load(cfg.train_split, limit=cfg.train_examples)
    if len(questions) < need:
        raise ConfigError(message.format(n=len(questions)))
    return questions


class RunContext:
    """A run's output folder, metrics and wall clock; resume bookkeeping.

    ``out/config.yaml`` is written on start; ``out/done.json`` last. If ``done.json`` exists
    the run is complete and :attr:`done` is True (the trainer returns at once)."""

    def __init__(self, cfg: Any, out: str | Path, method: str):
        self.cfg = cfg
        self.method = method
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.done = (self.out / "done.json").is_file()
        self.state_dir = self.out / "state"
        self.start = time.perf_counter()
        self.prior_elapsed = 0.0
        self.last_eval: dict[str, Any] | None = None
        self.metrics: MetricsWriter | None = None
        if self.done:
            return
        from reasoning_core.runtime.checkpoint import find_state

        if find_state(self.state_dir) is not None:  # about to resume: same experiment only
            check_same_settings(
                self.out / "config.yaml",
                cfg,
                may_change=RESUME_MAY_CHANGE,
                what=str(self.state_dir),
            )
        save_config(cfg, self.out)
        self.metrics = MetricsWriter(self.out)
        exit_after = os.environ.get(ENV_EXIT_AFTER)
        self.exit_after = int(exit_after) if exit_after else None

    def elapsed(self) -> float:
        return self.prior_elapsed + time.perf_counter() - self.start

    def log(self, values: dict[str, Any], *, step: int, split: str) -> dict[str, Any]:
        values = dict(values)
        values["time/elapsed"] = self.elapsed()
        return self.metrics.log(values, step=step, split=split)

    def resume(self, model, optimizer, scheduler) -> dict[str, Any] | None:
        """Restore the last saved state if there is one; else start the metrics afresh."""
        from reasoning_core.runtime.checkpoint import load_state

        counters = load_state(self.state_dir, model=model, optimizer=optimizer, scheduler=scheduler)
        if counters is None:
            self.metrics.truncate(0)
            return None
        self.metrics.truncate(int(counters["metrics_offset"]))
        self.prior_elapsed = float(counters.get("elapsed", 0.0))
        self.last_eval = counters.get("last_eval")
        print(f"[{self.method}] resumed from {self.state_dir} at {counters}", file=sys.stderr)
        return counters

    def save_state(self, model, optimizer, scheduler, **counters: Any) -> None:
        from reasoning_core.runtime.checkpoint import save_state

        counters = dict(counters)
        counters["metrics_offset"] = self.metrics.offset
        counters["elapsed"] = self.elapsed()
        counters["last_eval"] = self.last_eval
        save_state(
            self.state_dir, model=model, optimizer=optimizer, scheduler=scheduler, counters=counters
        )

    def maybe_exit(self, step: int) -> None:
        """Test hook: ``RRL_EXIT_AFTER_STEP=k`` kills the process (no cleanup) after step k."""
        if self.exit_after is not None and step >= self.exit_after:
            os._exit(3)

    def finish(self, model, tokenizer, *, step: int, extra: dict[str, Any] | None = None) -> dict:
        """Final checkpoint, ``done.json``; drop the resume state."""
        import shutil

        from reasoning_core.runtime.checkpoint import save_checkpoint

        if self.cfg.save_checkpoint:
            save_checkpoint(model, tokenizer, self.out / "checkpoint")
        last = self.last_eval or {}
        done = {
            "method": self.method,
            "step": step,
            "eval_accuracy": last.get("accuracy"),
            "eval_format_reward": last.get("format_reward"),
            "eval_examples": last.get("num_examples"),
            "wall_seconds": self.elapsed(),
        }
        done.update(extra or {})
        write_json_atomic(self.out / "done.json", done)
        self.metrics.close()
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        return done


class Training(NamedTuple):
    """What a trainer works with once set up (see :func:`setup_training`)."""

    run: RunContext
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    counters: dict[str, Any] | None  # the resumed counters; None on a fresh start
    engine: Any
    evaluator: Evaluator


def setup_training(cfg: CommonConfig, out: str | Path, method: str, task, total_steps: int):
    """Open the run folder, load the policy, build AdamW and its ``total_steps`` schedule,
    resume from ``out/state`` if there is one, start the rollout engine and the evaluator, and
    evaluate at step 0 on a fresh start (``eval_at_start``)."""
    run = RunContext(cfg, out, method)
    model, tokenizer = load_policy(cfg)
    optimizer = make_optimizer(model, cfg)
    scheduler = make_scheduler(optimizer, cfg, total_steps)
    counters = run.resume(model, optimizer, scheduler)
    engine = make_rollout_engine(cfg, model, tokenizer)
    evaluator = Evaluator(cfg, task, tokenizer)
    if counters is None and cfg.eval_at_start:
        evaluator(engine, model, 0, run)
    return Training(run, model, tokenizer, optimizer, scheduler, counters, engine, evaluator)


def after_iteration(t: Training, *, done: int, total: int, step: int, **counters: Any) -> None:
    """After iteration ``done`` of ``total`` (``step``: the optimizer step reached): evaluate at
    the last one and every ``eval_every``; save resumable state (``counters``) every
    ``save_every`` but the last (the finished run's checkpoint follows)."""
    cfg = t.run.cfg
    is_last = done == total
    if is_last or (cfg.eval_every and done % cfg.eval_every == 0):
        t.evaluator(t.engine, t.model, step, t.run)
    if not is_last and cfg.save_every and done % cfg.save_every == 0:
        t.run.save_state(t.model, t.optimizer, t.scheduler, **counters)


def finish_training(t: Training, *, step: int, extra: dict[str, Any] | None = None) -> dict:
    """Evaluate at ``step`` unless that was just done, then finish the run folder."""
    if t.run.last_eval is None or t.run.last_eval["step"] != step:
        t.evaluator(t.engine, t.model, step, t.run)
    return t.run.finish(t.model, t.tokenizer, step=step, extra=extra)


def progress(
    iterable=None,
    *,
    total: int | None = None,
    desc: str = "",
    initial: int = 0,
    enabled: bool = True,
):
    """A tqdm progress bar on stderr (updated at most every 2 s)."""
    from tqdm.auto import tqdm

    return tqdm(
        iterable,
        total=total,
        desc=desc,
        initial=initial,
        disable=not enabled,
        mininterval=2.0,
        file=sys.stderr,
        dynamic_ncols=True,
    )


def config_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def run_main(cls: type, section: str, train_fn, argv: list[str] | None, description: str) -> int:
    """Entry point of ``rrl <section>``: parse, validate (bad settings exit 2 with a message
    naming the setting, before any work), train."""
    from reasoning_core.runtime.config import resolve_command

    resolved = resolve_command(cls, section, argv, description)
    if resolved is None:
        return 2
    cfg, args = resolved
    try:
        train_fn(cfg, args.out)
    except ConfigError as exc:  # data-dependent settings checked after loading the data
        print(f"rrl {section}: {exc}", file=sys.stderr)
        return 2
    return 0
