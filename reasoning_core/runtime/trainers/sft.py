"""Supervised fine-tuning on reasoning traces (CS336 assignment 5, Algorithm 1).

Minimizes the negative log-likelihood of the response tokens given the prompt (per-example
sum over response tokens, divided by ``normalize_constant``, averaged over the batch) with
AdamW, gradient accumulation (``batch_size / gradient_accumulation_steps`` examples per micro
batch), gradient clipping and a learning-rate schedule; evaluates through the rollout engine
after a weight sync every ``eval_every`` optimizer steps.

Data: ``train_data`` (a JSONL file of ``{"prompt", "response", "ground_truth"}`` records, the
handout's ``sft.jsonl`` layout) or, when it is empty, the task's own SFT pool
(``Task.sft_pool``, e.g. the arithmetic task's traces, some of them wrong on purpose).
``filter_correct`` keeps only the examples whose response earns reward 1 under the task's
reward function; ``max_examples`` then keeps that many unique examples (a seeded subset), for
the handout's 128/256/512/1024/full sweep.

Run: ``rrl sft --config workflow/config/methods/tiny.yaml --set model_path=... --out DIR``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

from envs import DataError, Task
from envs.sft_data import read_examples
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.rng import Stream, step_rng
from reasoning_core.runtime.trainers.lifecycle import (
    after_iteration,
    finish_training,
    progress,
    run_main,
    setup_training,
    start_run,
)
from reasoning_core.runtime.training.batching import MicroBatchSize, tokenize_pairs
from reasoning_core.runtime.training.rollouts import GRADE_KEYS, grade, grade_counts
from reasoning_core.runtime.training.settings import (
    ShardingConfig,
    check_at_least_one,
    check_divisible,
    check_world_batches,
)
from reasoning_core.runtime.training.updates import sft_update


@dataclass
class SFTConfig(ShardingConfig):
    """SFT settings: the data and its selection, epochs, batch and its micro batches."""

    train_data: str = ""
    """JSONL file of {prompt, response, ground_truth} examples; "": the task's built-in SFT
    pool (the arithmetic task's)."""
    sft_pool_size: int | None = None
    """Size of the task's built-in SFT pool (null: the task's default)."""
    max_examples: int | None = None
    """Train on this many unique examples, a subset drawn with the run's seed (null: all)."""
    filter_correct: bool = False
    """Keep only the examples whose response the task's reward grades correct."""
    epochs: int = 1
    """Passes over the examples."""
    max_steps: int | None = None
    """Stop after this many optimizer steps (null: after the epochs)."""
    batch_size: int = 32
    """Examples per optimizer step."""
    gradient_accumulation_steps: int = 8
    """Micro batches per optimizer step (micro batch = batch_size / this); the update is the
    batch mean whatever the split."""
    normalize_constant: float = 1.0
    """Each example's summed response negative log-likelihood is divided by this."""
    lr: float = 5e-5
    """Peak learning rate of AdamW."""
    eval_every: int = 50
    """Evaluate every N optimizer steps; 0: only at the start and the end."""
    save_every: int = 50
    """Save the resumable state every N optimizer steps; 0: never."""

    def validate(self) -> None:
        check_divisible(self, "batch_size", "gradient_accumulation_steps")
        check_at_least_one(self, "epochs")
        if self.max_examples is not None and self.max_examples < 1:
            raise ConfigError("setting 'max_examples' must be >= 1 (or null for all)")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError("setting 'max_steps' must be >= 1 (or null)")
        if self.normalize_constant <= 0:
            raise ConfigError("setting 'normalize_constant' must be > 0")
        if self.train_data and not Path(self.train_data).is_file():
            raise ConfigError(f"setting 'train_data': file {self.train_data!r} does not exist")
        super().validate()

    def check_world(self, world: int) -> None:
        """Under ``torchrun``: each rank trains on an equal share of every batch (an epoch's
        last, shorter batch is shared as evenly as it goes) in an equal share of its micro
        batches; with sharding: fsdp, no out-of-memory back-off."""
        self.check_sharding()
        check_world_batches(self, world, "batch_size", "gradient_accumulation_steps")

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.gradient_accumulation_steps


def load_sft_examples(cfg: SFTConfig, task: Task) -> list[dict]:
    """The SFT examples ``{prompt, response, ground_truth}`` before filtering/subsetting."""
    if cfg.train_data:
        try:
            return read_examples(cfg.train_data)
        except DataError as exc:  # names the file, the line and the field
            raise ConfigError(f"setting 'train_data': {exc}") from None
    pool = getattr(task, "sft_pool", None)
    if pool is None:
        raise ConfigError(
            f"setting 'train_data' is empty and task {cfg.task!r} has no built-in SFT pool"
        )
    return list(pool(cfg.sft_pool_size, template=cfg.template))


def select_examples(cfg: SFTConfig, task: Task, examples: list[dict]) -> tuple[list[dict], dict]:
    """Apply ``filter_correct`` (graded with the task's reward) and ``max_examples``.

    Returns the examples and the counts for ``done.json``: ``pool_examples``,
    ``filtered_examples`` and ``grade/timeouts``, ``grade/errors`` (with ``filter_correct``:
    pool examples that scored 0 because grading timed out or raised), ``train_examples``."""
    info = {"pool_examples": len(examples)}
    if cfg.filter_correct:
        scores = grade(
            task.reward_fn(cfg.template),
            [e["response"] for e in examples],
            [e["ground_truth"] for e in examples],
        )
        examples = [e for e, s in zip(examples, scores, strict=True) if s["reward"] >= 1.0]
        info["filtered_examples"] = len(examples)
        info.update(grade_counts(scores))  # examples dropped because grading timed out/raised
    if cfg.max_examples is not None:
        if cfg.max_examples > len(examples):
            raise ConfigError(
                f"setting 'max_examples' ({cfg.max_examples}) exceeds the {len(examples)} "
                "available examples"
            )
        picked = step_rng(cfg.seed, Stream.SFT_SUBSET).permutation(len(examples))[
            : cfg.max_examples
        ]
        examples = [examples[int(i)] for i in sorted(picked)]
    info["train_examples"] = len(examples)
    if not examples:
        raise ConfigError("no SFT examples left after filtering (setting 'filter_correct')")
    return examples, info


def train(cfg: SFTConfig, out: str) -> dict:
    """Run SFT into folder ``out`` (resuming from ``out/state``); returns ``done.json``'s data."""
    started = start_run(cfg, out, "sft")
    if started is None:
        return {}
    device, task = started
    examples, info = select_examples(cfg, task, load_sft_examples(cfg, task))
    print(f"[sft] data: {info}", file=sys.stderr)
    grading = {k: info[k] for k in GRADE_KEYS if k in info}
    n = len(examples)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    t = setup_training(cfg, out, "sft", task, total_steps)
    tokens = tokenize_pairs(
        [e["prompt"] for e in examples], [e["response"] for e in examples], t.tokenizer
    )
    step = t.resumed("opt_step")
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name="sft")

    bar = progress(total=total_steps, initial=step, desc="sft", enabled=cfg.progress)
    while step < total_steps:
        # The data position is a function of the step: epoch order seeded by (seed, epoch).
        epoch, index = divmod(step, steps_per_epoch)
        order = step_rng(cfg.seed, Stream.SFT_ORDER, epoch).permutation(n)
        rows = order[index * cfg.batch_size : (index + 1) * cfg.batch_size].tolist()
        stats = sft_update(
            t.model,
            t.optimizer,
            t.scheduler,
            tokens,
            rows,
            micro_batch_size=micro,
            device=device,
            max_grad_norm=cfg.max_grad_norm,
            normalize_constant=cfg.normalize_constant,
        )
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{stats['loss']:.3f}", refresh=False)
        # With filter_correct, its grading of the data (grade/timeouts, grade/errors) too.
        line = {"epoch": epoch + (index + 1) / steps_per_epoch, **stats, **grading}
        t.run.log(line, step=step, split="train")
        t.run.maybe_exit(step)
        if after_iteration(t, total_steps, opt_step=step):
            break  # max_wall_seconds spent
    bar.close()
    return finish_training(t, step=step, extra=info)


def main(argv: list[str] | None = None) -> int:
    return run_main(SFTConfig, "sft", train, argv, "supervised fine-tuning")
