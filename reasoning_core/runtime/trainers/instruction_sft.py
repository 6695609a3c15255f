"""Instruction tuning on packed sequences (the supplement's SFT on ``{prompt, response}`` pairs).

The training JSONL becomes :class:`envs.packed_data.PackedSFTDataset` chunks: each pair in the
Alpaca template with the tokenizer's BOS and an EOS delimiter, documents shuffled (seeded by
``seed``) and concatenated, cut into ``seq_length`` chunks. The loss is the mean cross-entropy
over every token of a batch's chunks (no mask: prompts, responses and delimiters alike, as the
handout trains); ``batch_size`` chunks per optimizer step in ``gradient_accumulation_steps``
micro batches, each adding its tokens' summed NLL over the batch's token count, so the
gradient is the batch mean exactly whatever the split (also for the last, partial batch). AdamW
with the learning rate warmed up linearly over ``warmup_ratio`` of the steps, then
``lr_scheduler`` (cosine) to ``lr * min_lr_ratio``.

The defaults are the handout's recipe (context 512, 32 sequences per step, lr 2e-5, cosine,
3% warm-up, one epoch) on whatever the machine has: ``device: auto`` takes the GPU, ``dtype:
auto`` bfloat16 there (float32 on a CPU) and ``attn_implementation: auto`` FlashAttention 2
when flash-attn is installed (SDPA otherwise); done.json records what ran.

``val_data`` (the same layout, packed without shuffling) gives ``val/loss``, the mean token
NLL over its chunks, at step 0, every ``val_every`` steps and at the end. The run folder is the
other trainers' (:class:`~reasoning_core.runtime.trainers.lifecycle.RunContext`): ``config.yaml``,
``metrics.jsonl``, ``state/`` every ``save_every`` steps (a killed run resumes to the same
metrics and weights; the chunk order is a function of the seed and the epoch), the
``max_wall_seconds`` budget, ``checkpoint/`` (``save_pretrained`` of the model and the
tokenizer) and, last, ``done.json``.

Under ``torchrun`` each rank accumulates its contiguous share of every batch's chunks, each
micro batch divided by the whole batch's token count; the gradients are summed over the ranks
before clipping, the logged loss and the validation loss (each rank a share of the validation
chunks) are the global ones, and rank 0 writes the run folder: the same updates as one process
with the same settings, up to float rounding (docs/gpu.md, "Several GPUs"). ``sharding: fsdp``
shards the model, its gradients and AdamW state over the ranks (FSDP2, as ``rrl sft`` does);
rank 0 then keeps a copy of the whole model in CPU memory, into which the shards are gathered
for the final ``checkpoint/``.

Run: ``rrl instruction-sft --set model_path=M --set train_data=sft.jsonl --out DIR``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Literal

import torch

from envs import DataError
from envs.packed_data import PackedSFTDataset
from reasoning_core import log_probs_from_logits
from reasoning_core.runtime.distributed.collectives import share, sum_gradients, sum_values
from reasoning_core.runtime.distributed.sharding import (
    gather_whole,
    lockstep_passes,
    shard_policy,
    unsharded_copy,
)
from reasoning_core.runtime.distributed.world import is_main, world_size
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.folder import RunContext
from reasoning_core.runtime.run.rng import Stream, step_rng
from reasoning_core.runtime.trainers.lifecycle import progress, run_main, start_run
from reasoning_core.runtime.training.batching import MicroBatchSize
from reasoning_core.runtime.training.policy import (
    choose_attn_implementation,
    load_policy,
    make_optimizer,
    make_scheduler,
    resolve_device,
    training_forward,
)
from reasoning_core.runtime.training.settings import (
    ShardingConfig,
    check_at_least_one,
    check_divisible,
    check_world_batches,
)
from reasoning_core.runtime.training.updates import norm_value

METHOD = "instruction-sft"


@dataclass
class InstructionSFTConfig(ShardingConfig):
    """Instruction-SFT settings: the packed data, its batches, the schedule, the validation.

    The task, template, engine and eval_* settings of the other trainers are not used here:
    the tuned model is evaluated by rrl eval and rrl supplement-generate (docs/supplement.md)."""

    train_data: str = ""
    """JSONL(.gz) of {prompt, response} pairs to tune on (required)."""
    val_data: str = ""
    """JSONL(.gz) of {prompt, response} pairs for the validation loss ("": none)."""
    val_chunks: int | None = None
    """Validate on the first N packed chunks of val_data (null, or more than it packs into:
    all; done.json records the number, val_chunks)."""
    val_every: int = 0
    """Compute the validation loss every N optimizer steps (besides step 0 and the end)."""
    seq_length: int = 512
    """Tokens per packed chunk (the context trained on)."""
    shuffle: bool = True
    """Shuffle the documents before packing and the chunks in each epoch (seeded by seed)."""
    epochs: int = 1
    """Passes over the packed chunks."""
    max_steps: int | None = None
    """Stop after this many optimizer steps (null: after the epochs)."""
    batch_size: int = 32
    """Packed chunks (sequences) per optimizer step."""
    gradient_accumulation_steps: int = 16
    """Micro batches per optimizer step (micro batch = batch_size / this chunks)."""
    lr: float = 2e-5
    """Peak learning rate of AdamW."""
    lr_scheduler: Literal["constant", "cosine", "linear"] = "cosine"
    """Learning-rate schedule after the warm-up: constant, or a cosine or linear decay to
    lr * min_lr_ratio at the last step."""
    warmup_ratio: float | None = 0.03
    """Linear warm-up over this fraction of the run's optimizer steps, rounded up (null: over
    warmup_steps steps)."""
    device: str = "auto"
    """Where the model trains: auto (CUDA when there is a GPU), cpu, cuda or cuda:N."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Dtype of the weights and forward. auto: bfloat16 on a GPU that supports it, else
    float32."""
    save_every: int = 100
    """Save the resumable state every N optimizer steps; 0: never."""

    def validate(self) -> None:
        check_divisible(self, "batch_size", "gradient_accumulation_steps")
        check_at_least_one(self, "epochs", "seq_length")
        for name in ("max_steps", "val_chunks"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"setting {name!r} must be >= 1 (or null), got {value}")
        if self.val_every < 0:
            raise ConfigError(f"setting 'val_every' must be >= 0, got {self.val_every}")
        if self.warmup_ratio is not None and not 0.0 <= self.warmup_ratio <= 1.0:
            raise ConfigError(f"setting 'warmup_ratio' must lie in [0, 1], got {self.warmup_ratio}")
        if not self.train_data:
            raise ConfigError("setting 'train_data' is required (a JSONL of {prompt, response})")
        for name in ("train_data", "val_data"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ConfigError(f"setting {name!r}: file {path!r} does not exist")
        super().validate()

    def check_world(self, world: int) -> None:
        """Under ``torchrun``: each rank trains on an equal share of every batch of chunks (an
        epoch's last, shorter batch is shared as evenly as it goes) in an equal share of its
        micro batches; with sharding: fsdp, no out-of-memory back-off."""
        self.check_sharding()
        check_world_batches(self, world, "batch_size", "gradient_accumulation_steps")

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.gradient_accumulation_steps


def resolve_dtype(cfg: InstructionSFTConfig) -> str:
    """Setting ``dtype`` with ``auto`` resolved: bfloat16 on a CUDA device that has it."""
    if cfg.dtype != "auto":
        return cfg.dtype
    device = resolve_device(cfg.device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


def warmup_steps(cfg: InstructionSFTConfig, total_steps: int) -> int:
    """Warm-up steps: ``warmup_ratio`` of ``total_steps`` rounded up, or ``warmup_steps``."""
    if cfg.warmup_ratio is None:
        return cfg.warmup_steps
    return math.ceil(cfg.warmup_ratio * total_steps)


def pack(cfg: InstructionSFTConfig, setting: str, tokenizer, shuffle: bool) -> PackedSFTDataset:
    """The packed chunks of the file in setting ``setting``; a bad record names file and line."""
    try:
        data = PackedSFTDataset(
            tokenizer, getattr(cfg, setting), cfg.seq_length, shuffle=shuffle, seed=cfg.seed
        )
    except DataError as exc:
        raise ConfigError(f"setting {setting!r}: {exc}") from None
    if len(data) == 0:
        raise ConfigError(
            f"setting {setting!r}: {data.n_tokens} tokens do not fill one chunk of seq_length "
            f"{cfg.seq_length}"
        )
    return data


def chunk_nll(model, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed token NLL of a micro batch of chunks (float32, on the model's device)."""
    device = next(model.parameters()).device
    logits = training_forward(model)(input_ids.to(device)).logits
    return -log_probs_from_logits(logits, labels.to(device))["log_probs"].float().sum()


def packed_update(t, data: PackedSFTDataset, rows: list[int], micro: MicroBatchSize) -> dict:
    """One optimizer step on the mean token NLL of the chunks ``rows``: zero, accumulate,
    clip, step and schedule, with the out-of-memory back-off retrying the accumulation.

    Under ``torchrun`` this rank accumulates its share of ``rows`` over the token count of all
    of them, and the gradients and the loss are summed over the ranks."""
    tokens = len(rows) * data.seq_length
    lr = t.optimizer.param_groups[0]["lr"]
    zero = partial(t.optimizer.zero_grad, set_to_none=True)
    zero()
    loss = micro.call(accumulate_packed, t.model, data, list(share(rows)), tokens, reset=zero)
    sum_gradients(t.model)  # a no-op in one process and for a sharded model
    if world_size() > 1:
        loss = sum_values({"loss": loss})["loss"]
    grad_norm = torch.nn.utils.clip_grad_norm_(t.model.parameters(), t.cfg.max_grad_norm)
    t.optimizer.step()
    t.scheduler.step()
    zero()
    return {"loss": loss, "grad_norm": norm_value(grad_norm), "lr": lr, "tokens": tokens,
            **micro.metrics()}  # fmt: skip


def accumulate_packed(size: int, model, data: PackedSFTDataset, rows: list[int], tokens: int):
    """Backward of the chunks ``rows`` in micro batches of ``size``, each scaled by the step's
    token count so the gradients sum to the step's mean; returns that mean.

    A sharded ``model`` runs as many passes as the rank with the most micro batches (an epoch's
    last batch can leave a rank one short): the missing ones are passes of zero loss."""
    own = math.ceil(len(rows) / size)
    passes = lockstep_passes(model, own)  # before any pass: the ranks' collectives in order
    total = 0.0
    for start in range(0, len(rows), size):
        part = rows[start : start + size]
        loss = chunk_nll(model, data.input_ids[part], data.labels[part]) / tokens
        loss.backward()
        total += float(loss.detach())
    for _ in range(passes - own):
        (chunk_nll(model, data.input_ids[:1], data.labels[:1]) * 0.0).backward()  # adds 0
    return total


@torch.no_grad()
def validation_loss(model, data: PackedSFTDataset, count: int, micro_batch_size: int) -> float:
    """Mean token NLL over the first ``count`` chunks of ``data`` (eval mode, no gradient).
    Under ``torchrun`` each rank sums its contiguous share of the chunks; the sums are added
    (a sharded ``model`` runs as many forwards on every rank, the extra ones discarded)."""
    was_training = model.training
    model.eval()
    total = 0.0
    mine = share(range(count))
    own = math.ceil(len(mine) / micro_batch_size)
    passes = lockstep_passes(model, own)
    for start in range(mine.start, mine.stop, micro_batch_size):
        stop = min(mine.stop, start + micro_batch_size)
        total += float(chunk_nll(model, data.input_ids[start:stop], data.labels[start:stop]))
    for _ in range(passes - own):
        chunk_nll(model, data.input_ids[:1], data.labels[:1])
    model.train(was_training)
    if world_size() > 1:
        total = sum_values({"total": total})["total"]
    return total / (count * data.seq_length)


@dataclass
class Tuning:
    """What the loop works with: the run folder, the policy, its optimizer and schedule."""

    cfg: InstructionSFTConfig
    run: RunContext
    model: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    scheduler: object


def train(cfg: InstructionSFTConfig, out: str) -> dict:
    """Tune into folder ``out`` (resuming from ``out/state``); returns ``done.json``'s data."""
    if start_run(cfg, out, METHOD) is None:
        return {}
    dtype = resolve_dtype(cfg)
    device = resolve_device(cfg.device)
    attn = choose_attn_implementation(cfg.attn_implementation, device, dtype)
    print(f"[{METHOD}] {device}, {dtype}, attention {attn}", file=sys.stderr)
    run = RunContext(cfg, out, METHOD)
    model, tokenizer = load_policy(replace(cfg, dtype=dtype))
    whole = None
    if cfg.sharding == "fsdp":  # torchrun only (validate)
        whole = unsharded_copy(model).cpu() if is_main() else None  # the final checkpoint's
        shard_policy(model)
    data = pack(cfg, "train_data", tokenizer, cfg.shuffle)
    val = pack(cfg, "val_data", tokenizer, False) if cfg.val_data else None
    n_val = 0 if val is None else min(len(val), cfg.val_chunks or len(val))
    per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = (
        cfg.epochs * per_epoch
        if cfg.max_steps is None
        else min(cfg.epochs * per_epoch, cfg.max_steps)
    )
    warm = warmup_steps(cfg, total)
    optimizer = make_optimizer(model, cfg)
    scheduler = make_scheduler(optimizer, replace(cfg, warmup_steps=warm), total)
    counters = run.resume(model, optimizer, scheduler)
    t = Tuning(cfg, run, model, tokenizer, optimizer, scheduler)
    info = {"train_chunks": len(data), "train_tokens": data.n_tokens, "val_chunks": n_val,
            "seq_length": cfg.seq_length, "dtype": dtype, "attn_implementation": attn,
            "warmup_steps": warm, "total_steps": total}  # fmt: skip
    print(f"[{METHOD}] data: {info}", file=sys.stderr)
    step = counters["opt_step"] if counters else 0
    last_val = counters.get("last_val") if counters else None

    def check_validation() -> dict[str, float]:
        nonlocal last_val
        last_val = {"val/loss": validation_loss(model, val, n_val, cfg.micro_batch_size)}
        last_val["val/step"] = step
        return last_val

    if counters is None:  # the data's size (numbers only, for the trackers) and val at step 0
        sizes = {k: v for k, v in info.items() if not isinstance(v, str)}
        run.log({**sizes, **(check_validation() if val is not None else {})}, step=0,
                split="train")  # fmt: skip
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name=METHOD)
    bar = progress(total=total, initial=step, desc=METHOD, enabled=cfg.progress)
    while step < total:
        epoch, index = divmod(step, per_epoch)
        order = torch.arange(len(data))
        if cfg.shuffle:
            order = torch.as_tensor(
                step_rng(cfg.seed, Stream.PACKED_ORDER, epoch).permutation(len(data))
            )
        rows = order[index * cfg.batch_size : (index + 1) * cfg.batch_size].tolist()
        t0 = time.perf_counter()
        stats = packed_update(t, data, rows, micro)
        step += 1
        stats.update(
            epoch=epoch + (index + 1) / per_epoch, **{"time/train": time.perf_counter() - t0}
        )
        if val is not None and (step == total or (cfg.val_every and step % cfg.val_every == 0)):
            stats.update(check_validation())
        bar.update(1)
        bar.set_postfix(loss=f"{stats['loss']:.3f}", refresh=False)
        run.log(stats, step=step, split="train")
        run.maybe_exit(step)
        if step < total and run.over_budget():
            run.budget_stop = {"iterations_done": step, "iterations_planned": total}
            print(
                f"[{METHOD}] max_wall_seconds spent after step {step} of {total}", file=sys.stderr
            )
            if val is not None:
                run.log(check_validation(), step=step, split="train")
            break
        if step < total and cfg.save_every and step % cfg.save_every == 0:
            run.save_state(model, optimizer, scheduler, opt_step=step, last_val=last_val)
    bar.close()
    final = gather_whole(model, whole) if cfg.sharding == "fsdp" else model
    return run.finish(final, tokenizer, step=step, extra={**info, **(last_val or {})})


def main(argv: list[str] | None = None) -> int:
    return run_main(InstructionSFTConfig, METHOD, train, argv, "instruction tuning on packed data")
