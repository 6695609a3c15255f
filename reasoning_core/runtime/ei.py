"""Expert iteration (CS336 assignment 5, Algorithm 2).

Each of ``n_ei_steps`` iterations: sample ``ei_batch_size`` questions, sync the policy's
weights into the rollout engine, sample ``group_size`` (G) responses per question
(``min_tokens`` 4, so no empty responses), grade them, keep the ones with reward 1 (correct
format and answer), and run SFT on the kept (prompt, response) pairs for ``sft_epochs`` epochs
(the optimizer and its state carry over between iterations).

Logged per iteration (a ``train`` line at the optimizer step where it starts): the rollout
rewards (``reward``, ``format_reward``, ``answer_reward``), ``kept`` examples, and, under
``rollout/``, the response length and the mean token entropy of the sampled responses under
the policy that sampled them. Per optimizer step: ``loss``, ``grad_norm``, ``entropy`` (of the
kept responses being trained on), ``response_length``, ``lr``.

Run: ``rrl ei --config workflow/config/methods/tiny.yaml --set model_path=... --out DIR``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

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
    progress,
    response_entropy,
    reward_means,
    rollout_params,
    run_main,
    setup_training,
    sft_update,
    start_run,
    step_rng,
    step_seed,
    tokenize_pairs,
)


@dataclass
class EIConfig(CommonConfig):
    n_ei_steps: int = 5
    ei_batch_size: int = 512  # questions per iteration (handout: 512, 1024, 2048)
    group_size: int = 4  # G rollouts per question
    sft_epochs: int = 1
    batch_size: int = 32
    gradient_accumulation_steps: int = 8
    normalize_constant: float = 1.0
    sampling_temperature: float = 1.0
    sampling_top_p: float = 1.0
    sampling_min_tokens: int = 4
    sampling_max_tokens: int = 1024
    log_rollout_entropy: bool = True
    train_examples: int | None = None  # size of the question pool (None: task default)
    lr: float = 5e-5
    eval_every: int = 1  # EI iterations
    save_every: int = 1  # EI iterations

    def validate(self) -> None:
        check_at_least_one(
            self, "n_ei_steps", "ei_batch_size", "group_size", "sft_epochs", "sampling_max_tokens"
        )
        check_divisible(self, "batch_size", "gradient_accumulation_steps")
        check_sampling(self)
        if self.normalize_constant <= 0:
            raise ConfigError("setting 'normalize_constant' must be > 0")
        super().validate()

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.gradient_accumulation_steps


def train(cfg: EIConfig, out: str) -> dict:
    started = start_run(cfg, out, "ei")
    if started is None:
        return {}
    device, task = started
    reward_fn = task.reward_fn(cfg.template)
    questions = load_questions(
        cfg,
        task,
        cfg.ei_batch_size,
        f"setting 'ei_batch_size' ({cfg.ei_batch_size}) exceeds the {{n}} training questions",
    )
    # Upper bound (every rollout kept); only matters for decaying schedules.
    max_kept = cfg.ei_batch_size * cfg.group_size
    tr = setup_training(
        cfg, out, "ei", task, cfg.n_ei_steps * cfg.sft_epochs * math.ceil(max_kept / cfg.batch_size)
    )
    run, model, tokenizer, engine = tr.run, tr.model, tr.tokenizer, tr.engine
    optimizer, scheduler = tr.optimizer, tr.scheduler
    ei_step = tr.counters["ei_step"] if tr.counters else 0
    step = tr.counters["opt_step"] if tr.counters else 0
    params = rollout_params(cfg)
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name="ei")
    # The no-gradient entropy pass takes larger micro batches, with a back-off of its own.
    score_micro = MicroBatchSize(
        max(8, cfg.micro_batch_size), backoff=cfg.oom_backoff, name="ei entropy"
    )

    bar = progress(total=cfg.n_ei_steps, initial=ei_step, desc="ei", enabled=cfg.progress)
    while ei_step < cfg.n_ei_steps:
        picked = step_rng(cfg.seed, 1, ei_step).choice(
            len(questions), cfg.ei_batch_size, replace=False
        )
        batch_q = [questions[int(i)] for i in picked]
        prompts = [task.format_prompt(q, cfg.template) for q in batch_q]
        t0 = time.perf_counter()
        engine.sync_weights(model)
        t1 = time.perf_counter()
        outs = engine.generate(prompts, params.replace(seed=step_seed(cfg.seed, 2, ei_step)))
        t2 = time.perf_counter()
        all_p, all_r, all_gt, lengths = [], [], [], []
        for prompt, q, group in zip(prompts, batch_q, outs, strict=True):
            for c in group:
                all_p.append(prompt)
                all_r.append(c.text)
                all_gt.append(q.ground_truth)
                lengths.append(len(c.token_ids))
        scores = grade(reward_fn, all_r, all_gt)
        t3 = time.perf_counter()
        kept = [i for i, s in enumerate(scores) if s["reward"] >= 1.0]
        line = {
            "ei_step": ei_step + 1,
            **reward_means(scores),
            "kept": len(kept),
            "rollout/response_length": sum(lengths) / len(lengths),
        }
        if cfg.log_rollout_entropy:
            rollout_batch = tokenize_pairs(all_p, all_r, tokenizer)
            line["rollout/entropy"] = response_entropy(model, rollout_batch, device, score_micro)
            line["time/entropy"] = time.perf_counter() - t3
        # time/grade is grading alone, as in GRPO; the entropy pass has its own key.
        line["time/sync"] = t1 - t0
        line["time/rollout"] = t2 - t1
        line["time/grade"] = t3 - t2
        run.log(line, step=step, split="train")

        if kept:
            sft_batch = tokenize_pairs(
                [all_p[i] for i in kept], [all_r[i] for i in kept], tokenizer
            )
            n = len(kept)
            for epoch in range(cfg.sft_epochs):
                order = step_rng(cfg.seed, 4, ei_step, epoch).permutation(n)
                for start in range(0, n, cfg.batch_size):
                    t = time.perf_counter()
                    stats = sft_update(
                        model,
                        optimizer,
                        scheduler,
                        sft_batch,
                        order[start : start + cfg.batch_size].tolist(),
                        micro_batch_size=micro,
                        device=device,
                        max_grad_norm=cfg.max_grad_norm,
                        normalize_constant=cfg.normalize_constant,
                    )
                    if micro.changed:  # logged only after an out-of-memory back-off
                        stats["micro_batch_size"] = micro.size
                    step += 1
                    stats["ei_step"] = ei_step + 1
                    stats["time/train"] = time.perf_counter() - t
                    run.log(stats, step=step, split="train")
                    run.maybe_exit(step)
        ei_step += 1
        bar.update(1)
        bar.set_postfix(reward=f"{line['reward']:.3f}", kept=len(kept), refresh=False)
        after_iteration(
            tr, done=ei_step, total=cfg.n_ei_steps, step=step, ei_step=ei_step, opt_step=step
        )
    bar.close()
    return finish_training(tr, step=step)


def main(argv: list[str] | None = None) -> int:
    return run_main(EIConfig, "ei", train, argv, "expert iteration")
