"""GRPO and its policy-gradient relatives (CS336 assignment 5, Algorithm 3).

Each GRPO step: sample ``rollout_batch_size / group_size`` questions, sync the policy's weights
into the rollout engine, sample ``group_size`` responses per question, grade them, turn the
rewards into group-normalized advantages, and take
``epochs_per_rollout_batch * rollout_batch_size / train_batch_size`` optimizer steps on the
rollout batch (each over ``gradient_accumulation_steps`` micro batches).

``loss_type`` picks the objective (see :func:`reasoning_core.compute_policy_gradient_loss`):
``no_baseline`` (REINFORCE on raw rewards), ``reinforce_with_baseline`` (group-mean baseline,
optionally std-normalized: what the handout calls GRPO without clipping of ratios; on-policy it
is REINFORCE with a per-group baseline), ``grpo_clip`` (PPO's clipped ratio), ``grpo_no_clip``
(unclipped ratio). The ratio losses need the log-probs of the sampling policy; they are
computed once per rollout batch, without gradients, before the first optimizer step on it.

Every rollout batch is checked against the engine that sampled it: the engine's log-probs of
its sampled tokens against the sampling policy's (the old log-probs where they are computed,
else the first optimizer step's own forward, no extra pass), logged under ``rollout/``
(:mod:`reasoning_core.runtime.training.engine_check`); ``rollout_correction: tis`` weights each
token's loss by truncated importance sampling (docs/rollout_mismatch.md).

Run: ``rrl grpo --config workflow/config/methods/tiny.yaml --set model_path=... --out DIR``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import torch

from reasoning_core import LOSS_TYPES, group_normalize
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.rng import Stream, step_seed
from reasoning_core.runtime.trainers.lifecycle import (
    after_iteration,
    finish_training,
    progress,
    run_main,
    setup_training,
    start_run,
)
from reasoning_core.runtime.training.batching import (
    PACKABLE_ATTENTION,
    MicroBatchSize,
    check_packable,
    tokenize_pairs,
)
from reasoning_core.runtime.training.engine_check import RolloutCheck
from reasoning_core.runtime.training.rollouts import (
    Rollouts,
    load_questions,
    reward_means,
    sample_and_grade,
)
from reasoning_core.runtime.training.settings import (
    RolloutConfig,
    check_at_least_one,
    check_divisible,
    check_sampling,
)
from reasoning_core.runtime.training.updates import (
    PolicyGradientLoss,
    ScoredRollouts,
    compute_old_log_probs,
    grpo_update,
)

RATIO_LOSSES = ("grpo_clip", "grpo_no_clip")


@dataclass
class GRPOConfig(RolloutConfig):
    """GRPO settings; defaults are the handout's (Qwen2.5-Math-1.5B on MATH)."""

    n_grpo_steps: int = 200
    """GRPO steps: each samples one rollout batch and trains on it."""
    lr: float = 1e-5
    """Peak learning rate of AdamW."""
    advantage_eps: float = 1e-6
    """Added to a group's reward standard deviation before dividing by it."""
    rollout_batch_size: int = 256
    """Responses sampled per GRPO step (rollout_batch_size / group_size questions)."""
    group_size: int = 8
    """Responses per question; advantages are relative to the group."""
    sampling_temperature: float = 1.0
    """Temperature of the rollouts."""
    sampling_top_p: float = 1.0
    """Nucleus-sampling top_p of the rollouts."""
    sampling_min_tokens: int = 4
    """Fewest new tokens per rollout; as in expert iteration, no empty responses."""
    sampling_max_tokens: int = 1024
    """Most new tokens per rollout."""
    epochs_per_rollout_batch: int = 1
    """Passes over each rollout batch; 1 with train_batch_size = rollout_batch_size is
    on-policy."""
    train_batch_size: int = 256
    """Responses per optimizer step; a rollout batch gives rollout_batch_size /
    train_batch_size steps per epoch."""
    gradient_accumulation_steps: int = 128
    """Micro batches per optimizer step (micro batch = train_batch_size / this; the handout's
    128 gives 2); the update is the batch mean whatever the split."""
    loss_type: str = "reinforce_with_baseline"
    """Policy-gradient loss: no_baseline (raw rewards), reinforce_with_baseline (group
    advantages), grpo_clip (PPO-style clipped ratio), grpo_no_clip (the unclipped ratio)."""
    use_std_normalization: bool = True
    """Divide each group's advantages by its reward standard deviation (+ advantage_eps)."""
    cliprange: float = 0.2
    """grpo_clip's epsilon: the ratio is clipped to [1 - cliprange, 1 + cliprange]."""
    length_normalization: Literal["masked_mean", "masked_normalize"] = "masked_mean"
    """How a response's per-token losses become one number: masked_mean (divide by its own
    length) or masked_normalize (divide by normalize_constant)."""
    normalize_constant: float | None = None
    """Divisor of masked_normalize (null: sampling_max_tokens)."""
    old_log_probs: Literal["auto", "none"] = "auto"
    """auto: compute the sampling policy's log-probs when they are needed (the ratio losses;
    rollout_correction tis over several optimizer steps per rollout batch); none: never
    (refused where they are needed)."""
    rollout_correction: Literal["none", "tis"] = "none"
    """Correct the loss for an engine that samples from other log-probs than the policy's:
    none, or tis (truncated importance sampling: each response token's loss, whatever the
    loss_type, weighted by min(exp(old policy - engine), tis_cap), detached; logs
    rollout/tis_weight_mean and rollout/tis_clipped). docs/rollout_mismatch.md says when."""
    tis_cap: float = 2.0
    """tis's cap (>= 1): no token's weight exceeds it."""
    sort_micro_batches: bool = False
    """Sort each train batch's rows by length before cutting it into micro batches, so a micro
    batch pads to a near-equal longest row: less padding computed, the same batch mean up to
    rounding."""
    share_prompts: bool = False
    """Pack the rows of a micro batch that share a prompt into one sequence, the prompt once and
    its responses after it under a 4D attention mask: the same loss and gradient up to
    rounding, fewer tokens computed. Rows are then ordered by question."""
    train_examples: int | None = None
    """Size of the pool of training questions (null: the task's default)."""
    eval_every: int = 5
    """Evaluate every N GRPO steps; 0: only at the start and the end."""
    save_every: int = 5
    """Save the resumable state every N GRPO steps; 0: never."""

    def validate(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(
                f"setting 'loss_type' must be one of {list(LOSS_TYPES)}, got {self.loss_type!r}"
            )
        check_at_least_one(
            self, "n_grpo_steps", "group_size", "epochs_per_rollout_batch", "sampling_max_tokens"
        )
        if self.group_size < 2:
            raise ConfigError(
                f"setting 'group_size' must be >= 2 for group advantages, got {self.group_size}"
            )
        check_divisible(self, "rollout_batch_size", "group_size")
        check_divisible(self, "train_batch_size", "gradient_accumulation_steps")
        check_divisible(self, "rollout_batch_size", "train_batch_size")
        if self.train_batch_size < self.group_size:
            raise ConfigError(
                f"setting 'train_batch_size' ({self.train_batch_size}) must be >= "
                f"'group_size' ({self.group_size})"
            )
        check_sampling(self)
        if self.loss_type in RATIO_LOSSES and self.old_log_probs == "none":
            raise ConfigError(
                f"setting 'old_log_probs' is 'none' but loss_type {self.loss_type!r} needs the "
                "old (sampling) policy's log-probs; use old_log_probs: auto"
            )
        if not self.tis_cap >= 1:
            raise ConfigError(f"setting 'tis_cap' must be >= 1, got {self.tis_cap}")
        if self.rollout_correction == "tis" and self.old_log_probs == "none":
            if self.steps_per_rollout_batch > 1:
                # The later steps' forward is no longer the sampling policy's.
                raise ConfigError(
                    "setting 'rollout_correction' is tis and a rollout batch takes "
                    f"{self.steps_per_rollout_batch} optimizer steps, so its weights need the "
                    "sampling policy's log-probs, but setting 'old_log_probs' is 'none'"
                )
        if self.loss_type == "grpo_clip" and self.cliprange <= 0:
            raise ConfigError(
                f"setting 'cliprange' must be > 0 for grpo_clip, got {self.cliprange}"
            )
        if self.normalize_constant is not None and self.normalize_constant <= 0:
            raise ConfigError("setting 'normalize_constant' must be > 0")
        if self.advantage_eps < 0:
            raise ConfigError("setting 'advantage_eps' must be >= 0")
        if self.share_prompts and self.attn_implementation not in ("auto", *PACKABLE_ATTENTION):
            # The packed rows of a shared prompt need a 4D attention mask.
            raise ConfigError(
                f"setting 'share_prompts' needs attn_implementation in "
                f"{['auto', *PACKABLE_ATTENTION]} (a 4D attention mask), got "
                f"{self.attn_implementation!r}; turn one of them off"
            )
        super().validate()

    # Derived sizes (the handout's sanity-checked quantities).
    @property
    def micro_batch_size(self) -> int:
        return self.train_batch_size // self.gradient_accumulation_steps

    @property
    def n_prompts_per_rollout_batch(self) -> int:
        return self.rollout_batch_size // self.group_size

    @property
    def steps_per_rollout_batch(self) -> int:
        return self.epochs_per_rollout_batch * (self.rollout_batch_size // self.train_batch_size)

    @property
    def needs_old_log_probs(self) -> bool:
        return self.loss_type in RATIO_LOSSES

    @property
    def scores_old_log_probs(self) -> bool:
        """Whether each rollout batch gets the no-gradient pass of the sampling policy: for the
        ratio losses, and for TIS when a rollout batch takes more than one optimizer step (the
        later steps' forward is no longer the sampling policy's)."""
        tis = self.rollout_correction == "tis" and self.steps_per_rollout_batch > 1
        return self.needs_old_log_probs or tis

    @property
    def tis(self) -> float | None:
        """TIS's cap when rollout_correction is tis, else None."""
        return self.tis_cap if self.rollout_correction == "tis" else None

    @property
    def loss(self) -> PolicyGradientLoss:
        """The objective; ``masked_normalize`` divides by ``normalize_constant``, by default
        the sampling ``max_tokens``."""
        return PolicyGradientLoss(
            loss_type=self.loss_type,
            cliprange=self.cliprange,
            length_normalization=self.length_normalization,
            normalize_constant=self.normalize_constant or float(self.sampling_max_tokens),
        )


def grouped_order(
    rows: torch.Tensor, response_lengths: torch.Tensor, group_size: int
) -> torch.Tensor:
    """``rows`` of a rollout batch (question = row // group_size) reordered so that each
    question's rows are consecutive, questions by the total response length of their rows here
    (ties by question), each question's rows in their given order: micro batches then hold
    whole groups of similar packed length (:func:`shared_prompt_log_probs`)."""
    question = rows // group_size
    total = torch.zeros(int(question.max()) + 1, dtype=torch.long)
    total.index_add_(0, question, response_lengths[rows].long())
    return rows[torch.argsort(total[question] * len(total) + question, stable=True)]


def train(cfg: GRPOConfig, out: str) -> dict:
    """Run GRPO into folder ``out`` (resuming from ``out/state``); returns ``done.json``'s data."""
    started = start_run(cfg, out, "grpo")
    if started is None:
        return {}
    device, task = started
    questions = load_questions(
        cfg,
        task,
        cfg.n_prompts_per_rollout_batch,
        "setting 'train_examples': {n} training questions, fewer than the "
        f"{cfg.n_prompts_per_rollout_batch} prompts of one rollout batch",
    )
    rollouts = Rollouts.from_config(cfg, task, questions, sync_every=cfg.sync_every)
    t = setup_training(cfg, out, "grpo", task, cfg.n_grpo_steps * cfg.steps_per_rollout_batch)
    if cfg.share_prompts:  # attn_implementation "auto" may have chosen FlashAttention 2
        check_packable(t.model)
    grpo_step, opt_step = t.resumed("grpo_step"), t.resumed("opt_step")
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name="grpo")
    score_micro = MicroBatchSize(
        cfg.micro_batch_size, backoff=cfg.oom_backoff, name="grpo old log-probs"
    )

    check = RolloutCheck(warn_threshold=cfg.logprob_diff_warn, method="grpo", tis_cap=cfg.tis)
    bar = progress(total=cfg.n_grpo_steps, initial=grpo_step, desc="grpo", enabled=cfg.progress)
    while grpo_step < cfg.n_grpo_steps:
        # 1. Sample group_size responses to each of this step's questions; grade them.
        ro = sample_and_grade(
            t.engine, t.model, rollouts, step=grpo_step, count=cfg.n_prompts_per_rollout_batch
        )
        t_prepare = time.perf_counter()
        # 2. Group-normalized advantages of the rewards (the setting use_std_normalization is
        # the core's normalize_by_std).
        raw_rewards = torch.tensor(ro.rewards, dtype=torch.float32)
        advantages, adv_meta = group_normalize(
            raw_rewards=raw_rewards,
            group_size=cfg.group_size,
            advantage_eps=cfg.advantage_eps,
            normalize_by_std=cfg.use_std_normalization,
        )
        # 3. Tokenize once; 4. the sampling policy's log-probs, when the loss has a ratio
        # (or TIS needs them); the engine's log-probs of the same tokens, checked against them
        # (or against the first update's forward).
        tokens = tokenize_pairs(ro.prompts, ro.responses, t.tokenizer)
        old_log_probs = None
        if cfg.scores_old_log_probs:
            old_log_probs = compute_old_log_probs(
                t.model, tokens, device, score_micro, share_prompts=cfg.share_prompts
            )
        token_weights = check.start(
            tokens.labels, tokens.response_mask, ro.completions, old_log_probs
        )
        scored = ScoredRollouts(
            tokens=tokens,
            raw_rewards=raw_rewards,
            advantages=advantages,
            old_log_probs=old_log_probs if cfg.needs_old_log_probs else None,
            token_weights=token_weights,
        )
        rollout_stats = {
            **reward_means(ro.scores),
            **ro.grade_metrics,  # this rollout batch's, repeated on each of its lines
            "response_length": ro.mean_length,
            "rollout/truncated": ro.truncated,
            "frac_constant_groups": float(adv_meta["frac_constant_groups"]),
        }
        # Rollout-side timings go on the first optimizer step of this rollout batch; the later
        # lines carry the same keys at 0, so every train line has the same time/ keys.
        timings = {**ro.seconds, "time/prepare": time.perf_counter() - t_prepare}
        # 5. Epochs over the rollout batch, each in a new order, in train batches.
        for epoch in range(cfg.epochs_per_rollout_batch):
            gen = torch.Generator().manual_seed(
                step_seed(cfg.seed, Stream.GRPO_ORDER, grpo_step, epoch)
            )
            order = torch.randperm(cfg.rollout_batch_size, generator=gen)
            for rows in order.split(cfg.train_batch_size):
                t0 = time.perf_counter()
                if cfg.sort_micro_batches:
                    rows = rows[torch.argsort(tokens.lengths[rows], stable=True)]
                if cfg.share_prompts:
                    rows = grouped_order(rows, tokens.response_mask.sum(dim=1), cfg.group_size)
                stats = grpo_update(
                    t.model,
                    t.optimizer,
                    t.scheduler,
                    scored,
                    rows,
                    loss=cfg.loss,
                    micro_batch_size=micro,
                    device=device,
                    max_grad_norm=cfg.max_grad_norm,
                    share_prompts=cfg.share_prompts,
                    engine_check=check.pending,  # the batch's first update measures the check
                )
                check.after_update(stats)
                opt_step += 1
                line = {"grpo_step": grpo_step + 1, **stats, **rollout_stats, **check.metrics}
                line.update(timings)
                line["time/train"] = time.perf_counter() - t0
                t.run.log(line, step=opt_step, split="train")
                t.run.maybe_exit(opt_step)
                timings = dict.fromkeys(timings, 0.0)
        grpo_step += 1
        bar.update(1)
        bar.set_postfix(reward=f"{rollout_stats['reward']:.3f}", refresh=False)
        # 6. Evaluate every eval_every GRPO steps and at the end; save every save_every.
        if after_iteration(t, cfg.n_grpo_steps, grpo_step=grpo_step, opt_step=opt_step):
            break  # max_wall_seconds spent
    bar.close()
    return finish_training(t, step=opt_step)


def main(argv: list[str] | None = None) -> int:
    return run_main(GRPOConfig, "grpo", train, argv, "GRPO training")
