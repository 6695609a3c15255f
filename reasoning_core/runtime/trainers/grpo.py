"""GRPO and its policy-gradient relatives (CS336 assignment 5, Algorithm 3).

Each GRPO step: sample ``rollout_batch_size / group_size`` questions, sync the policy's weights
into the rollout engine, sample ``group_size`` responses per question, grade them, turn the
rewards into group-normalized advantages, and take
``epochs_per_rollout_batch * rollout_batch_size / train_batch_size`` optimizer steps on the
rollout batch (each over ``gradient_accumulation_steps`` micro batches).

``loss_type`` picks the objective and ``advantage_estimator`` the advantages, each a name in
the core's registries (:data:`reasoning_core.POLICY_LOSSES`,
:data:`reasoning_core.ADVANTAGE_ESTIMATORS`; docs/algorithms.md tabulates them). A loss whose
entry reads ``old_log_probs`` (a ratio to the sampling policy) gets them once per rollout
batch, without gradients, before the first optimizer step on it; the settings
(:class:`~reasoning_core.runtime.trainers.grpo_config.GRPOConfig`) live in their own module.

Every rollout batch is checked against the engine that sampled it: the engine's log-probs of
its sampled tokens against the sampling policy's (the old log-probs where they are computed,
else the first optimizer step's own forward, no extra pass), logged under ``rollout/``
(:mod:`reasoning_core.runtime.training.engine_check`); ``rollout_correction: tis`` weights each
token's loss by truncated importance sampling (docs/rollout_mismatch.md).

Run: ``rrl grpo --config workflow/config/methods/tiny.yaml --set model_path=... --out DIR``.
"""

from __future__ import annotations

import contextlib
import sys
import time

import torch

from reasoning_core import (
    compute_advantages,
    control_rewards,
    dynamic_sampling_keep,
    mask_truncated,
    soft_overlong_penalty,
)
from reasoning_core.runtime.run.rng import Stream, step_seed
from reasoning_core.runtime.trainers import lifecycle
from reasoning_core.runtime.trainers.grpo_config import GRPOConfig
from reasoning_core.runtime.trainers.lifecycle import (
    after_iteration,
    evaluate_pending,
    finish_training,
    progress,
    run_main,
    setup_training,
    start_run,
)
from reasoning_core.runtime.training.async_rollout import WorkerRollouts
from reasoning_core.runtime.training.batching import MicroBatchSize, check_packable
from reasoning_core.runtime.training.engine_check import RolloutCheck
from reasoning_core.runtime.training.episodes import (
    episode_metrics,
    rollout_tokens,
    sample_episodes,
)
from reasoning_core.runtime.training.offpolicy import PolicyVersions, offpolicy_correction
from reasoning_core.runtime.training.policy import load_policy
from reasoning_core.runtime.training.rollouts import (
    RolloutBatch,
    Rollouts,
    load_questions,
    reward_means,
    sample_and_grade,
    sum_seconds,
)
from reasoning_core.runtime.training.updates import ScoredRollouts, fixed_log_probs, grpo_update

__all__ = ["GRPOConfig", "main", "train"]


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


def sample_rollout_batch(
    cfg: GRPOConfig, t, rollouts: Rollouts, step: int, sampler
) -> tuple[RolloutBatch, torch.Tensor, RolloutBatch, dict[str, float]] | None:
    """Step ``step``'s rollout batch: ``(batch, rewards to train on, the first round's batch,
    metrics)``, sampled by the engine synced from ``sampler`` (the policy, or with
    ``rollout_lag`` an older version of its weights).

    Without ``dynamic_sampling``: one round, the batch is the first round. With it, DAPO's
    dynamic sampling (:func:`reasoning_core.dynamic_sampling_keep`): groups whose trained
    rewards are all equal are dropped, and extra rounds (other questions, keyed by the round)
    sample more until ``n_prompts_per_rollout_batch`` groups are kept or
    ``dynamic_sampling_max_rounds`` extra rounds are spent; then the kept groups fill what is
    left in order (``dynamic_sampling/repeated`` counts them). None when no round kept a
    group. Logs ``dynamic_sampling/rounds`` (extra rounds), ``dynamic_sampling/kept`` (the
    share of the first round's groups kept) and ``dynamic_sampling/repeated``."""
    count = cfg.n_prompts_per_rollout_batch
    # Setting env: multi-turn episodes of an environment, or today's one completion each.
    sample = sample_and_grade if cfg.env == "single_turn" else sample_episodes
    first = sample(t.engine, sampler, rollouts, step=step, count=count)
    rewards, stats = trained_rewards(cfg, first, step, 0)
    if not cfg.dynamic_sampling:
        return first, rewards, first, stats
    keep = dynamic_sampling_keep(rewards, cfg.group_size)
    kept = [(first, rewards, int(g)) for g in keep.nonzero().flatten()]
    rounds = 0
    while len(kept) < count and rounds < cfg.dynamic_sampling_max_rounds:
        rounds += 1
        more = sample(t.engine, sampler, rollouts, step=step, count=count, round_=rounds)
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
    size = cfg.group_size
    # The kept groups' rows; the time of every round that gave one.
    seconds = sum_seconds({id(b): b for b, _, _ in kept}.values())
    batch = RolloutBatch.concat([b.rows(g * size, (g + 1) * size) for b, _, g in kept], seconds)
    group_rewards = [r[g * size : (g + 1) * size] for _, r, g in kept]
    return batch, torch.cat(group_rewards), first, stats


def engine_factory():
    """How a rollout worker builds its engine: the trainers' own (looked up now, so that a
    test's stand-in engine reaches the worker too)."""
    return lifecycle.make_rollout_engine


def train(cfg: GRPOConfig, out: str) -> dict:
    """Run GRPO into folder ``out`` (resuming from ``out/state``); returns ``done.json``'s data.
    What the run opens that must close however it ends (a rollout worker) is entered into
    one exit stack here, so the loop itself stays flat."""
    with contextlib.ExitStack() as cleanup:
        return _train(cfg, out, cleanup)


def _train(cfg: GRPOConfig, out: str, cleanup: contextlib.ExitStack) -> dict:
    started = start_run(cfg, out, "grpo")
    if started is None:
        return {}
    device, task = started
    # A pool smaller than a rollout batch's questions is drawn with replacement.
    questions = load_questions(
        cfg, task, 1, f"setting 'train_split': {cfg.train_split!r} has no training questions"
    )
    rollouts = Rollouts.from_config(cfg, task, questions, sync_every=cfg.sync_every)
    t = setup_training(
        cfg,
        out,
        "grpo",
        task,
        cfg.n_grpo_steps * cfg.steps_per_rollout_batch,
        evaluate_at_start=not cfg.worker_evaluates,
    )
    if cfg.share_prompts:  # attn_implementation "auto" may have chosen FlashAttention 2
        check_packable(t.model)
    grpo_step, opt_step = t.resumed("grpo_step"), t.resumed("opt_step")
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name="grpo")
    score_micro = MicroBatchSize(
        cfg.micro_batch_size, backoff=cfg.oom_backoff, name="grpo old log-probs"
    )

    # The frozen reference of the KL penalty: the starting model (model_path), also on resume.
    reference = load_reference(cfg) if cfg.kl_coef > 0 else None

    # The check also weighs the loss: TIS, or the off-policy correction (proximal: the old
    # log-probs, or the first update's forward when none are scored; behaviour: the engine).
    check = RolloutCheck(
        warn_threshold=cfg.logprob_diff_warn,
        method="grpo",
        tis_cap=cfg.tis,
        correction=offpolicy_correction(cfg),
    )
    # With rollout_lag L, step k samples with the weights of step k - L (lag 0: the policy).
    versions = PolicyVersions.resumed(cfg.rollout_lag, t.run.resumed_extra)
    bar = progress(total=cfg.n_grpo_steps, initial=grpo_step, desc="grpo", enabled=cfg.progress)
    # In-process, or with rollout_worker a process beside the learner, stopped by `cleanup`.
    source = cleanup.enter_context(
        WorkerRollouts(
            cfg,
            versions,
            sample_rollout_batch,
            engine_factory(),
            t.run.resumed_extra,
            lifecycle.Evaluator,
        )
    )
    # With the fixed-lag worker, the worker evaluates (step 0 too) while the learner trains.
    t = t._replace(evaluator=source.evaluator(t.evaluator, t.run, grpo_step))
    if cfg.worker_evaluates and t.counters is None and cfg.eval_at_start:
        t.evaluator(t.engine, t.model, 0, t.run)
    evaluate_pending(t)
    while grpo_step < cfg.n_grpo_steps:
        # 1. Sample group_size responses to each of this step's questions; grade them; the
        # rewards to train on (a control's, a length penalty added); with dynamic sampling,
        # only groups whose rewards differ, sampling more rounds until the batch is full.
        filled = source.batch(t, rollouts, grpo_step)
        if filled is None:  # dynamic sampling kept no group: nothing to learn from this step
            grpo_step += 1
            bar.update(1)
            if after_iteration(
                t, cfg.n_grpo_steps, source.state(), grpo_step=grpo_step, opt_step=opt_step
            ):
                break
            continue
        ro, raw_rewards, first, sampling_stats = filled
        t_prepare = time.perf_counter()
        # 2. Advantages of the rewards, by the registered estimator (use_std_normalization
        # false selects grpo's version without the std, dr_grpo).
        advantages, adv_meta = compute_advantages(
            raw_rewards, cfg.group_size, cfg.estimator, cfg.advantage_eps
        )
        # 3. Tokenize once; 4. the sampling policy's log-probs, when the loss has a ratio
        # (or TIS needs them); the engine's log-probs of the same tokens, checked against them
        # (or against the first update's forward).
        # Episodes as sampled, their observations out of the response mask; else the text.
        tokens = rollout_tokens(ro, t.tokenizer)
        old_log_probs = None
        if cfg.scores_old_log_probs:
            old_log_probs = fixed_log_probs(
                t.model, tokens, device, score_micro, share_prompts=cfg.share_prompts
            )
        token_weights = check.start(
            tokens.labels, tokens.response_mask, ro.completions, old_log_probs
        )
        staleness = source.metrics(ro.versions, grpo_step)
        ref_log_probs = None
        if reference is not None:  # once per rollout batch, as the old log-probs
            ref_log_probs = fixed_log_probs(
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
            **(episode_metrics(first.episodes) if first.episodes else {}),
            **staleness,
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
                stats, checked = grpo_update(
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
                check.after_update(checked)
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
        if after_iteration(
            t, cfg.n_grpo_steps, source.state(), grpo_step=grpo_step, opt_step=opt_step
        ):
            break  # max_wall_seconds spent
    bar.close()
    return finish_training(t, step=opt_step, evaluated=source.release)


def main(argv: list[str] | None = None) -> int:
    return run_main(GRPOConfig, "grpo", train, argv, "GRPO training")
