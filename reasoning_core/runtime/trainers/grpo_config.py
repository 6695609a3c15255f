"""The settings of ``rrl grpo``: :class:`GRPOConfig`.

The choices of ``loss_type`` and ``advantage_estimator`` and the bounds of a loss's settings
are the registries' (:mod:`reasoning_core.registry`): validation asks the loss's entry, and
``--help`` lists the entries (``CHOICES``), so a new registered method needs no edit here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import torch

from reasoning_core import (
    ADVANTAGE_ESTIMATORS,
    OFFPOLICY_CORRECTIONS,
    POLICY_LOSSES,
    PRESETS,
    LossSettings,
)
from reasoning_core.registry import correction_settings
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.training import settings as checks
from reasoning_core.runtime.training.batching import PACKABLE_ATTENTION
from reasoning_core.runtime.training.settings import RolloutConfig, ShardingConfig


def param_default(name: str) -> float:
    """The default of a loss setting, from the registered loss that takes it."""
    return next(p.default for e in POLICY_LOSSES.values() for p in e.params if p.name == name)


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
    preset: str | None = None
    """A published method's settings at once (reasoning_core.PRESETS, listed below); any
    setting given explicitly wins over the preset's."""
    loss_type: str = "reinforce_with_baseline"
    """Policy-gradient loss, a name registered in reasoning_core.POLICY_LOSSES (listed below
    with each one's formula, paper and settings; docs/algorithms.md explains them)."""
    advantage_estimator: str = "grpo"
    """How rewards become advantages, a name registered in reasoning_core.ADVANTAGE_ESTIMATORS
    (listed below with each one's formula and paper)."""
    use_std_normalization: bool = True
    """Divide each group's advantages by its reward standard deviation (+ advantage_eps);
    false selects the estimator without that division (grpo: dr_grpo); the other estimators
    have none to drop."""
    cliprange: float = 0.2
    """grpo_clip's epsilon: the ratio is clipped to [1 - cliprange, 1 + cliprange]; the default
    of the clip pair of the losses that take cliprange_low and cliprange_high."""
    cliprange_low: float | None = None
    """The lower clip, 1 - cliprange_low, of the losses that take it (null: the loss's
    default, listed under loss_type)."""
    cliprange_high: float | None = None
    """The upper clip, 1 + cliprange_high, of the losses that take it (null: the loss's
    default, listed under loss_type)."""
    sapo_tau_pos: float = param_default("sapo_tau_pos")
    """sapo: the gate's temperature for tokens with a positive advantage."""
    sapo_tau_neg: float = param_default("sapo_tau_neg")
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
    """tis's cap (>= 1): no token's weight exceeds it (rollout_correction tis and
    offpolicy_correction tis)."""
    offpolicy_correction: str = "none"
    """Weight each response token's loss for samples drawn by another policy than the learner's
    at the start of the update (the engine's, rollout_lag versions old): a name registered in
    reasoning_core.OFFPOLICY_CORRECTIONS (listed below; docs/async.md). The proximal log-probs
    come from the update's own forward when a rollout batch takes one optimizer step and the
    loss has no ratio, else from a no-gradient pass once per rollout batch; logs
    offpolicy/masked, offpolicy/truncated and offpolicy/weight_mean."""
    decoupled_cap: float | None = None
    """decoupled: a token whose weight proximal/behaviour exceeds it is masked (null: none)."""
    icepop_low: float = 0.5
    """icepop: the lower end of the band of ratios whose tokens train."""
    icepop_high: float = 5.0
    """icepop: the upper end of the band of ratios whose tokens train."""
    geo_mask_low: float = 0.9
    """geo_mask: the lower end of the band of a response's geometric-mean ratio."""
    geo_mask_high: float = 1.1
    """geo_mask: the upper end of the band of a response's geometric-mean ratio."""
    rollout_lag: int = 0
    """Rollout batch k is sampled by the policy of GRPO step k - rollout_lag (the first
    rollout_lag batches by the starting policy): the staleness an asynchronous rollout worker
    has, reproducibly. 0: on-policy, as without the setting. Logs async/staleness_*."""
    rollout_worker: bool = False
    """Sample in a process of its own beside the learner (one torch thread each), overlapping
    sampling with training: step k's batch with the weights of step k - rollout_lag, as
    in-process (the same batches; needs rollout_lag >= 1 or max_staleness >= 1).
    docs/async.md."""
    max_staleness: int = 0
    """Free-running rollout worker (needs rollout_worker and rollout_lag 0): the worker samples
    batch after batch with the newest weights it holds, waiting only when it would run more
    than max_staleness batches ahead of the learner; a batch more than max_staleness versions
    older than the learner's weights is dropped, never trained on (logged as
    async/dropped_batches). Not reproducible: which version samples which batch depends on
    timing. 0: off (the fixed lag)."""
    worker_device: str | None = None
    """The device of the rollout worker's policy and engine, e.g. cuda:1 for a GPU of its own
    (null: setting device, as the learner's). Needs rollout_worker."""
    sort_micro_batches: bool = False
    """Sort each train batch's rows by length before cutting it into micro batches, so a micro
    batch pads to a near-equal longest row: less padding computed, the same batch mean up to
    rounding."""
    share_prompts: bool = False
    """Pack the rows of a micro batch that share a prompt into one sequence, the prompt once and
    its responses after it under a 4D attention mask: the same loss and gradient up to
    rounding, fewer tokens computed. Rows are then ordered by question. A multi-turn episode
    is packed whole, its tool results as context between the policy's tokens."""
    env: str = "single_turn"
    """The environment of the rollouts (envs.environment, listed below): single_turn (one
    completion per prompt, graded) or calculator (multi-turn: the model may call a calculator
    as <calc>12*34</calc> and is answered <result>408</result>; the r1_zero_calc prompt;
    docs/tools.md). Multi-turn episodes train on the policy's own tokens only; sampling_max_tokens
    bounds all of an episode's tokens after the prompt."""
    tool_max_calls: int = 4
    """env calculator: the calls an episode may make; a call past them ends the episode."""
    tool_prompt: str = "r1_zero_calc"
    """env calculator: the prompt, r1_zero_calc (r1_zero plus a sentence that shows the call
    syntax) or r1_zero (for a model that learnt the syntax elsewhere, e.g. SFT on the multiply
    task's tool transcripts; the tiny world's 256 positions cannot hold r1_zero_calc)."""
    tool_bonus: float = 0.0
    """env calculator: added to the training reward of an episode with at least one call
    answered without an error (a shaping term; answer_reward and the evaluations are the
    task's). At most 1. docs/tools.md."""
    train_examples: int | None = None
    """Size of the pool of training questions (null: the task's default). A pool smaller than
    the questions of a rollout batch is drawn with replacement: train_examples 1 is one-example
    RLVR, every group a new sample of the same problem."""
    eval_every: int = 5
    """Evaluate every N GRPO steps; 0: only at the start and the end."""
    save_every: int = 5
    """Save the resumable state every N GRPO steps; 0: never. With the fixed-lag rollout
    worker a due save waits for the first step at which no metrics line waits for an
    evaluation the worker runs, N steps at most (docs/async.md)."""

    # The settings whose choices are registries: --help and docs/configuration.md list them.
    CHOICES = {
        "env": checks.env_choices,
        "preset": lambda: {name: str(dict(values)) for name, values in PRESETS.items()},
        "loss_type": lambda: loss_choices(),
        "advantage_estimator": lambda: {
            e.name: f"{e.formula} ({e.paper})" for e in ADVANTAGE_ESTIMATORS.values()
        },
        "offpolicy_correction": lambda: {
            c.name: f"{c.formula} ({c.paper})" for c in OFFPOLICY_CORRECTIONS.values()
        },
    }
    PRESETS = PRESETS

    def validate(self) -> None:
        # First: sampling_max_tokens is the default constant of the loss's settings below.
        checks.check_at_least_one(
            self, "n_grpo_steps", "group_size", "epochs_per_rollout_batch", "sampling_max_tokens"
        )
        settings = self.loss  # the loss's own settings, checked by the registry's bounds
        if self.group_size < 2:
            raise ConfigError(
                f"setting 'group_size' must be >= 2 for group advantages, got {self.group_size}"
            )
        checks.check_divisible(self, "rollout_batch_size", "group_size")
        checks.check_divisible(self, "train_batch_size", "gradient_accumulation_steps")
        checks.check_divisible(self, "rollout_batch_size", "train_batch_size")
        if self.train_batch_size < self.group_size:
            raise ConfigError(
                f"setting 'train_batch_size' ({self.train_batch_size}) must be >= "
                f"'group_size' ({self.group_size})"
            )
        checks.check_sampling(self)
        if settings.entry.needs_old_log_probs and self.old_log_probs == "none":
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
        self._validate_variants()
        self._validate_offpolicy()
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
        self._validate_env()  # after the task's and template's own checks

    def _validate_env(self) -> None:
        """Setting ``env`` and its tool settings (:func:`checks.check_env_settings`, shared with
        ``rrl eval``), and ``tool_bonus``, which only training has."""
        if not 0.0 <= self.tool_bonus <= 1.0:
            raise ConfigError(f"setting 'tool_bonus' must lie in [0, 1], got {self.tool_bonus}")
        if self.env != "calculator" and self.tool_bonus:
            raise ConfigError(
                f"setting 'tool_bonus' belongs to env calculator; env is {self.env!r}"
            )
        checks.check_env_settings(self)

    @property
    def env_settings(self) -> dict:
        """The environment's own settings (the calculator's calls, prompt and bonus)."""
        if self.env != "calculator":
            return {}
        return {
            "max_calls": self.tool_max_calls,
            "prompt": self.tool_prompt,
            "bonus": self.tool_bonus,
        }

    def check_world(self, world: int) -> None:
        """Under ``torchrun`` on ``world`` processes: group seeding, whole groups per rank (the
        rollout batch's questions a multiple of the world size), and the train batch and its
        micro batches split evenly (docs/gpu.md, "Several GPUs")."""
        checks.check_group_seeding(self, world)
        if self.env != "single_turn":
            raise ConfigError(
                f"setting 'env' is {self.env!r}: multi-turn episodes run in one process; "
                f"not under torchrun ({world} processes)"
            )
        self.check_sharding()
        if self.rollout_lag > 0:
            # The saved versions are one process's whole weights; ranks would each keep theirs.
            raise ConfigError(
                f"setting 'rollout_lag' ({self.rollout_lag}) runs in one process only, not "
                f"under torchrun ({world} processes); set rollout_lag: 0 there (docs/async.md)"
            )
        if self.max_staleness > 0:
            # The worker is sent one process's whole weights; a sharded policy has none.
            raise ConfigError(
                f"setting 'max_staleness' ({self.max_staleness}) runs one rollout worker beside "
                f"one learner, not under torchrun ({world} processes); set max_staleness: 0 "
                "there (docs/async.md)"
            )
        groups = self.n_prompts_per_rollout_batch
        if groups % world:
            raise ConfigError(
                f"setting 'rollout_batch_size' ({self.rollout_batch_size}) holds {groups} groups "
                f"of group_size {self.group_size}, which do not split into whole groups over "
                f"the world size ({world} processes under torchrun): make rollout_batch_size / "
                f"group_size a multiple of {world}"
            )
        checks.check_world_batches(self, world, "train_batch_size", "gradient_accumulation_steps")

    def _validate_variants(self) -> None:
        """The policy-gradient variants' settings (docs/algorithms.md); a setting that would
        be ignored under the others is refused rather than silently unused."""
        takes = {p.name for p in POLICY_LOSSES[self.loss_type].params}
        optional = {f.name for f in fields(self) if f.default is None}
        for name in sorted({p.name for e in POLICY_LOSSES.values() for p in e.params}):
            # A clip of another loss's, set here, would be silently unused.
            value = getattr(self, name)
            if name in optional and value is not None and name not in takes:
                users = [e.name for e in POLICY_LOSSES.values() if e.param(name)]
                raise ConfigError(
                    f"setting {name!r} is set ({value}) but loss_type {self.loss_type!r} does "
                    f"not use it; it applies to {users}"
                )
        if self.estimator is None:  # use_std_normalization false, and nothing to drop
            raise ConfigError(
                "setting 'use_std_normalization' is false but applies only to the estimators "
                "with a std-free version ("
                + ", ".join(f"{e.name}: {e.without_std}" for e in _with_std())
                + f"), not {self.advantage_estimator!r}"
            )
        if self.length_normalization == "token_mean" and self.normalize_constant is not None:
            raise ConfigError(
                "setting 'normalize_constant' is set but length_normalization token_mean "
                "counts the train batch's tokens instead; leave it null"
            )
        checks.check_non_negative(self, "dynamic_sampling_max_rounds")
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

    def _validate_offpolicy(self) -> None:
        """The corrections' settings, every one checked whichever correction is chosen (a
        bad number is refused even where unused), and the lag."""
        if self.offpolicy_correction not in list(OFFPOLICY_CORRECTIONS):
            raise ConfigError(
                f"setting 'offpolicy_correction': unknown {self.offpolicy_correction!r}; "
                f"expected one of {list(OFFPOLICY_CORRECTIONS)}"
            )
        for name in OFFPOLICY_CORRECTIONS:
            try:
                correction_settings(name, self.correction_settings_given)
            except ValueError as exc:
                raise ConfigError(f"setting {exc}") from None
        if self.decoupled_cap is not None and self.offpolicy_correction != "decoupled":
            raise ConfigError(
                "setting 'decoupled_cap' is set but applies only to offpolicy_correction "
                f"decoupled, not {self.offpolicy_correction!r}"
            )
        if self.offpolicy_correction != "none":
            if self.rollout_correction != "none":
                raise ConfigError(
                    "settings 'rollout_correction' and 'offpolicy_correction' both weight the "
                    "loss; use offpolicy_correction alone (its tis is rollout_correction's)"
                )
            if self.old_log_probs == "none":
                raise ConfigError(
                    f"setting 'offpolicy_correction' is {self.offpolicy_correction!r}, which "
                    "needs the proximal policy's log-probs, but setting 'old_log_probs' is "
                    "'none'"
                )
        checks.check_non_negative(self, "rollout_lag")
        self._validate_worker()
        if self.rollout_worker and self.env != "single_turn":
            # The worker's episodes would cross processes untested; sample them in-process.
            raise ConfigError(
                f"setting 'rollout_worker' samples single-turn rollouts only; env "
                f"{self.env!r} runs its episodes in the learner's process"
            )
        if self.rollout_lag > 0 and self.sync_every != 1:
            raise ConfigError(
                f"setting 'rollout_lag' ({self.rollout_lag}) sets the engine's weights every "
                f"step; setting 'sync_every' must be 1, got {self.sync_every}"
            )

    def _validate_worker(self) -> None:
        """Settings ``rollout_worker``, ``max_staleness`` and ``worker_device``."""
        checks.check_non_negative(self, "max_staleness")
        if self.max_staleness and not self.rollout_worker:
            raise ConfigError(
                f"setting 'max_staleness' ({self.max_staleness}) bounds a free-running rollout "
                "worker; set rollout_worker: true (or max_staleness: 0)"
            )
        if self.max_staleness and self.rollout_lag:
            # Free running has no fixed version per batch; its bound is max_staleness.
            raise ConfigError(
                f"setting 'max_staleness' ({self.max_staleness}) runs the worker free, with the "
                f"newest weights it holds; setting 'rollout_lag' must be 0 there, got "
                f"{self.rollout_lag}"
            )
        if self.rollout_worker and self.rollout_lag < 1 and not self.max_staleness:
            raise ConfigError(
                "setting 'rollout_worker' needs rollout_lag >= 1 (or max_staleness >= 1): with "
                "lag 0 each batch waits for the update before it, and there is nothing to "
                "overlap"
            )
        if self.max_staleness and self.sync_every != 1:
            raise ConfigError(
                f"setting 'max_staleness' ({self.max_staleness}) sends the worker every "
                f"version; setting 'sync_every' must be 1, got {self.sync_every}"
            )
        if self.worker_device is None:
            return
        if not self.rollout_worker:
            raise ConfigError(
                f"setting 'worker_device' ({self.worker_device!r}) places the rollout worker; "
                "it needs rollout_worker: true"
            )
        try:
            torch.device(self.worker_device)
        except RuntimeError as exc:
            raise ConfigError(f"setting 'worker_device': {exc}") from None
        if self.worker_device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(
                f"setting 'worker_device' is {self.worker_device!r} but no CUDA GPU is available"
            )

    @property
    def correction_settings_given(self) -> dict[str, float | None]:
        """The values of every correction's settings, by name."""
        names = {p.name for c in OFFPOLICY_CORRECTIONS.values() for p in c.params}
        return {name: getattr(self, name) for name in names}

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
        """Whether the loss has a ratio to the sampling policy (its registry entry says)."""
        return POLICY_LOSSES[self.loss_type].needs_old_log_probs

    @property
    def estimator(self) -> str | None:
        """The advantage estimator used: ``advantage_estimator``, or the version of it
        without the std when ``use_std_normalization`` is false (None where it has none)."""
        try:
            entry = ADVANTAGE_ESTIMATORS[self.advantage_estimator]
        except ValueError as exc:
            raise ConfigError(f"setting 'advantage_estimator': {exc}") from None
        return entry.name if self.use_std_normalization else entry.without_std

    @property
    def worker_evaluates(self) -> bool:
        """The fixed-lag rollout worker runs the evaluations too (docs/async.md)."""
        return self.rollout_worker and not self.max_staleness

    @property
    def scores_old_log_probs(self) -> bool:
        """Whether each rollout batch gets the no-gradient pass of the sampling (proximal)
        policy: for the ratio losses, and for TIS or an off-policy correction when a rollout
        batch takes more than one optimizer step. With one step, the update's own forward is
        that policy's (its weights are still the ones the batch started with), so the weights
        come from it, detached, at no extra pass."""
        several = self.steps_per_rollout_batch > 1
        tis = self.rollout_correction == "tis" and several
        offpolicy = self.offpolicy_correction != "none" and several
        return self.needs_old_log_probs or tis or offpolicy

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
    def loss(self) -> LossSettings:
        """The objective's settings (:class:`reasoning_core.LossSettings`, validated there);
        ``masked_normalize`` divides by ``normalize_constant``, by default the sampling
        ``max_tokens``; ``token_mean``'s constant is counted per train batch
        (:func:`~reasoning_core.runtime.training.updates.grpo_update`)."""
        try:
            settings = LossSettings.of(self)
            if self.length_normalization == "token_mean":
                return settings
            return settings.with_constant(
                self.normalize_constant or float(self.sampling_max_tokens)
            )
        except ValueError as exc:
            raise ConfigError(f"settings of loss_type {self.loss_type!r}: {exc}") from None


def _with_std() -> list:
    return [e for e in ADVANTAGE_ESTIMATORS.values() if e.without_std is not None]


def loss_choices() -> dict[str, str]:
    """Each registered loss in words: formula, paper, settings with defaults and bounds."""
    out = {}
    for e in POLICY_LOSSES.values():
        params = "; takes " + ", ".join(p.describe() for p in e.params) if e.params else ""
        out[e.name] = f"{e.formula} ({e.paper}{params})"
    return out
