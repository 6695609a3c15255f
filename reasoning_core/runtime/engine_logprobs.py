"""The rollout engine's log-probs of its sampled tokens, placed on the training batch's grid.

The trainers score the re-tokenized response text (:func:`~reasoning_core.runtime.batching.
tokenize_pairs`), not the engine's sampled ids. The two are the same tokens wherever the sampled
ids are the text's own tokenization, which is the usual case for a trained model and not always
for a random one (a byte piece, an odd split), and the text drops a trailing EOS and anything
past a stop string left out. So the engine's ``Completion.logprobs`` line up with the policy's
log-probs only on the leading response positions whose labels equal the sampled ids, one for
one: after the first difference the contexts differ too. :func:`engine_log_probs` returns the
engine's log-probs there and the mask of those positions, for
:func:`reasoning_core.logprob_mismatch` and :func:`reasoning_core.tis_weights`;
:func:`mismatch_metrics` is the first of these as train-line metrics.
"""

from __future__ import annotations

import torch

from reasoning_core import logprob_mismatch
from reasoning_core.runtime.rollout import Completion


def engine_log_probs(
    labels: torch.Tensor,
    response_mask: torch.Tensor,
    completions: list[Completion],
    field: str = "logprobs",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log_probs, aligned)``, both (rows, seq) like ``labels``.

    Args:
        labels, response_mask: of a tokenized batch, one row per completion in the same order
            (the ``TokenBatch`` of ``tokenize_pairs(prompts, [c.text ...], tokenizer)``).
        completions: the engine's completions of those rows.
        field: ``"logprobs"`` (the raw policy's, what the training forward computes) or
            ``"sampling_logprobs"`` (under the distribution sampled from).

    Returns:
        float32 log-probs at the aligned positions (0 elsewhere) and the bool mask of the
        aligned positions: the leading response positions whose labels are the completion's
        sampled ids, one for one (a row whose text re-tokenizes differently from its first
        response token on has none).

    Raises:
        ValueError: when the rows and completions differ in number, or a completion has no
            ``field`` (vLLM gives ``sampling_logprobs`` only where they follow from the raw ones).
    """
    mask = response_mask.bool()
    if len(completions) != labels.shape[0]:
        raise ValueError(f"{labels.shape[0]} token rows but {len(completions)} completions")
    values = torch.zeros(labels.shape, dtype=torch.float32)
    aligned = torch.zeros(labels.shape, dtype=torch.bool)
    for row, completion in enumerate(completions):
        scores = getattr(completion, field)
        if scores is None:
            raise ValueError(f"completion {row} has no {field} (the engine did not return them)")
        positions = mask[row].nonzero().squeeze(-1)
        ids = labels[row, positions].tolist()
        k, sampled = 0, completion.token_ids
        while k < min(len(ids), len(sampled)) and ids[k] == sampled[k]:
            k += 1
        values[row, positions[:k]] = torch.tensor(scores[:k], dtype=torch.float32)
        aligned[row, positions[:k]] = True
    return values, aligned


def mismatch_metrics(
    policy_log_probs: torch.Tensor,
    values: torch.Tensor,
    aligned: torch.Tensor,
    response_mask: torch.Tensor,
) -> dict[str, float]:
    """The train line's ``rollout/`` keys: :func:`reasoning_core.logprob_mismatch` of the
    policy's log-probs against the engine's ``values`` over the ``aligned`` positions, and
    ``rollout/logprob_aligned``, the share of the response tokens (``response_mask``) those
    are (1.0 when every response re-tokenizes to its sampled ids; 0.0 with no response token).

    ``policy_log_probs`` may be narrower than the batch (a micro batch trimmed to its longest
    row): the other tensors are cut to its width."""
    width = policy_log_probs.shape[-1]
    aligned = aligned[..., :width].to(policy_log_probs.device)
    values = values[..., :width].to(policy_log_probs.device)
    stats = logprob_mismatch(policy_log_probs.float(), values, aligned)
    metrics = {f"rollout/{k}": float(v) for k, v in stats.items()}
    responses = int(response_mask[..., :width].sum())
    metrics["rollout/logprob_aligned"] = int(aligned.sum()) / responses if responses else 0.0
    return metrics
