"""Expert iteration (CS336 assignment 5, Algorithm 2).

Each of ``n_ei_steps`` iterations: sample ``ei_batch_size`` questions, sync the policy's
weights into the rollout engine, sample ``group_size`` (G) responses per question
(``min_tokens`` 4, so no empty responses), grade them, keep the ones with reward 1 (correct
format and answer), and run SFT on the kept (prompt, response) pairs for ``sft_epochs`` epochs
(the optimizer and its state carry over between iterations).

Logged per iteration (a ``train`` line at the optimizer step where it starts): the rollout
rewards (``reward``, ``format_reward``, ``answer_reward``), ``kept`` examples, the rollouts
whose grading timed out or raised (``grade/timeouts``, ``grade/errors``; repeated on the
iteration's optimizer-step lines, so every train line carries them), and, under
``rollout/``, the response length, the mean token entropy of the sampled responses under
the policy that sampled them (the engine's per-token entropies when it returns them, as the hf
and static engines do; else from the forward below), and the engine's log-probs of its sampled
tokens checked against the policy's (``rollout/logprob_diff_mean`` and the other keys of
:mod:`reasoning_core.runtime.training.engine_check`, repeated on the iteration's optimizer-step lines)
from one no-gradient forward over the rollouts. Per optimizer step: ``loss``, ``grad_norm``,
``entropy`` (of the kept responses being trained on), ``response_length``, ``lr``.

Under ``torchrun`` (``rollout_seeding: group``) each rank samples and grades its contiguous
share of a round's questions, whole groups, and the shares are gathered, so every rank holds
the whole graded batch and keeps the same correct responses; the scoring forward is split the
same way and summed; each SFT step splits its batch over the ranks with the whole batch's
divisor (``rrl sft``'s own :func:`sft_update`). Every logged number is the global one, written
by rank 0: the run makes the same updates as one process with the same settings, up to float
rounding (docs/gpu.md, "Several GPUs").

Run: ``rrl ei --config workflow/config/methods/tiny.yaml --set model_path=... --out DIR``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation.generations import sampled_entropy
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
from reasoning_core.runtime.training.engine_check import (
    MismatchWarner,
    check_rollouts,
    engine_log_probs,
)
from reasoning_core.runtime.training.rollouts import (
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
    check_sampling,
    check_world_batches,
)
from reasoning_core.runtime.training.updates import score_rollouts, sft_update


@dataclass
class EIConfig(ShardingConfig, RolloutConfig):
    """Expert iteration: sample, keep the correct responses, SFT on them, repeat."""

    n_ei_steps: int = 5
    """Expert-iteration rounds (sample, keep the correct, SFT on them)."""
    ei_batch_size: int = 512
    """Questions sampled per round (the handout tries 512, 1024 and 2048)."""
    group_size: int = 4
    """Responses sampled per question."""
    sft_epochs: int = 1
    """SFT passes over each round's correct responses."""
    batch_size: int = 32
    """Examples per SFT optimizer step."""
    gradient_accumulation_steps: int = 8
    """Micro batches per optimizer step (micro batch = batch_size / this)."""
    normalize_constant: float = 1.0
    """Each example's summed response negative log-likelihood is divided by this."""
    sampling_temperature: float = 1.0
    """Temperature of the rollouts."""
    sampling_top_p: float = 1.0
    """Nucleus-sampling top_p of the rollouts."""
    sampling_min_tokens: int = 4
    """Fewest new tokens per rollout (no empty responses)."""
    sampling_max_tokens: int = 1024
    """Most new tokens per rollout."""
    log_rollout_entropy: bool = True
    """Log the policy's mean token entropy over each round's rollouts (rollout/entropy)."""
    logprob_check_rows: int | None = None
    """Rollouts of each round whose engine log-probs are checked against the policy's
    (``rollout/logprob_diff_*``), the round's first N in sampling order; null: all. The check
    costs a no-gradient forward over those rows and changes no update, so a sample of a round
    finds a broken weight sync as surely as the whole round does. All rows are scored anyway
    when the engine gives no per-token entropies (``rollout/entropy`` comes from that
    forward)."""
    train_examples: int | None = None
    """Size of the pool of training questions (null: the task's default)."""
    lr: float = 5e-5
    """Peak learning rate of AdamW."""
    eval_every: int = 1
    """Evaluate every N rounds; 0: only at the start and the end."""
    save_every: int = 1
    """Save the resumable state every N rounds; 0: never."""

    def validate(self) -> None:
        check_at_least_one(
            self, "n_ei_steps", "ei_batch_size", "group_size", "sft_epochs", "sampling_max_tokens"
        )
        check_divisible(self, "batch_size", "gradient_accumulation_steps")
        check_sampling(self)
        if self.logprob_check_rows is not None:
            check_at_least_one(self, "logprob_check_rows")
        if self.normalize_constant <= 0:
            raise ConfigError("setting 'normalize_constant' must be > 0")
        super().validate()

    def check_world(self, world: int) -> None:
        """Under ``torchrun`` on ``world`` processes: group seeding, whole groups per rank (the
        round's questions a multiple of the world size), and each SFT batch and its micro
        batches split evenly, as ``rrl sft`` splits them (a round's last, shorter batch of kept
        responses is shared as evenly as it goes); with sharding: fsdp, no out-of-memory
        back-off."""
        check_group_seeding(self, world)
        self.check_sharding()
        if self.ei_batch_size % world:
            raise ConfigError(
                f"setting 'ei_batch_size' ({self.ei_batch_size}) must be a multiple of the world "
                f"size ({world} processes under torchrun): each rank samples and grades an equal "
                f"share of the round's questions, whole groups; change it or launch "
                f"--nproc_per_node x --nnodes that divides it"
            )
        check_world_batches(self, world, "batch_size", "gradient_accumulation_steps")

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.gradient_accumulation_steps


def computed(value: float | None) -> float | None:
    """``value``, already computed: the forward's entropy as ``sampled_entropy``'s fallback
    (it is only asked for when the engine gave no per-token entropies)."""
    return value


def train(cfg: EIConfig, out: str) -> dict:
    """Run expert iteration into ``out`` (resuming from ``out/state``); returns ``done.json``'s
    data."""
    started = start_run(cfg, out, "ei")
    if started is None:
        return {}
    device, task = started
    questions = load_questions(
        cfg,
        task,
        cfg.ei_batch_size,
        f"setting 'ei_batch_size' ({cfg.ei_batch_size}) exceeds the {{n}} training questions",
    )
    rollouts = Rollouts.from_config(cfg, task, questions, sync_every=cfg.sync_every)
    # Upper bound (every rollout kept); only matters for decaying schedules.
    max_kept = cfg.ei_batch_size * cfg.group_size
    total_steps = cfg.n_ei_steps * cfg.sft_epochs * math.ceil(max_kept / cfg.batch_size)
    t = setup_training(cfg, out, "ei", task, total_steps)
    ei_step, step = t.resumed("ei_step"), t.resumed("opt_step")
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name="ei")
    # The no-gradient scoring pass takes larger micro batches, with a back-off of its own.
    score_micro = MicroBatchSize(
        max(8, cfg.micro_batch_size), backoff=cfg.oom_backoff, name="ei rollout scoring"
    )
    warn = MismatchWarner(cfg.logprob_diff_warn, "ei")

    bar = progress(total=cfg.n_ei_steps, initial=ei_step, desc="ei", enabled=cfg.progress)
    while ei_step < cfg.n_ei_steps:
        # 1. Sample group_size responses to each of this step's questions; grade them.
        ro = sample_and_grade(t.engine, t.model, rollouts, step=ei_step, count=cfg.ei_batch_size)
        t_graded = time.perf_counter()
        # 2. Keep the correct ones (reward 1: right format and answer).
        kept = ro.correct()
        line = {
            "ei_step": ei_step + 1,
            **reward_means(ro.scores),
            **ro.grade_metrics,
            "kept": len(kept),
            "rollout/response_length": ro.mean_length,
            "rollout/truncated": ro.truncated,
            "time/train": 0.0,  # the optimizer steps' lines below carry it
        }
        # The policy's log-probs of the rollouts (and their entropy, when the engine gave none)
        # from one no-gradient forward, against the engine's log-probs of the same tokens: of
        # the first logprob_check_rows rollouts, or of all when the entropy needs the forward.
        forward_entropy = cfg.log_rollout_entropy and any(
            c.entropies is None for c in ro.completions
        )
        checked = len(ro.completions)
        if cfg.logprob_check_rows is not None and not forward_entropy:
            checked = min(checked, cfg.logprob_check_rows)
        tokens = tokenize_pairs(ro.prompts[:checked], ro.responses[:checked], t.tokenizer)
        policy, entropy = score_rollouts(t.model, tokens, device, score_micro, forward_entropy)
        engine = engine_log_probs(tokens.labels, tokens.response_mask, ro.completions[:checked])
        mismatch, _, _ = check_rollouts(engine, tokens.response_mask, policy, None)
        warn(mismatch)
        line.update(mismatch)
        if cfg.log_rollout_entropy:
            entropy = sampled_entropy(t.tokenizer, ro.completions, partial(computed, entropy))
            line["rollout/entropy"] = 0.0 if entropy is None else entropy  # 0: no tokens
        line["time/score"] = time.perf_counter() - t_graded
        t.run.log({**line, **ro.seconds}, step=step, split="train")
        # Every train line carries the same time/ keys (as GRPO's): the round's rollout timings
        # on its line above, 0 on its optimizer steps' lines (time/train the other way round).
        zero_times = {key: 0.0 for key in (*line, *ro.seconds) if key.startswith("time/")}
        # 3. SFT on the kept pairs: sft_epochs epochs, each in a new order.
        if kept:
            sft_tokens = tokenize_pairs(
                [ro.prompts[i] for i in kept], [ro.responses[i] for i in kept], t.tokenizer
            )
            for epoch in range(cfg.sft_epochs):
                order = step_rng(cfg.seed, Stream.EI_ORDER, ei_step, epoch).permutation(len(kept))
                for start in range(0, len(kept), cfg.batch_size):
                    t0 = time.perf_counter()
                    stats = sft_update(
                        t.model,
                        t.optimizer,
                        t.scheduler,
                        sft_tokens,
                        order[start : start + cfg.batch_size].tolist(),
                        micro_batch_size=micro,
                        device=device,
                        max_grad_norm=cfg.max_grad_norm,
                        normalize_constant=cfg.normalize_constant,
                    )
                    step += 1
                    stats["ei_step"] = ei_step + 1
                    stats.update(ro.grade_metrics)  # the iteration's rollouts' (not a new count)
                    stats.update(mismatch)  # and their check, as on the iteration's line
                    stats["time/train"] = time.perf_counter() - t0
                    t.run.log({**zero_times, **stats}, step=step, split="train")
                    t.run.maybe_exit(step)
        ei_step += 1
        bar.update(1)
        bar.set_postfix(reward=f"{line['reward']:.3f}", kept=len(kept), refresh=False)
        # 4. Evaluate every eval_every iterations and at the end; save every save_every.
        if after_iteration(t, cfg.n_ei_steps, ei_step=ei_step, opt_step=step):
            break  # max_wall_seconds spent
    bar.close()
    return finish_training(t, step=step)


def main(argv: list[str] | None = None) -> int:
    return run_main(EIConfig, "ei", train, argv, "expert iteration")
