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

import sys
import time
from dataclasses import dataclass
from typing import Literal

import torch

from reasoning_core import (
    LOSS_TYPES,
    compute_advantages,
    control_rewards,
    dynamic_sampling_keep,
    group_normalize,
    mask_truncated,
    soft_overlong_penalty,
)
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
from reasoning_core.runtime.training.policy import load_policy
from reasoning_core.runtime.training.rollouts import (
    RolloutBatch,
    Rollouts,
    load_questions,
    reward_means,
    sample_and_grade,
)
from reasoning_core.runtime.training.settings import (
    RolloutConfig,
    ShardingConfig,
    check_at_least_one,
    check_divisible,
    check_group_seeding,
    check_non_negative,
    check_positive,
    check_sampling,
    check_world_batches,
)
from reasoning_core.runtime.training.updates import (
    PolicyGradientLoss,
    ScoredRollouts,
    compute_old_log_probs,
    grpo_update,
)

# The losses with an importance ratio to the sampling policy: they need its log-probs.
RATIO_LOSSES = ("grpo_clip", "grpo_no_clip", "dapo", "gspo", "cispo", "sapo")
# The losses that clip the ratio between 1 - cliprange_low and 1 + cliprange_high.
CLIP_PAIR_LOSSES = ("dapo", "gspo", "cispo")


@dataclass
class GRPOConfig(ShardingConfig, RolloutConfig):
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
    advantages), grpo_clip (PPO-style clipped ratio), grpo_no_clip (the unclipped ratio), dapo
    (clip-higher: cliprange_low below, cliprange_high above), gspo (one length-normalized ratio
    per response, clipped per response), cispo (the clipped importance weight, detached, times
    the log-prob), sapo (a smooth gate instead of a clip). docs/algorithms.md gives each one's
    formula and paper."""
    advantage_estimator: Literal["grpo", "dr_grpo", "rloo", "batch_std", "reinforce_pp"] = "grpo"
    """How rewards become advantages: grpo (group mean, and the group's std when
    use_std_normalization), dr_grpo (group mean, no std), rloo (leave-one-out mean of the other
    responses of the group), batch_std (group mean, std over the whole rollout batch),
    reinforce_pp (mean and std of the whole rollout batch, no group)."""
    use_std_normalization: bool = True
    """Divide each group's advantages by its reward standard deviation (+ advantage_eps);
    advantage_estimator grpo only."""
    cliprange: float = 0.2
    """grpo_clip's epsilon: the ratio is clipped to [1 - cliprange, 1 + cliprange]."""
    cliprange_low: float | None = None
    """dapo, gspo and cispo: the ratio's lower clip, 1 - cliprange_low (null: cliprange)."""
    cliprange_high: float | None = None
    """dapo, gspo and cispo: the ratio's upper clip, 1 + cliprange_high (null: cliprange; DAPO
    uses 0.28 with cliprange_low 0.2)."""
    sapo_tau_pos: float = 1.0
    """sapo: the gate's temperature for tokens with a positive advantage."""
    sapo_tau_neg: float = 1.05
    """sapo: the gate's temperature for tokens with a negative or zero advantage."""
    length_normalization: Literal["masked_mean", "masked_normalize", "token_mean"] = "masked_mean"
    """How a response's per-token losses become one number: masked_mean (divide by its own
    length), masked_normalize (divide by normalize_constant) or token_mean (every token of the
    train batch weighs the same: the sum over the batch's tokens divided by their count,
    counted once per optimizer step over the whole train batch, whatever the micro batches)."""
    normalize_constant: float | None = None
    """Divisor of masked_normalize (null: sampling_max_tokens)."""
    kl_coef: float = 0.0
    """Weight of a KL penalty to a frozen reference policy (the starting model) added to each
    response token's loss; 0: off, and no reference is loaded. Logs kl (the mean per-token
    estimate)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Estimator of the per-token KL to the reference: k1 (log-ratio), k2 (half its square)
    or k3 (GRPO's, never negative and unbiased)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop the groups whose rewards are all equal (their advantages
    are 0) and sample more questions until the rollout batch is full again; logs
    dynamic_sampling/rounds and dynamic_sampling/kept."""
    dynamic_sampling_max_rounds: int = 4
    """dynamic_sampling: the most extra sampling rounds per GRPO step. When the batch is still
    not full, the kept groups fill it again in order (logged as dynamic_sampling/repeated); a
    step that kept no group at all takes no optimizer step."""
    overlong: Literal["none", "mask", "soft_penalty"] = "none"
    """Responses cut at sampling_max_tokens: none (trained as any other), mask (left out of the
    loss: DAPO's overlong filtering), or soft_penalty (DAPO's length penalty added to the
    reward, from 0 down to -1 over the last overlong_cache_tokens tokens)."""
    overlong_cache_tokens: int | None = None
    """soft_penalty's ramp in tokens before sampling_max_tokens (null: a fifth of it, DAPO's
    4,096 of 20,480)."""
    reward_control: Literal["none", "random", "format_only"] = "none"
    """Train on a control reward instead of the verifier's: random (the batch's rewards
    shuffled among its responses: the same rate of 1s, unrelated to correctness) or
    format_only (1 for a well-formed response, right or wrong). The logged reward stays the
    verifier's; trained_reward is the one trained on."""
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
    """Size of the pool of training questions (null: the task's default). A pool smaller than
    the questions of a rollout batch is drawn with replacement: train_examples 1 is one-example
    RLVR, every group a new sample of the same problem."""
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
        self._validate_variants()
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

    def check_world(self, world: int) -> None:
        """Under ``torchrun`` on ``world`` processes: group seeding, whole groups per rank (the
        rollout batch's questions a multiple of the world size), and the train batch and its
        micro batches split evenly (docs/gpu.md, "Several GPUs")."""
        check_group_seeding(self, world)
        self.check_sharding()
        groups = self.n_prompts_per_rollout_batch
        if groups % world:
            raise ConfigError(
                f"setting 'rollout_batch_size' ({self.rollout_batch_size}) holds {groups} groups "
                f"of group_size {self.group_size}, which do not split into whole groups over "
                f"the world size ({world} processes under torchrun): make rollout_batch_size / "
                f"group_size a multiple of {world}"
            )
        check_world_batches(self, world, "train_batch_size", "gradient_accumulation_steps")

    def _validate_variants(self) -> None:
        """The policy-gradient variants' settings (docs/algorithms.md); a setting that would
        be ignored under the others is refused rather than silently unused."""
        for name in ("cliprange_low", "cliprange_high"):
            value = getattr(self, name)
            if value is None:
                continue
            if self.loss_type not in CLIP_PAIR_LOSSES:
                raise ConfigError(
                    f"setting {name!r} is set ({value}) but loss_type {self.loss_type!r} does "
                    f"not use it; it applies to {list(CLIP_PAIR_LOSSES)} (grpo_clip takes "
                    "cliprange)"
                )
            if not 0 < value:
                raise ConfigError(f"setting {name!r} must be > 0, got {value}")
        if self.loss_type in CLIP_PAIR_LOSSES:
            low = self.cliprange if self.cliprange_low is None else self.cliprange_low
            high = self.cliprange if self.cliprange_high is None else self.cliprange_high
            if not 0 < low < 1 or not 0 < high:
                raise ConfigError(
                    f"loss_type {self.loss_type!r} clips the ratio to [1 - low, 1 + high] with "
                    f"0 < low < 1 and high > 0; got low {low}, high {high} (settings "
                    "'cliprange_low', 'cliprange_high', else 'cliprange')"
                )
        check_positive(self, "sapo_tau_pos", "sapo_tau_neg")
        if self.advantage_estimator != "grpo" and not self.use_std_normalization:
            raise ConfigError(
                "setting 'use_std_normalization' is false but applies only to "
                f"advantage_estimator grpo, not {self.advantage_estimator!r} (dr_grpo is the "
                "group mean without the std)"
            )
        if self.length_normalization == "token_mean" and self.normalize_constant is not None:
            raise ConfigError(
                "setting 'normalize_constant' is set but length_normalization token_mean "
                "counts the train batch's tokens instead; leave it null"
            )
        check_non_negative(self, "kl_coef", "dynamic_sampling_max_rounds")
        if self.overlong_cache_tokens is not None:
            if self.overlong != "soft_penalty":
                raise ConfigError(
                    "setting 'overlong_cache_tokens' is set but applies only to overlong: "
                    f"soft_penalty, not {self.overlong!r}"
                )
            if not 0 < self.overlong_cache_tokens <= self.sampling_max_tokens:
                raise ConfigError(
                    "setting 'overlong_cache_tokens' must lie in [1, sampling_max_tokens "
                    f"({self.sampling_max_tokens})], got {self.overlong_cache_tokens}"
                )
        if self.train_examples is not None and self.train_examples < 1:
            raise ConfigError(
                f"setting 'train_examples' must be >= 1 (or null), got {self.train_examples}"
            )

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
    def overlong_cache(self) -> int:
        """soft_penalty's ramp in tokens: ``overlong_cache_tokens``, else a fifth of
        ``sampling_max_tokens`` (at least 1)."""
        if self.overlong_cache_tokens is not None:
            return self.overlong_cache_tokens
        return max(1, self.sampling_max_tokens // 5)

    @property
    def loss(self) -> PolicyGradientLoss:
        """The objective; ``masked_normalize`` divides by ``normalize_constant``, by default
        the sampling ``max_tokens``; ``token_mean``'s constant is counted per train batch
        (:func:`~reasoning_core.runtime.training.updates.grpo_update`)."""
        return PolicyGradientLoss(
            loss_type=self.loss_type,
            cliprange=self.cliprange,
            length_normalization=self.length_normalization,
            normalize_constant=(
                None
                if self.length_normalization == "token_mean"
                else self.normalize_constant or float(self.sampling_max_tokens)
            ),
            cliprange_low=self.cliprange_low,
            cliprange_high=self.cliprange_high,
            sapo_tau_pos=self.sapo_tau_pos,
            sapo_tau_neg=self.sapo_tau_neg,
            kl_coef=self.kl_coef,
            kl_estimator=self.kl_estimator,
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


def load_reference(cfg: GRPOConfig) -> torch.nn.Module:
    """The KL penalty's frozen reference policy: the starting model (``model_path``), loaded
    as the policy is, its weights never trained (no gradient)."""
    reference, _ = load_policy(cfg)
    reference.requires_grad_(False)
    return reference


def trained_rewards(
    cfg: GRPOConfig, ro: RolloutBatch, step: int, round_: int
) -> tuple[torch.Tensor, dict[str, float]]:
    """The rewards (rollouts,) float32 the policy trains on, and what to log of them: the
    verifier's, or the control's (``reward_control``: random, shuffled with a generator keyed
    by ``(seed, step, round_)``; format_only), plus DAPO's soft length penalty
    (``overlong: soft_penalty``). With neither, the verifier's rewards and no extra key."""
    raw = torch.tensor(ro.rewards, dtype=torch.float32)
    if cfg.reward_control == "none" and cfg.overlong != "soft_penalty":
        return raw, {}
    stats: dict[str, float] = {}
    if cfg.reward_control != "none":
        gen = torch.Generator().manual_seed(
            step_seed(cfg.seed, Stream.REWARD_CONTROL, step, round_)
        )
        fmt = torch.tensor([s["format_reward"] for s in ro.scores], dtype=torch.float32)
        raw = control_rewards(cfg.reward_control, raw, fmt, gen)
    if cfg.overlong == "soft_penalty":
        lengths = torch.tensor(ro.lengths)
        penalty = soft_overlong_penalty(lengths, cfg.sampling_max_tokens, cfg.overlong_cache)
        raw = raw + penalty
        stats["overlong_penalty"] = float(penalty.mean())
    stats["trained_reward"] = float(raw.mean())
    return raw, stats


def select_groups(parts: list[tuple[RolloutBatch, int]], group_size: int) -> RolloutBatch:
    """One rollout batch of the groups ``parts`` names, in order: (batch, group index) pairs,
    each group's ``group_size`` consecutive rows; its ``seconds`` sum those of every distinct
    batch the groups come from."""
    out = RolloutBatch([], [], [], [], [], {})
    scores: list[dict] = []
    for batch, group in parts:
        rows = slice(group * group_size, (group + 1) * group_size)
        out.prompts += batch.prompts[rows]
        out.responses += batch.responses[rows]
        out.ground_truths += batch.ground_truths[rows]
        out.lengths += batch.lengths[rows]
        out.completions += batch.completions[rows]
        scores += batch.scores[rows]
    out.scores = scores
    for batch in {id(b): b for b, _ in parts}.values():
        for key, value in batch.seconds.items():
            out.seconds[key] = out.seconds.get(key, 0.0) + value
    return out


def sample_rollout_batch(
    cfg: GRPOConfig, t, rollouts: Rollouts, step: int
) -> tuple[RolloutBatch, torch.Tensor, RolloutBatch, dict[str, float]] | None:
    """Step ``step``'s rollout batch: ``(batch, rewards to train on, the first round's batch,
    metrics)``.

    Without ``dynamic_sampling``: one round, the batch is the first round. With it, DAPO's
    dynamic sampling (:func:`reasoning_core.dynamic_sampling_keep`): groups whose trained
    rewards are all equal are dropped, and extra rounds (other questions, keyed by the round)
    sample more until ``n_prompts_per_rollout_batch`` groups are kept or
    ``dynamic_sampling_max_rounds`` extra rounds are spent; then the kept groups fill what is
    left in order (``dynamic_sampling/repeated`` counts them). None when no round kept a
    group. Logs ``dynamic_sampling/rounds`` (extra rounds), ``dynamic_sampling/kept`` (the
    share of the first round's groups kept) and ``dynamic_sampling/repeated``."""
    count = cfg.n_prompts_per_rollout_batch
    first = sample_and_grade(t.engine, t.model, rollouts, step=step, count=count)
    rewards, stats = trained_rewards(cfg, first, step, 0)
    if not cfg.dynamic_sampling:
        return first, rewards, first, stats
    keep = dynamic_sampling_keep(rewards, cfg.group_size)
    kept = [(first, rewards, int(g)) for g in keep.nonzero().flatten()]
    rounds = 0
    while len(kept) < count and rounds < cfg.dynamic_sampling_max_rounds:
        rounds += 1
        more = sample_and_grade(t.engine, t.model, rollouts, step=step, count=count, round_=rounds)
        more_rewards, _ = trained_rewards(cfg, more, step, rounds)
        more_keep = dynamic_sampling_keep(more_rewards, cfg.group_size)
        kept += [(more, more_rewards, int(g)) for g in more_keep.nonzero().flatten()]
    stats = {
        **stats,
        "dynamic_sampling/rounds": float(rounds),
        "dynamic_sampling/kept": float(keep.float().mean()),
    }
    if not kept:
        print(
            f"[grpo] step {step + 1}: dynamic sampling kept no group in {rounds + 1} rounds "
            "(every group's rewards equal); no optimizer step on it",
            file=sys.stderr,
        )
        return None
    repeated = max(0, count - len(kept))
    kept = (kept * (count // len(kept) + 1))[:count]
    stats["dynamic_sampling/repeated"] = float(repeated)
    batch = select_groups([(b, g) for b, _, g in kept], cfg.group_size)
    group_rewards = [r[g * cfg.group_size : (g + 1) * cfg.group_size] for _, r, g in kept]
    return batch, torch.cat(group_rewards), first, stats


def train(cfg: GRPOConfig, out: str) -> dict:
    """Run GRPO into folder ``out`` (resuming from ``out/state``); returns ``done.json``'s data."""
    started = start_run(cfg, out, "grpo")
    if started is None:
        return {}
    device, task = started
    # A pool smaller than a rollout batch's questions is drawn with replacement.
    questions = load_questions(
        cfg, task, 1, f"setting 'train_split': {cfg.train_split!r} has no training questions"
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

    # The frozen reference of the KL penalty: the starting model (model_path), also on resume.
    reference = load_reference(cfg) if cfg.kl_coef > 0 else None

    check = RolloutCheck(warn_threshold=cfg.logprob_diff_warn, method="grpo", tis_cap=cfg.tis)
    bar = progress(total=cfg.n_grpo_steps, initial=grpo_step, desc="grpo", enabled=cfg.progress)
    while grpo_step < cfg.n_grpo_steps:
        # 1. Sample group_size responses to each of this step's questions; grade them; the
        # rewards to train on (a control's, a length penalty added); with dynamic sampling,
        # only groups whose rewards differ, sampling more rounds until the batch is full.
        filled = sample_rollout_batch(cfg, t, rollouts, grpo_step)
        if filled is None:  # dynamic sampling kept no group: nothing to learn from this step
            grpo_step += 1
            bar.update(1)
            if after_iteration(t, cfg.n_grpo_steps, grpo_step=grpo_step, opt_step=opt_step):
                break
            continue
        ro, raw_rewards, first, sampling_stats = filled
        t_prepare = time.perf_counter()
        # 2. Advantages of the rewards: advantage_estimator grpo is the group normalization
        # (the setting use_std_normalization is the core's normalize_by_std).
        if cfg.advantage_estimator == "grpo":
            advantages, adv_meta = group_normalize(
                raw_rewards=raw_rewards,
                group_size=cfg.group_size,
                advantage_eps=cfg.advantage_eps,
                normalize_by_std=cfg.use_std_normalization,
            )
        else:
            advantages, adv_meta = compute_advantages(
                raw_rewards, cfg.group_size, cfg.advantage_estimator, cfg.advantage_eps
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
        ref_log_probs = None
        if reference is not None:  # once per rollout batch, as the old log-probs
            ref_log_probs = compute_old_log_probs(
                reference, tokens, device, score_micro, share_prompts=cfg.share_prompts
            )
        loss_mask = None
        if cfg.overlong == "mask":
            truncated = torch.tensor([c.finish_reason == "length" for c in ro.completions])
            loss_mask = mask_truncated(tokens.response_mask, truncated)
        scored = ScoredRollouts(
            tokens=tokens,
            raw_rewards=raw_rewards,
            advantages=advantages,
            old_log_probs=old_log_probs if cfg.needs_old_log_probs else None,
            token_weights=token_weights,
            ref_log_probs=ref_log_probs,
            loss_mask=loss_mask,
        )
        # The policy's sample as drawn (dynamic sampling's first round): the verifier's reward,
        # comparable with any other run's.
        rollout_stats = {
            **reward_means(first.scores),
            **first.grade_metrics,  # this rollout batch's, repeated on each of its lines
            "response_length": first.mean_length,
            "rollout/truncated": first.truncated,
            "frac_constant_groups": float(adv_meta["frac_constant_groups"]),
            **sampling_stats,
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
