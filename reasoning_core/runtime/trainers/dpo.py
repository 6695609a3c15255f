"""Direct preference optimization (Rafailov et al. 2023; the CS336 supplement's DPO part).

The policy starts from ``model_path`` (a model folder or a run's ``checkpoint/``); a frozen
reference is loaded from the same folder (or ``reference_path``) on ``reference_device``. Each
of ``n_dpo_rounds`` rounds has a set of pairs ``{prompt, chosen, rejected}``:

* ``pairs: verified`` (one or more rounds): ``group_size`` responses to each of
  ``dpo_questions`` training questions sampled from the current policy and graded, correct
  paired with incorrect (:mod:`~reasoning_core.runtime.trainers.dpo_pairs`);
* ``pairs: jsonl`` (``train_pairs``) or ``pairs: hh`` (``hh_dir``, Anthropic HH): one round.

``val_pairs`` pairs of the first round are held out. A round trains ``epochs`` passes over its
pairs in batches of ``batch_size`` (``gradient_accumulation_steps`` micro batches each) on
the DPO loss with ``beta`` plus ``nll_weight`` times the chosen response's mean token NLL
(:func:`reasoning_core.dpo_loss`), with RMSprop (or AdamW). The reference's log-probs of a
round's pairs are computed once, without gradient.

Every ``val_every`` optimizer steps and at the end: the validation loss and preference
accuracy (``val/loss``, ``val/preference_accuracy``, ``val/margin`` on a train line); the
policy with the best validation preference accuracy so far is kept in ``best_checkpoint/``
beside the final ``checkpoint/``. The task evaluation (``eval`` lines) runs after every
``eval_every`` rounds and at the end. Resumable every ``save_every`` optimizer steps (each
round's pairs are saved under ``pairs/``, so a resumed round trains on the same ones).

Run: ``rrl dpo --config workflow/config/methods/tiny.yaml --set model_path=... --out DIR``.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

import torch

from reasoning_core import dpo_loss
from reasoning_core.runtime.distributed.collectives import (
    broadcast_object,
    share,
    sum_gradients,
    sum_values,
)
from reasoning_core.runtime.distributed.sharding import lockstep_passes, shard_policy
from reasoning_core.runtime.distributed.world import barrier, is_main
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.checkpoint import save_checkpoint
from reasoning_core.runtime.run.rng import Stream, step_rng
from reasoning_core.runtime.trainers.dpo_pairs import (
    load_pairs,
    read_first_round,
    read_saved,
    sample_first_round,
    sample_verified_pairs,
    save_round,
    split_validation,
)
from reasoning_core.runtime.trainers.lifecycle import (
    finish_training,
    progress,
    run_main,
    setup_training,
    start_run,
    whole_policy,
)
from reasoning_core.runtime.training.batching import MicroBatchSize
from reasoning_core.runtime.training.pair_logprobs import pair_batches, tokens_log_probs
from reasoning_core.runtime.training.policy import load_policy, make_optimizer
from reasoning_core.runtime.training.rollouts import Rollouts, load_questions
from reasoning_core.runtime.training.settings import (
    ShardingConfig,
    check_at_least_one,
    check_divisible,
    check_group_seeding,
    check_non_negative,
    check_sampling,
    check_world_batches,
)
from reasoning_core.runtime.training.updates import norm_value


@dataclass
class DPOConfig(ShardingConfig):
    """DPO settings: where the pairs come from, the loss, the batches and the validation."""

    pairs: Literal["verified", "jsonl", "hh"] = "verified"
    """Where the pairs come from: verified (sampled from the policy and graded, correct paired
    with incorrect), jsonl (train_pairs) or hh (Anthropic HH files in hh_dir)."""
    train_pairs: str = ""
    """pairs: jsonl: a JSONL file of {prompt, chosen, rejected} records."""
    hh_dir: str = ""
    """pairs: hh: the folder of the four HH train files (harmless-base.jsonl.gz, ...)."""
    pair_template: Literal["none", "alpaca"] = "none"
    """How a pair's prompt is shown to the model: none (as it is) or alpaca (pairs: jsonl or hh;
    each response scored as the pair's Alpaca document, the tokenizer's BOS where it adds one,
    the template, the response, EOS: as the supplement does for HH). alpaca needs
    append_eos: true."""
    append_eos: bool = False
    """Append the end-of-sequence token after each response (the supplement's HH recipe)."""
    reference_path: str = ""
    """Model folder of the frozen reference ("": model_path, where the policy starts)."""
    reference_device: str = ""
    """Device of the reference model ("": the policy's device)."""
    beta: float = 0.1
    """DPO's beta: the strength of the pull towards the reference."""
    nll_weight: float = 0.0
    """Weight of the chosen response's mean token negative log-likelihood added to the loss."""
    val_pairs: int = 200
    """Pairs of the first round held out for validation."""
    val_every: int = 20
    """Validate every N optimizer steps (and at the end); 0: only at the end."""
    n_dpo_rounds: int = 1
    """Rounds of pairs; verified pairs are sampled anew from the current policy each round."""
    dpo_questions: int = 256
    """pairs: verified: questions sampled per round."""
    group_size: int = 4
    """pairs: verified: responses sampled per question."""
    pairs_per_question: int = 1
    """pairs: verified: most pairs built from one question's responses."""
    sampling_temperature: float = 1.0
    """Temperature of the sampled responses."""
    sampling_top_p: float = 1.0
    """Nucleus-sampling top_p of the sampled responses."""
    sampling_min_tokens: int = 4
    """Fewest new tokens per sampled response (no empty responses)."""
    sampling_max_tokens: int = 1024
    """Most new tokens per sampled response."""
    train_examples: int | None = None
    """Size of the pool of training questions (null: the task's default)."""
    sample_only: bool = False
    """pairs: verified: sample and grade round 1's pairs from model_path into --out
    (pairs/round_0.jsonl) and stop without training (the workflow's rule dpo_pairs)."""
    first_round_pairs: str = ""
    """pairs: verified: a sample_only run's folder whose pairs are round 1's ("": sample them
    here); it must have been sampled with this run's settings apart from training ones."""
    epochs: int = 1
    """Passes over each round's pairs."""
    batch_size: int = 64
    """Pairs per optimizer step."""
    gradient_accumulation_steps: int = 64
    """Micro batches per optimizer step (micro batch = batch_size / this pairs)."""
    optimizer: Literal["rmsprop", "adamw"] = "rmsprop"
    """rmsprop (as the DPO paper and the supplement) or adamw (betas, adam_eps)."""
    lr: float = 1e-6
    """Learning rate."""
    eval_every: int = 1
    """Evaluate on the task every N rounds; 0: only at the start and the end."""
    save_every: int = 20
    """Save the resumable state every N optimizer steps; 0: never."""

    rollout_seeding: Literal["batch", "group"] = "batch"
    """pairs: verified: how the responses are seeded: batch (one engine call per round) or
    group (each question's responses in their own call, seeded by the seed, the round and the
    question's index; needed under torchrun, the same pairs on any number of processes)."""

    def check_world(self, world: int) -> None:
        """Under ``torchrun``: each rank trains on an equal share of every batch in an equal
        share of its micro batches; verified pairs need group seeding (each rank samples its
        share of the questions); sample_only (a sampling run, no training) runs in one
        process; with sharding: fsdp, no out-of-memory back-off."""
        if self.sample_only:
            raise ConfigError(
                "setting 'sample_only' samples pairs without training: run it in one process, "
                "without torchrun"
            )
        if self.pairs == "verified" and (not self.first_round_pairs or self.n_dpo_rounds > 1):
            check_group_seeding(self, world)
        self.check_sharding()
        check_world_batches(self, world, "batch_size", "gradient_accumulation_steps")

    def validate(self) -> None:
        check_at_least_one(
            self, "n_dpo_rounds", "dpo_questions", "group_size", "pairs_per_question", "epochs"
        )
        check_divisible(self, "batch_size", "gradient_accumulation_steps")
        check_non_negative(self, "nll_weight", "val_pairs", "val_every")
        check_sampling(self)
        if self.beta <= 0:
            raise ConfigError(f"setting 'beta' must be > 0, got {self.beta}")
        if self.pairs == "jsonl" and not self.train_pairs:
            raise ConfigError("setting 'train_pairs' is required with pairs: jsonl")
        if self.pairs == "hh" and not self.hh_dir:
            raise ConfigError("setting 'hh_dir' is required with pairs: hh")
        if self.pairs != "verified" and self.n_dpo_rounds != 1:
            raise ConfigError("setting 'n_dpo_rounds' > 1 needs pairs: verified (resampled)")
        if self.pair_template == "alpaca" and (self.pairs == "verified" or not self.append_eos):
            raise ConfigError(
                "setting 'pair_template: alpaca' scores Alpaca documents (which end with the EOS "
                "token: set append_eos: true) of pairs: jsonl or hh (verified pairs are already "
                "prompted in the task's template)"
            )
        if self.sharding == "fsdp" and self.reference_device not in ("", self.device):
            raise ConfigError(
                f"setting 'reference_device' ({self.reference_device!r}) must be empty or the "
                f"policy's device ({self.device!r}) with sharding: fsdp: the reference is "
                "sharded over the ranks beside the policy"
            )
        if self.pairs != "verified" and (self.sample_only or self.first_round_pairs):
            raise ConfigError("settings 'sample_only' and 'first_round_pairs' need pairs: verified")
        super().validate()

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.gradient_accumulation_steps


def make_dpo_optimizer(model: torch.nn.Module, cfg: DPOConfig) -> torch.optim.Optimizer:
    """RMSprop at ``lr`` (torch's defaults otherwise), or the trainers' AdamW."""
    if cfg.optimizer == "adamw":
        return make_optimizer(model, cfg)
    return torch.optim.RMSprop([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)


def load_reference(cfg: DPOConfig) -> torch.nn.Module:
    """The frozen reference: eval mode, no gradients, on ``reference_device``; with
    ``sharding: fsdp`` sharded over the ranks as the policy is (each rank holds 1/N of it and
    every rank scores every pair, so their forwards stay in step)."""
    ref_cfg = replace(
        cfg,
        model_path=cfg.reference_path or cfg.model_path,
        device=cfg.reference_device or cfg.device,
        gradient_checkpointing=False,
        compile=False,
    )
    model, _ = load_policy(ref_cfg)
    model.eval().requires_grad_(False)
    if cfg.sharding == "fsdp":  # torchrun only (validate)
        shard_policy(model)
    return model


class PairTokens:
    """A set of pairs tokenized once (chosen and rejected as two batches,
    :func:`~reasoning_core.runtime.training.pair_logprobs.pair_batches`) with the reference's sequence
    log-probs of each, computed once without gradient."""

    def __init__(self, pairs: list[dict], tokenizer: Any, reference: Any, cfg: DPOConfig):
        self.n = len(pairs)
        alpaca = cfg.pair_template == "alpaca"
        self.chosen, self.rejected = pair_batches(pairs, tokenizer, alpaca, cfg.append_eos)
        ref_c, ref_r = [], []
        with torch.no_grad():
            for start in range(0, self.n, max(8, cfg.micro_batch_size)):
                rows = list(range(start, min(self.n, start + max(8, cfg.micro_batch_size))))
                ref_c.append(tokens_log_probs(reference, self.chosen, rows)[0].float().cpu())
                ref_r.append(tokens_log_probs(reference, self.rejected, rows)[0].float().cpu())
        self.ref_chosen, self.ref_rejected = torch.cat(ref_c), torch.cat(ref_r)

    def loss(self, model: Any, rows: list[int], cfg: DPOConfig) -> tuple[torch.Tensor, dict]:
        """Per-pair loss (on the policy's device) and metadata of ``rows`` under ``model``."""
        chosen, lengths = tokens_log_probs(model, self.chosen, rows)
        rejected, _ = tokens_log_probs(model, self.rejected, rows)
        device = chosen.device
        return dpo_loss(
            chosen,
            rejected,
            self.ref_chosen[rows].to(device),
            self.ref_rejected[rows].to(device),
            cfg.beta,
            cfg.nll_weight,
            lengths,
        )


META = ("dpo_loss", "nll", "margin", "accuracy", "chosen_rewards", "rejected_rewards")


def dpo_update(
    t: Any, pairs: PairTokens, rows: list[int], cfg: DPOConfig, micro: MicroBatchSize
) -> dict:
    """One optimizer step on the batch mean of the per-pair loss over ``rows``: zero,
    accumulate (redone smaller on out-of-memory), clip, step, schedule."""
    lr = t.optimizer.param_groups[0]["lr"]
    zero = partial(t.optimizer.zero_grad, set_to_none=True)
    zero()
    # Under torchrun: this rank's share of the pairs, the batch mean's divisor the whole
    # batch's, the gradients and sums over the ranks (each the identity in one process).
    sums = micro.call(accumulate_dpo, t.model, pairs, share(rows), cfg, len(rows), reset=zero)
    sum_gradients(t.model)
    sums = sum_values(sums)
    grad_norm = torch.nn.utils.clip_grad_norm_(t.model.parameters(), cfg.max_grad_norm)
    t.optimizer.step()
    t.scheduler.step()
    zero()
    return {**sums, "grad_norm": norm_value(grad_norm), "lr": lr, **micro.metrics()}


def accumulate_dpo(
    size: int,
    model: Any,
    pairs: PairTokens,
    rows: list[int],
    cfg: DPOConfig,
    batch_rows: int | None = None,
) -> dict[str, float]:
    """Backward of the batch mean of the per-pair loss of ``rows``, ``size`` pairs at a time;
    the sums of the loss and of each :data:`META` value over the batch, divided by its size
    (``batch_rows`` when ``rows`` are this rank's share of a larger batch)."""
    n = len(rows) if batch_rows is None else batch_rows
    sums = dict.fromkeys(("loss", *META), 0.0)
    own = math.ceil(len(rows) / size)
    passes = lockstep_passes(model, own)  # before any pass: the ranks' collectives in order
    for start in range(0, len(rows), size):
        loss, meta = pairs.loss(model, rows[start : start + size], cfg)
        (loss.sum() / n).backward()
        sums["loss"] += float(loss.detach().sum()) / n
        for key in META:
            sums[key] += float(meta[key].sum()) / n
    for _ in range(passes - own):  # FSDP2: as many passes as any rank
        loss, _ = pairs.loss(model, [0], cfg)
        (loss.sum() * 0.0).backward()  # adds exactly 0 to every gradient
    return sums


@torch.no_grad()
def validate_pairs(t: Any, val: PairTokens, cfg: DPOConfig) -> dict[str, float]:
    """Mean loss, preference accuracy and margin of the validation pairs (eval mode)."""
    was_training = t.model.training
    t.model.eval()
    sums = {"loss": 0.0, "accuracy": 0.0, "margin": 0.0}
    size = max(8, cfg.micro_batch_size)
    for start in range(0, val.n, size):
        loss, meta = val.loss(t.model, list(range(start, min(val.n, start + size))), cfg)
        sums["loss"] += float(loss.sum())
        sums["accuracy"] += float(meta["accuracy"].sum())
        sums["margin"] += float(meta["margin"].sum())
    t.model.train(was_training)
    return {
        "val/loss": sums["loss"] / val.n,
        "val/preference_accuracy": sums["accuracy"] / val.n,
        "val/margin": sums["margin"] / val.n,
    }


def train(cfg: DPOConfig, out: str) -> dict:
    """Run DPO into ``out`` (resuming from ``out/state``); returns ``done.json``'s data."""
    started = start_run(cfg, out, "dpo")
    if started is None:
        return {}
    _, task = started
    if cfg.sample_only:
        return sample_first_round(cfg, out, task)
    fixed, info = (None, {})
    if cfg.pairs != "verified":
        fixed, info = load_pairs(cfg)
        most = len(fixed)
    else:
        questions = load_questions(
            cfg, task, cfg.dpo_questions,
            f"setting 'dpo_questions' ({cfg.dpo_questions}) exceeds the {{n}} training questions",
        )  # fmt: skip
        rollouts = Rollouts.from_config(cfg, task, questions)
        most = cfg.dpo_questions * cfg.pairs_per_question
    # An upper bound on the steps (every question giving its pairs), for decaying schedules.
    total = cfg.n_dpo_rounds * cfg.epochs * math.ceil(most / cfg.batch_size)
    t = setup_training(cfg, out, "dpo", task, total, optimizer_fn=make_dpo_optimizer)
    reference = load_reference(cfg)
    round_, pos, step = t.resumed("dpo_round"), t.resumed("round_step"), t.resumed("opt_step")
    best = t.counters.get("best", {}) if t.counters else {}
    micro = MicroBatchSize(cfg.micro_batch_size, backoff=cfg.oom_backoff, name="dpo")
    folder = t.run.out / "pairs"
    if t.counters is None and is_main():  # a fresh start: nothing of an earlier attempt is reused
        for stale in (folder, t.run.out / "best_checkpoint"):
            shutil.rmtree(stale, ignore_errors=True)
    val: PairTokens | None = None
    sampled = t.counters.get("sampled_responses", 0) if t.counters else 0

    def check_validation() -> dict:
        best["last_step"] = step
        values = validate_pairs(t, val, cfg)
        if values["val/preference_accuracy"] > best.get("val/preference_accuracy", -1.0):
            best.update(values, step=step)  # the best policy so far, beside the last
            model = whole_policy(t)  # a sharded policy gathered (every rank takes part)
            if is_main():
                save_checkpoint(model, t.tokenizer, t.run.out / "best_checkpoint")
        return values

    bar = progress(total=cfg.n_dpo_rounds, initial=round_, desc="dpo", enabled=cfg.progress)
    stopped = False
    while round_ < cfg.n_dpo_rounds and not stopped:
        # Rank 0 reads and writes the round's files; the others read them once written.
        saved = broadcast_object(read_saved(folder / f"round_{round_}.jsonl") if is_main() else 0)
        if saved is None:  # first time at this round: build its pairs and keep them
            if fixed is not None:
                pairs, line = fixed, {"pairs": len(fixed), **info}
            elif round_ == 0 and cfg.first_round_pairs:  # sampled by a sample_only run
                pairs, line = read_first_round(cfg)
                sampled += line["sampled_responses"]
            else:
                pairs, line = sample_verified_pairs(
                    t.engine, t.model, rollouts, round_=round_, count=cfg.dpo_questions,
                    pairs_per_question=cfg.pairs_per_question,
                )  # fmt: skip
                sampled += line["sampled_responses"]
            if round_ == 0:
                pairs, held = split_validation(pairs, cfg.val_pairs, cfg.seed) if cfg.val_pairs \
                    else (pairs, [])  # fmt: skip
                if is_main():
                    save_round(held, {}, folder / "validation.jsonl")
            line.update(dpo_round=round_ + 1, train_pairs=len(pairs), sampled_total=sampled)
            if is_main():
                save_round(pairs, line, folder / f"round_{round_}.jsonl")
            barrier()
        pairs, line = read_saved(folder / f"round_{round_}.jsonl")
        sampled = line.get("sampled_total", sampled)
        if pos == 0:  # the round's line (a resumed round has it before the saved offset)
            t.run.log({k: v for k, v in line.items() if not k.startswith("hh/")}, step=step,
                      split="train")  # fmt: skip
        if val is None:
            held, _ = read_saved(folder / "validation.jsonl")
            val = PairTokens(held, t.tokenizer, reference, cfg) if held else None
        if not pairs:
            print(f"[dpo] round {round_ + 1}: no pairs (all right or all wrong)", file=sys.stderr)
        tokens = PairTokens(pairs, t.tokenizer, reference, cfg) if pairs else None
        per_epoch = math.ceil(len(pairs) / cfg.batch_size)
        while tokens is not None and pos < cfg.epochs * per_epoch:
            epoch, index = divmod(pos, per_epoch)
            order = step_rng(cfg.seed, Stream.DPO_ORDER, round_, epoch).permutation(len(pairs))
            rows = order[index * cfg.batch_size : (index + 1) * cfg.batch_size].tolist()
            t0 = time.perf_counter()
            stats = dpo_update(t, tokens, rows, cfg, micro)
            pos, step = pos + 1, step + 1
            stats.update({"dpo_round": round_ + 1, "time/train": time.perf_counter() - t0})
            if val is not None and cfg.val_every and step % cfg.val_every == 0:
                stats.update(check_validation())
            t.run.log(stats, step=step, split="train")
            t.run.maybe_exit(step)
            if cfg.save_every and step % cfg.save_every == 0:
                t.run.save_state(t.model, t.optimizer, t.scheduler, dpo_round=round_,
                                 round_step=pos, opt_step=step, best=best,
                                 sampled_responses=sampled)  # fmt: skip
            if t.run.over_budget():
                t.run.budget_stop = {"iterations_done": step, "iterations_planned": total}
                stopped = True
                break
        if stopped:
            break
        round_, pos = round_ + 1, 0
        bar.update(1)
        last = round_ == cfg.n_dpo_rounds
        if not last and cfg.eval_every and round_ % cfg.eval_every == 0:
            t.evaluator(t.engine, t.model, step, t.run)
        if not last and cfg.save_every:
            t.run.save_state(t.model, t.optimizer, t.scheduler, dpo_round=round_, round_step=0,
                             opt_step=step, best=best, sampled_responses=sampled)  # fmt: skip
    bar.close()
    if val is not None and best.get("last_step") != step:
        t.run.log(check_validation(), step=step, split="train")
    extra = {
        "best_val_preference_accuracy": best.get("val/preference_accuracy"),
        "best_step": best.get("step"),
        "val_pairs": 0 if val is None else val.n,
        "sampled_responses": sampled,
        **info,
    }
    return finish_training(t, step=step, extra=extra)


def main(argv: list[str] | None = None) -> int:
    return run_main(DPOConfig, "dpo", train, argv, "direct preference optimization")
