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

Run: ``rrl grpo --config workflow/config/methods/tiny.yaml --set model_path=... --out DIR``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Literal

import torch

from reasoning_core.runtime.config import ConfigError
from reasoning_core.runtime.trainer_common import (
    CommonConfig,
    MicroBatchSize,
    after_iteration,
    check_at_least_one,
    check_divisible,
    check_sampling,
    finish_training,
    grade,
    load_questions,
    masked_token_mean,
    micro_batches,
    policy_log_probs,
    progress,
    reward_means,
    rollout_params,
    run_main,
    setup_training,
    start_run,
    step_rng,
    step_seed,
    tokenize_pairs,
    with_micro_batch,
)

RATIO_LOSSES = ("grpo_clip", "grpo_no_clip")


@dataclass
class GRPOConfig(CommonConfig):
    """GRPO settings; defaults are the handout's (Qwen2.5-Math-1.5B on MATH)."""

    n_grpo_steps: int = 200
    lr: float = 1e-5
    advantage_eps: float = 1e-6
    rollout_batch_size: int = 256
    group_size: int = 8
    sampling_temperature: float = 1.0
    sampling_top_p: float = 1.0
    sampling_min_tokens: int = 4  # as in Expert Iteration, disallow empty responses
    sampling_max_tokens: int = 1024
    epochs_per_rollout_batch: int = 1  # 1: on-policy
    train_batch_size: int = 256  # 256 with rollout_batch_size 256: on-policy
    gradient_accumulation_steps: int = 128  # micro batch size = 256 / 128 = 2
    loss_type: str = "reinforce_with_baseline"
    use_std_normalization: bool = True
    cliprange: float = 0.2
    length_normalization: Literal["masked_mean", "masked_normalize"] = "masked_mean"
    normalize_constant: float | None = None  # for masked_normalize; None: sampling_max_tokens
    old_log_probs: Literal["auto", "none"] = "auto"  # auto: recompute when the loss needs them
    train_examples: int | None = None  # size of the training question pool (None: task default)
    eval_every: int = 5  # GRPO steps
    save_every: int = 5  # GRPO steps

    def validate(self) -> None:
        from reasoning_core import LOSS_TYPES

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
        if self.loss_type == "grpo_clip" and self.cliprange <= 0:
            raise ConfigError(
                f"setting 'cliprange' must be > 0 for grpo_clip, got {self.cliprange}"
            )
        if self.normalize_constant is not None and self.normalize_constant <= 0:
            raise ConfigError("setting 'normalize_constant' must be > 0")
        if self.advantage_eps < 0:
            raise ConfigError("setting 'advantage_eps' must be >= 0")
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


def rollout(cfg: GRPOConfig, engine, model, examples, task, reward_fn, grpo_step: int, params):
    """Sample ``group_size`` responses for this step's questions; grade them."""
    rng = step_rng(cfg.seed, 1, grpo_step)
    picked = rng.choice(len(examples), size=cfg.n_prompts_per_rollout_batch, replace=False)
    questions = [examples[int(i)] for i in picked]
    prompts = [task.format_prompt(ex, cfg.template) for ex in questions]
    t0 = time.perf_counter()
    engine.sync_weights(model)
    t1 = time.perf_counter()
    outs = engine.generate(prompts, params.replace(seed=step_seed(cfg.seed, 2, grpo_step)))
    t2 = time.perf_counter()
    rep_prompts, responses, truths, lengths = [], [], [], []
    for prompt, ex, group in zip(prompts, questions, outs, strict=True):
        assert len(group) == cfg.group_size, "engine returned the wrong number of samples"
        for completion in group:
            rep_prompts.append(prompt)
            responses.append(completion.text)
            truths.append(ex.ground_truth)
            lengths.append(len(completion.token_ids))
    scores = grade(reward_fn, responses, truths)
    return {
        "prompts": rep_prompts,
        "responses": responses,
        "ground_truths": truths,
        "scores": scores,
        "lengths": lengths,
        "time/sync": t1 - t0,
        "time/rollout": t2 - t1,
        "time/grade": time.perf_counter() - t2,
    }


@torch.no_grad()
def compute_old_log_probs(
    model, batch, device, micro_batch_size: int | MicroBatchSize
) -> torch.Tensor:
    """Log-probs of every response token under the current (sampling) policy, no gradient."""
    n, width = batch["input_ids"].shape

    def score(size: int) -> torch.Tensor:
        old = torch.zeros(n, width, dtype=torch.float32)
        for micro in micro_batches(batch, list(range(n)), size):
            lp, _ = policy_log_probs(model, micro, device, with_entropy=False)
            old[micro["rows"], : lp.shape[1]] = lp.float().cpu()
        return old

    return with_micro_batch(micro_batch_size, score)


def accumulate_gradients(
    size: int,
    *,
    model,
    optimizer,
    cfg: GRPOConfig,
    batch: dict,
    rows: torch.Tensor,
    raw: torch.Tensor,
    advantages: torch.Tensor,
    old: torch.Tensor | None,
    device: torch.device,
    normalize_constant: float,
) -> tuple[float, float, int, float]:
    """The gradient of one train batch (``rows`` of the rollout batch), accumulated over micro
    batches of ``size`` rows from zero. Returns the loss, the sum and count of response-token
    entropies and the token-weighted clip-fraction sum."""
    from reasoning_core import grpo_microbatch_train_step

    optimizer.zero_grad(set_to_none=True)
    # Equal micro batches (size divides train_batch_size): the mean of their means over
    # `steps` is the batch mean.
    steps = len(rows) // size
    loss_sum, ent_sum, ent_n, clip_sum = 0.0, 0.0, 0, 0.0
    for mb in micro_batches(batch, rows, size):
        r = mb["rows"]
        width = mb["input_ids"].shape[1]
        log_probs, entropy = policy_log_probs(model, mb, device)
        mask = mb["response_mask"].to(device)
        loss, meta = grpo_microbatch_train_step(
            policy_log_probs=log_probs,
            response_mask=mask,
            gradient_accumulation_steps=steps,
            loss_type=cfg.loss_type,
            raw_rewards=raw[r].unsqueeze(1).to(device),
            advantages=advantages[r].unsqueeze(1).to(device),
            old_log_probs=None if old is None else old[r, :width].to(device),
            cliprange=cfg.cliprange,
            length_norm=cfg.length_normalization,
            normalize_constant=normalize_constant,
        )
        loss_sum += float(loss)
        s, c = masked_token_mean(entropy, mask)
        ent_sum, ent_n = ent_sum + s, ent_n + c
        clip_sum += float(meta["clip_fraction"]) * c
    return loss_sum, ent_sum, ent_n, clip_sum


def train(cfg: GRPOConfig, out: str) -> dict:
    from reasoning_core import group_normalize

    started = start_run(cfg, out, "grpo")
    if started is None:
        return {}
    device, task = started
    reward_fn = task.reward_fn(cfg.template)
    examples = load_questions(
        cfg,
        task,
        cfg.n_prompts_per_rollout_batch,
        "setting 'train_examples': {n} training questions, fewer than the "
        f"{cfg.n_prompts_per_rollout_batch} prompts of one rollout batch",
    )
    total_steps = cfg.n_grpo_steps * cfg.steps_per_rollout_batch
    tr = setup_training(cfg, out, "grpo", task, total_steps)
    run, model, tokenizer, engine = tr.run, tr.model, tr.tokenizer, tr.engine
    optimizer, scheduler = tr.optimizer, tr.scheduler
    grpo_step = tr.counters["grpo_step"] if tr.counters else 0
    opt_step = tr.counters["opt_step"] if tr.counters else 0
    params = rollout_params(cfg)
    norm_constant = cfg.normalize_constant or float(cfg.sampling_max_tokens)
    n_train_batches = cfg.rollout_batch_size // cfg.train_batch_size
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name="grpo")
    score_micro = MicroBatchSize(
        cfg.micro_batch_size, backoff=cfg.oom_backoff, name="grpo old log-probs"
    )

    bar = progress(total=cfg.n_grpo_steps, initial=grpo_step, desc="grpo", enabled=cfg.progress)
    while grpo_step < cfg.n_grpo_steps:
        ro = rollout(cfg, engine, model, examples, task, reward_fn, grpo_step, params)
        t_train = time.perf_counter()
        raw = torch.tensor([s["reward"] for s in ro["scores"]], dtype=torch.float32)
        advantages, adv_meta = group_normalize(
            raw_rewards=raw,
            group_size=cfg.group_size,
            advantage_eps=cfg.advantage_eps,
            normalize_by_std=cfg.use_std_normalization,
        )
        batch = tokenize_pairs(ro["prompts"], ro["responses"], tokenizer)
        old = None
        if cfg.needs_old_log_probs:
            old = compute_old_log_probs(model, batch, device, score_micro)
        rollout_stats = reward_means(ro["scores"])
        rollout_stats["response_length"] = sum(ro["lengths"]) / len(ro["lengths"])
        rollout_stats["frac_constant_groups"] = float(adv_meta["frac_constant_groups"])
        first_step_of_batch = True
        for epoch in range(cfg.epochs_per_rollout_batch):
            gen = torch.Generator().manual_seed(step_seed(cfg.seed, 3, grpo_step, epoch))
            order = torch.randperm(cfg.rollout_batch_size, generator=gen)
            for b in range(n_train_batches):
                rows = order[b * cfg.train_batch_size : (b + 1) * cfg.train_batch_size]
                t0 = time.perf_counter()
                lr = optimizer.param_groups[0]["lr"]

                reset = lambda: optimizer.zero_grad(set_to_none=True)  # noqa: E731
                accumulate = functools.partial(
                    accumulate_gradients,
                    model=model,
                    optimizer=optimizer,
                    cfg=cfg,
                    batch=batch,
                    rows=rows,
                    raw=raw,
                    advantages=advantages,
                    old=old,
                    device=device,
                    normalize_constant=norm_constant,
                )
                loss_sum, ent_sum, ent_n, clip_sum = micro.call(accumulate, reset=reset)
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                opt_step += 1
                values = {
                    "grpo_step": grpo_step + 1,
                    "loss": loss_sum,
                    "grad_norm": float(grad_norm),
                    "entropy": ent_sum / max(1, ent_n),
                    "clip_fraction": clip_sum / max(1, ent_n),
                    "lr": lr,
                    **rollout_stats,
                    "time/train": time.perf_counter() - t0,
                }
                if micro.changed:  # logged only after an out-of-memory back-off
                    values["micro_batch_size"] = micro.size
                if first_step_of_batch:
                    # Rollout-side timings belong to the first step on this rollout batch.
                    values["time/rollout"] = ro["time/rollout"]
                    values["time/sync"] = ro["time/sync"]
                    values["time/grade"] = ro["time/grade"]
                    values["time/prepare"] = t0 - t_train
                    first_step_of_batch = False
                else:
                    values["time/rollout"] = 0.0
                    values["time/sync"] = 0.0
                run.log(values, step=opt_step, split="train")
                run.maybe_exit(opt_step)
        grpo_step += 1
        bar.update(1)
        bar.set_postfix(reward=f"{rollout_stats['reward']:.3f}", refresh=False)
        after_iteration(
            tr,
            done=grpo_step,
            total=cfg.n_grpo_steps,
            step=opt_step,
            grpo_step=grpo_step,
            opt_step=opt_step,
        )
    bar.close()
    return finish_training(tr, step=opt_step)


def main(argv: list[str] | None = None) -> int:
    return run_main(GRPOConfig, "grpo", train, argv, "GRPO training")
