"""Optimizer steps: the SFT and GRPO updates side by side, and the no-gradient scoring passes.

Each update shows one optimizer step in the open::

    zero the gradients
    accumulate: for each micro batch of the chosen rows    # redone smaller on out-of-memory
        log-probs (+ entropy) under the policy
        loss of the micro batch, scaled to its share of the batch mean; backward
    clip the gradient norm to max_grad_norm
    AdamW step; learning-rate schedule step; zero the gradients (free them until the next step)

Under ``torchrun`` each rank accumulates its contiguous share of the chosen rows
(:func:`~reasoning_core.runtime.distributed.collectives.share`) with the normalizer of the
whole batch (its row count, or ``token_mean``'s token count), the gradients are summed over the
ranks before clipping (:func:`~reasoning_core.runtime.distributed.collectives.sum_gradients`),
and the logged sums are the global ones: every rank then takes the same step.

The accumulation runs through :meth:`MicroBatchSize.call`: on a CUDA out-of-memory error it
drops the partial gradient and redoes the accumulation with smaller micro batches; the step is
still the same batch mean. ``rrl gpu-check`` times these very functions.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import torch

from reasoning_core import (
    LossInputs,
    LossSettings,
    grpo_microbatch_train_step,
    sft_microbatch_train_step,
    token_mean_constant,
)
from reasoning_core.runtime.distributed.collectives import (
    max_value,
    share,
    sum_gradients,
    sum_tensor,
    sum_values,
)
from reasoning_core.runtime.distributed.sharding import lockstep_passes
from reasoning_core.runtime.distributed.world import world_size
from reasoning_core.runtime.training.batching import (
    MicroBatchSize,
    TokenBatch,
    masked_token_mean,
    micro_batches,
    policy_log_probs,
)
from reasoning_core.runtime.training.engine_check import EngineCheck, MismatchSums


def sft_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batch: TokenBatch,
    rows: list[int] | torch.Tensor,
    *,
    micro_batch_size: MicroBatchSize,
    device: torch.device,
    max_grad_norm: float,
    normalize_constant: float = 1.0,
) -> dict[str, float]:
    """One AdamW step of SFT on ``rows`` of a tokenized batch (:func:`tokenize_pairs`).

    Loss: the batch mean over the n rows of each example's summed response NLL divided by
    ``normalize_constant`` (:func:`accumulate_sft`).

    Returns ``loss``, ``grad_norm`` (before clipping), ``entropy`` (mean token entropy of the
    responses), ``response_length`` (mean response tokens), ``lr`` (the rate this step used),
    and ``micro_batch_size`` after an out-of-memory back-off."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    lr = optimizer.param_groups[0]["lr"]
    zero = partial(optimizer.zero_grad, set_to_none=True)
    zero()
    loss, ent_sum, ent_n = micro_batch_size.call(
        accumulate_sft,
        model,
        batch,
        share(rows),
        device,
        normalize_constant,
        batch_rows=len(rows),
        reset=zero,
    )
    sum_gradients(model)  # a no-op in one process
    if world_size() > 1:
        total = sum_values({"loss": loss, "ent_sum": ent_sum, "ent_n": ent_n})
        loss, ent_sum, ent_n = total["loss"], total["ent_sum"], int(total["ent_n"])
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    zero()  # the gradients hold no memory while the engine samples
    return {
        "loss": loss,
        "grad_norm": norm_value(grad_norm),
        "entropy": ent_sum / max(1, ent_n),
        "response_length": float(batch.response_mask[rows].sum(dim=1).float().mean()),
        "lr": lr,
        **micro_batch_size.metrics(),
    }


def norm_value(norm: torch.Tensor) -> float:
    """``clip_grad_norm_``'s total norm as a float (under FSDP2 a DTensor: its full value)."""
    full = getattr(norm, "full_tensor", None)
    return float(full() if full is not None else norm)


def accumulate_sft(
    size: int,
    model: torch.nn.Module,
    batch: TokenBatch,
    rows: torch.Tensor,
    device: torch.device,
    normalize_constant: float,
    batch_rows: int | None = None,
) -> tuple[float, float, int]:
    """Backward of the SFT loss of ``rows`` in micro batches of ``size``: (loss, entropy sum,
    token count). A micro batch of m of the n rows calls ``sft_microbatch_train_step`` with
    ``normalize_constant * n / m``, so the accumulated gradient is the batch mean exactly, even
    when the last micro batch is smaller. ``batch_rows``: n when ``rows`` are this rank's
    share of a larger batch (default: ``len(rows)``)."""
    n = len(rows) if batch_rows is None else batch_rows
    total_loss, ent_sum, ent_n = 0.0, 0.0, 0
    own = math.ceil(len(rows) / size)
    passes = lockstep_passes(model, own)  # before any pass: the ranks' collectives in order
    for micro in micro_batches(batch, rows, size):
        log_probs, entropy = policy_log_probs(model, micro, device)
        mask = micro.response_mask.to(device)
        loss, _ = sft_microbatch_train_step(
            policy_log_probs=log_probs,
            response_mask=mask,
            gradient_accumulation_steps=1,
            normalize_constant=normalize_constant * n / len(micro.rows),
        )
        total_loss += float(loss.detach())
        s, c = masked_token_mean(entropy, mask)
        ent_sum, ent_n = ent_sum + s, ent_n + c
    for _ in range(passes - own):  # FSDP2: as many passes as any rank
        idle = next(micro_batches(batch, [0], 1))
        log_probs, _ = policy_log_probs(model, idle, device, with_entropy=False)
        (log_probs.sum() * 0.0).backward()  # adds exactly 0 to every gradient
    return total_loss, ent_sum, ent_n


class ScoredRollouts(NamedTuple):
    """A rollout batch ready for :func:`grpo_update`: its ``tokens``, ``raw_rewards`` and
    group-normalized ``advantages`` (rollouts,) float32, ``old_log_probs`` (rollouts, seq)
    of the sampling policy (None when the loss needs none), and ``token_weights`` (rollouts,
    seq), each response token's weight in the loss (TIS; None: every token weighs 1),
    ``ref_log_probs`` (rollouts, seq) of the frozen reference policy (the KL penalty; None
    without one), and ``loss_mask`` (rollouts, seq), the response tokens the loss counts (None:
    ``tokens.response_mask``; overlong masking leaves truncated responses out)."""

    tokens: TokenBatch
    raw_rewards: torch.Tensor
    advantages: torch.Tensor
    old_log_probs: torch.Tensor | None
    token_weights: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None


def grpo_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    rollouts: ScoredRollouts,
    rows: list[int] | torch.Tensor,
    *,
    loss: LossSettings,
    micro_batch_size: MicroBatchSize,
    device: torch.device,
    max_grad_norm: float,
    share_prompts: bool = False,
    engine_check: EngineCheck | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """One AdamW step of the policy-gradient ``loss`` on the train batch ``rows`` of a rollout
    batch (:func:`accumulate_grpo`).

    Returns ``(stats, checked)``. ``stats``: ``loss`` (summed over the micro batches as
    returned by the train step), ``grad_norm`` (before clipping), ``entropy`` (mean
    response-token entropy), ``clip_fraction`` (token-weighted), ``lr``, and
    ``micro_batch_size`` after an out-of-memory back-off; with a reference policy
    (``rollouts.ref_log_probs``), also ``kl``, the mean per-token KL estimate. ``checked``:
    with ``engine_check`` (the first update of a rollout batch, whose weights sampled it or,
    with a rollout lag, are the proximal policy), the ``rollout/`` keys of
    :class:`MismatchSums` measured on this update's own forward (the loss weighted by TIS from
    it when ``engine_check.tis_cap`` is set, by the off-policy correction, with its
    ``offpolicy/`` keys, when ``engine_check.correction`` is); else empty.

    ``token_mean``'s constant is :func:`reasoning_core.token_mean_constant` of the loss mask of
    all ``rows``, counted here once per optimizer step and passed to every micro batch, so the
    micro batches' accumulated loss is the batch's token mean whatever their number."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    if loss.length_normalization == "token_mean":
        mask = rollouts.tokens.response_mask if rollouts.loss_mask is None else rollouts.loss_mask
        loss = loss.with_constant(float(token_mean_constant(mask[rows])))
    lr = optimizer.param_groups[0]["lr"]
    zero = partial(optimizer.zero_grad, set_to_none=True)
    zero()
    acc = micro_batch_size.call(
        accumulate_grpo,
        model,
        rollouts,
        share(rows),
        reset=zero,
        loss=loss,
        device=device,
        share_prompts=share_prompts,
        engine_check=engine_check,
        batch_rows=len(rows),
    )
    sum_gradients(model)  # a no-op in one process
    if world_size() > 1:
        acc = global_sums(acc)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    zero()  # the gradients hold no memory while the engine samples
    stats = {
        "loss": acc.loss,
        "grad_norm": norm_value(grad_norm),
        "entropy": acc.entropy_sum / max(1, acc.tokens),
        "clip_fraction": acc.clipped_sum / max(1, acc.tokens),
        "lr": lr,
        **micro_batch_size.metrics(),
        **({"kl": acc.kl_sum / max(1, acc.tokens)} if rollouts.ref_log_probs is not None else {}),
    }
    return stats, acc.mismatch.metrics() if engine_check is not None else {}


class Accumulated(NamedTuple):
    """What :func:`accumulate_grpo` adds up over a train batch's micro batches."""

    loss: float  # the train steps' returned losses, summed
    entropy_sum: float  # response-token entropies, summed
    tokens: int  # response tokens
    clipped_sum: float  # clipped response tokens (clip_fraction times tokens, summed)
    mismatch: MismatchSums  # the engine check's sums (empty without an engine check)
    kl_sum: float = 0.0  # per-token KL estimates to the reference, summed (0 without one)


def accumulate_grpo(
    size: int,
    model: torch.nn.Module,
    rollouts: ScoredRollouts,
    rows: torch.Tensor,
    *,
    loss: LossSettings,
    device: torch.device,
    share_prompts: bool,
    engine_check: EngineCheck | None = None,
    batch_rows: int | None = None,
) -> Accumulated:
    """Backward of the policy-gradient loss of ``rows`` in micro batches of ``size``.

    The micro batches are equal (the size divides the train batch), so each one's mean loss
    divided by their number (``gradient_accumulation_steps``) sums to the batch mean. Under
    ``torchrun`` ``rows`` is this rank's share of a train batch of ``batch_rows`` rows, and
    the number is the whole batch's (``batch_rows / size``): the ranks' sums add up to the
    batch mean.
    ``share_prompts``: each micro batch's distinct prompts are computed once
    (:func:`~reasoning_core.runtime.training.batching.shared_prompt_log_probs`). Each token's loss is
    weighted by the rollouts' ``token_weights`` or, with ``engine_check``, by the TIS weights of
    its own log-probs (detached) against the engine's, which ``engine_check`` also adds up (by
    its off-policy correction instead when it has one)."""
    steps = (len(rows) if batch_rows is None else batch_rows) // size
    loss_sum, ent_sum, ent_n, clip_sum, kl_sum = 0.0, 0.0, 0, 0.0, 0.0
    sums = MismatchSums()
    old, weights = rollouts.old_log_probs, rollouts.token_weights
    ref, loss_masks = rollouts.ref_log_probs, rollouts.loss_mask
    for mb in micro_batches(rollouts.tokens, rows, size):
        r, width = mb.rows, mb.input_ids.shape[1]
        log_probs, entropy = policy_log_probs(model, mb, device, share_prompts=share_prompts)
        mask = mb.response_mask.to(device)
        loss_mask = mask if loss_masks is None else loss_masks[r, :width].to(device)
        token_weights = None if weights is None else weights[r, :width].to(device)
        if engine_check is not None:
            token_weights = engine_check.measure(sums, r, log_probs, mask)
        inputs = LossInputs(
            raw_rewards=rollouts.raw_rewards[r].unsqueeze(1).to(device),
            advantages=rollouts.advantages[r].unsqueeze(1).to(device),
            old_log_probs=None if old is None else old[r, :width].to(device),
            token_weights=token_weights,
            ref_log_probs=None if ref is None else ref[r, :width].to(device),
        )
        value, meta = grpo_microbatch_train_step(
            policy_log_probs=log_probs,
            response_mask=loss_mask,
            gradient_accumulation_steps=steps,
            inputs=inputs,
            settings=loss,
        )
        loss_sum += float(value)
        s, c = masked_token_mean(entropy, mask)
        ent_sum, ent_n = ent_sum + s, ent_n + c
        clip_sum += float(meta["clip_fraction"]) * c
        if "kl_mean" in meta:
            kl_sum += float(meta["kl_mean"]) * int(meta["num_response_tokens"])
    return Accumulated(loss_sum, ent_sum, ent_n, clip_sum, sums, kl_sum)


def global_sums(acc: Accumulated) -> Accumulated:
    """The ranks' :class:`Accumulated` summed (the engine check's largest difference: the
    largest over the ranks): the whole train batch's."""
    m = acc.mismatch
    check = m.sums()
    total = sum_values(
        {
            "loss": acc.loss,
            "entropy_sum": acc.entropy_sum,
            "tokens": acc.tokens,
            "clipped_sum": acc.clipped_sum,
            "kl_sum": acc.kl_sum,
            **{f"check/{name}": value for name, value in check.items()},
        }
    )
    mismatch = m.with_sums(
        {name: total[f"check/{name}"] for name in check}, diff_max=max_value(m.diff_max)
    )
    return Accumulated(
        total["loss"],
        total["entropy_sum"],
        int(total["tokens"]),
        total["clipped_sum"],
        mismatch,
        total["kl_sum"],
    )


# ---------------------------------------------------------------------------------------------
# No-gradient scoring passes


@torch.no_grad()
def fixed_log_probs(
    model: torch.nn.Module,
    tokens: TokenBatch,
    device: torch.device,
    micro_batch_size: MicroBatchSize,
    share_prompts: bool = False,
) -> torch.Tensor:
    """Log-probs (rollouts, seq) float32 on the CPU of every response token under ``model``
    held fixed (no gradient, its mode as it is): under the sampling policy, the
    ``old_log_probs`` of the ratio losses; under the frozen reference, the KL penalty's
    ``ref_log_probs`` (with ``share_prompts``, 0 at the prompt positions, as the training pass
    then gives them).

    Under ``torchrun`` each rank scores its contiguous share of the rows (whole groups) and the
    shares are summed into the whole tensor, which every rank then holds."""
    rows = list(share(range(tokens.rows)))
    log_probs, _, _ = micro_batch_size.call(
        score_responses, model, tokens, device, share_prompts, False, rows
    )
    return sum_tensor(log_probs)


@torch.no_grad()
def score_rollouts(
    model: torch.nn.Module,
    tokens: TokenBatch,
    device: torch.device,
    micro_batch_size: MicroBatchSize,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, float | None]:
    """One no-gradient forward (eval mode) over a tokenized batch of rollouts: the log-probs
    (rows, seq) float32 on the CPU of every response token under ``model``, for the check
    against the engine's, and with ``with_entropy`` the responses' mean token entropy (None
    without).

    Under ``torchrun`` each rank scores its contiguous share of the rows; the log-probs and the
    entropy sums are summed over the ranks, so every rank holds the whole batch's."""
    was_training = model.training
    model.eval()
    rows = list(share(range(tokens.rows)))
    try:
        log_probs, total, count = micro_batch_size.call(
            score_responses, model, tokens, device, False, with_entropy, rows
        )
    finally:
        model.train(was_training)
    if world_size() > 1:
        log_probs = sum_tensor(log_probs)
        sums = sum_values({"total": total, "count": count})
        total, count = sums["total"], int(sums["count"])
    return log_probs, total / max(1, count) if with_entropy else None


def score_responses(
    size: int,
    model: torch.nn.Module,
    tokens: TokenBatch,
    device: torch.device,
    share: bool,
    entropy: bool,
    rows: list[int] | None = None,
) -> tuple[torch.Tensor, float, int]:
    """The no-gradient passes (:func:`fixed_log_probs`, :func:`score_rollouts`) in micro
    batches of ``size``: (log-probs (rows, seq) float32 on the CPU, entropy sum, token count;
    the two 0 without ``entropy``). ``share``: each micro batch's distinct prompts computed
    once. ``rows``: only these rows are scored (the others stay 0); default all."""
    log_probs = torch.zeros(tokens.input_ids.shape, dtype=torch.float32)
    total, count = 0.0, 0
    rows = list(range(tokens.rows)) if rows is None else rows
    for micro in micro_batches(tokens, rows, size):
        lp, ent = policy_log_probs(model, micro, device, with_entropy=entropy, share_prompts=share)
        log_probs[micro.rows, : lp.shape[1]] = lp.float().cpu()
        if entropy:
            s, c = masked_token_mean(ent, micro.response_mask)
            total, count = total + s, count + c
    return log_probs, total, count
