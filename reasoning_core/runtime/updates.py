"""Optimizer steps: the SFT and GRPO updates side by side on one :func:`optimizer_step`.

One optimizer step, for either objective::

    zero the gradients
    for each micro batch of the chosen rows:          # accumulate (with the back-off)
        log-probs (+ entropy) under the policy
        loss of the micro batch, scaled to its share of the batch mean; backward
    clip the gradient norm to max_grad_norm
    AdamW step; learning-rate schedule step; zero the gradients (free them until the next step)

On a CUDA out-of-memory error during the accumulation, :class:`MicroBatchSize` drops the
partial gradient and redoes the accumulation with smaller micro batches; the step is still the
same batch mean. The no-gradient scoring passes (old log-probs, rollout entropy) are here too.
``rrl gpu-check`` times these very functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import torch

from reasoning_core import grpo_microbatch_train_step, sft_microbatch_train_step
from reasoning_core.runtime.batching import (
    MicroBatchSize,
    backoff_metrics,
    masked_token_mean,
    micro_batches,
    policy_log_probs,
    with_micro_batch,
)

T = TypeVar("T")


class Step(NamedTuple):
    """What :func:`optimizer_step` returns: the accumulation's result, the gradient norm before
    clipping and the learning rate the step used."""

    accumulated: Any
    grad_norm: float
    lr: float


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    accumulate: Callable[[int], T],
    *,
    micro_batch_size: int | MicroBatchSize,
    max_grad_norm: float,
) -> Step:
    """Zero, ``accumulate(micro_batch_size)`` (gradients of one batch, redone smaller on
    out-of-memory), clip to ``max_grad_norm``, AdamW step, schedule step, zero.

    Every ``zero_grad`` of the trainers is here: before each accumulation pass, after an
    out-of-memory failure (so the partial gradient is freed before the CUDA cache is emptied),
    and after the step (so the gradients do not hold memory while the engine samples)."""
    lr = optimizer.param_groups[0]["lr"]

    def zero() -> None:
        optimizer.zero_grad(set_to_none=True)

    def accumulation_pass(size: int) -> T:
        zero()
        return accumulate(size)

    accumulated = with_micro_batch(micro_batch_size, accumulation_pass, reset=zero)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    zero()
    return Step(accumulated, float(grad_norm), lr)


def sft_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batch: dict[str, torch.Tensor],
    rows: list[int] | torch.Tensor,
    *,
    micro_batch_size: int | MicroBatchSize,
    device: torch.device,
    max_grad_norm: float,
    normalize_constant: float = 1.0,
) -> dict[str, float]:
    """One AdamW step of SFT on ``rows`` of a tokenized batch (:func:`tokenize_pairs`).

    Loss: the batch mean over the n rows of each example's summed response NLL divided by
    ``normalize_constant``. A micro batch of m rows calls ``sft_microbatch_train_step`` with
    ``normalize_constant * n / m``, so the accumulated gradient is that mean exactly, even when
    the last micro batch is smaller.

    Returns ``loss``, ``grad_norm`` (before clipping), ``entropy`` (mean token entropy of the
    responses), ``response_length`` (mean response tokens), ``lr`` (the rate this step used),
    and ``micro_batch_size`` after an out-of-memory back-off."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    n = len(rows)

    def accumulate(size: int) -> tuple[float, float, int]:
        total_loss, ent_sum, ent_count = 0.0, 0.0, 0
        for micro in micro_batches(batch, rows, size):
            log_probs, entropy = policy_log_probs(model, micro, device)
            mask = micro["response_mask"].to(device)
            loss, _ = sft_microbatch_train_step(
                policy_log_probs=log_probs,
                response_mask=mask,
                gradient_accumulation_steps=1,
                normalize_constant=normalize_constant * n / len(micro["rows"]),
            )
            total_loss += float(loss.detach())
            s, c = masked_token_mean(entropy, mask)
            ent_sum, ent_count = ent_sum + s, ent_count + c
        return total_loss, ent_sum, ent_count

    step = optimizer_step(
        model,
        optimizer,
        scheduler,
        accumulate,
        micro_batch_size=micro_batch_size,
        max_grad_norm=max_grad_norm,
    )
    total_loss, ent_sum, ent_count = step.accumulated
    return {
        "loss": total_loss,
        "grad_norm": step.grad_norm,
        "entropy": ent_sum / max(1, ent_count),
        "response_length": float(batch["response_mask"][rows].sum(dim=1).float().mean()),
        "lr": step.lr,
        **backoff_metrics(micro_batch_size),
    }


@dataclass(frozen=True)
class PolicyGradientLoss:
    """The GRPO objective's settings (see :func:`reasoning_core.grpo_microbatch_train_step`):
    ``loss_type``, ``cliprange`` (grpo_clip), per-example ``length_norm`` (``masked_mean`` or
    ``masked_normalize`` by ``normalize_constant``)."""

    loss_type: str
    cliprange: float | None = None
    length_norm: str = "masked_mean"
    normalize_constant: float | None = None


class ScoredRollouts(NamedTuple):
    """A rollout batch ready for :func:`grpo_update`: ``tokens`` (:func:`tokenize_pairs`),
    ``raw_rewards`` and group-normalized ``advantages`` (rollouts,) float32, and
    ``old_log_probs`` (rollouts, seq) of the sampling policy (None when the loss needs none)."""

    tokens: dict[str, torch.Tensor]
    raw_rewards: torch.Tensor
    advantages: torch.Tensor
    old_log_probs: torch.Tensor | None


def grpo_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    rollouts: ScoredRollouts,
    rows: list[int] | torch.Tensor,
    *,
    loss: PolicyGradientLoss,
    micro_batch_size: int | MicroBatchSize,
    device: torch.device,
    max_grad_norm: float,
    share_prompts: bool = False,
) -> dict[str, float]:
    """One AdamW step of the policy-gradient ``loss`` on the train batch ``rows`` of a rollout
    batch.

    The micro batches are equal (the size divides the train batch), so each one's mean loss
    divided by their number (``gradient_accumulation_steps``) sums to the batch mean.
    ``share_prompts``: each micro batch's distinct prompts are computed once
    (:func:`~reasoning_core.runtime.batching.shared_prompt_log_probs`).

    Returns ``loss`` (summed over the micro batches as returned by the train step),
    ``grad_norm`` (before clipping), ``entropy`` (mean response-token entropy),
    ``clip_fraction`` (token-weighted), ``lr``, and ``micro_batch_size`` after an out-of-memory
    back-off."""
    tokens, raw, advantages, old = rollouts

    def accumulate(size: int) -> tuple[float, float, int, float]:
        steps = len(rows) // size
        loss_sum, ent_sum, ent_n, clip_sum = 0.0, 0.0, 0, 0.0
        for mb in micro_batches(tokens, rows, size):
            r = mb["rows"]
            width = mb["input_ids"].shape[1]
            log_probs, entropy = policy_log_probs(model, mb, device, share_prompts=share_prompts)
            mask = mb["response_mask"].to(device)
            value, meta = grpo_microbatch_train_step(
                policy_log_probs=log_probs,
                response_mask=mask,
                gradient_accumulation_steps=steps,
                loss_type=loss.loss_type,
                raw_rewards=raw[r].unsqueeze(1).to(device),
                advantages=advantages[r].unsqueeze(1).to(device),
                old_log_probs=None if old is None else old[r, :width].to(device),
                cliprange=loss.cliprange,
                length_norm=loss.length_norm,
                normalize_constant=loss.normalize_constant,
            )
            loss_sum += float(value)
            s, c = masked_token_mean(entropy, mask)
            ent_sum, ent_n = ent_sum + s, ent_n + c
            clip_sum += float(meta["clip_fraction"]) * c
        return loss_sum, ent_sum, ent_n, clip_sum

    step = optimizer_step(
        model,
        optimizer,
        scheduler,
        accumulate,
        micro_batch_size=micro_batch_size,
        max_grad_norm=max_grad_norm,
    )
    loss_sum, ent_sum, ent_n, clip_sum = step.accumulated
    return {
        "loss": loss_sum,
        "grad_norm": step.grad_norm,
        "entropy": ent_sum / max(1, ent_n),
        "clip_fraction": clip_sum / max(1, ent_n),
        "lr": step.lr,
        **backoff_metrics(micro_batch_size),
    }


# ---------------------------------------------------------------------------------------------
# No-gradient scoring passes


@torch.no_grad()
def compute_old_log_probs(
    model: torch.nn.Module,
    tokens: dict[str, torch.Tensor],
    device: torch.device,
    micro_batch_size: int | MicroBatchSize,
    share_prompts: bool = False,
) -> torch.Tensor:
    """Log-probs (rollouts, seq) float32 on the CPU of every response token under the current
    (sampling) policy, no gradient: the ``old_log_probs`` of the ratio losses (with
    ``share_prompts``, 0 at the prompt positions, as the training pass then gives them)."""
    n, width = tokens["input_ids"].shape

    def score(size: int) -> torch.Tensor:
        old = torch.zeros(n, width, dtype=torch.float32)
        for micro in micro_batches(tokens, list(range(n)), size):
            lp, _ = policy_log_probs(
                model, micro, device, with_entropy=False, share_prompts=share_prompts
            )
            old[micro["rows"], : lp.shape[1]] = lp.float().cpu()
        return old

    return with_micro_batch(micro_batch_size, score)


@torch.no_grad()
def response_entropy(
    model: torch.nn.Module,
    tokens: dict[str, torch.Tensor],
    device: torch.device,
    micro_batch_size: int | MicroBatchSize,
) -> float:
    """Mean token entropy of the responses of a tokenized batch under ``model`` (eval mode, no
    gradient)."""
    was_training = model.training
    model.eval()
    rows = list(range(tokens["input_ids"].shape[0]))

    def score(size: int) -> tuple[float, int]:
        total, count = 0.0, 0
        for micro in micro_batches(tokens, rows, size):
            _, entropy = policy_log_probs(model, micro, device)
            s, c = masked_token_mean(entropy, micro["response_mask"])
            total, count = total + s, count + c
        return total, count

    try:
        total, count = with_micro_batch(micro_batch_size, score)
    finally:
        model.train(was_training)
    return total / max(1, count)
