"""Log-probs of preference pairs under a policy and a reference, and the handout's per-instance
DPO loss.

:func:`response_log_probs` scores responses to prompts under one model (the sum of each
response's token log-probs, :func:`reasoning_core.sequence_log_probs`); :func:`per_instance_dpo`
is the CS336 supplement's ``per_instance_dpo(lm, lm_ref, tokenizer, beta, prompt,
response_chosen, response_rejected)``: each response scored as the response part of the
pair's Alpaca document (:func:`envs.alpaca.alpaca_document`: the tokenizer's BOS where it adds
one, the Alpaca head, the response, the end-of-sequence token), the very ids instruction tuning
packs and generation is prompted with; the reference model on any device (its log-probs move to
the policy's), the loss on the policy's device.

The handout notes that ``log pi(y_w|x) - log pi(y_l|x)`` equals the difference of the log-probs
of the whole sequences ``x + y_w`` and ``x + y_l``, the prompt's log-prob cancelling. The
document's prompt ids are the same for both responses, and only the response's tokens (EOS
included) are summed: that same difference, without computing the prompt's log-prob.
"""

from __future__ import annotations

from typing import Any

import torch

from envs.alpaca import alpaca_document
from reasoning_core import dpo_loss, sequence_log_probs
from reasoning_core.runtime.training.batching import (
    TokenBatch,
    micro_batches,
    policy_log_probs,
    token_batch,
    tokenize_pairs,
)


def pad_id(tokenizer: Any) -> int:
    """The tokenizer's pad id, its EOS id when it has none (padding is never scored)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad with")
    return int(pad)


def document_batch(tokenizer: Any, instructions: list[str], responses: list[str]) -> TokenBatch:
    """The Alpaca documents of ``(instruction, response)`` pairs as a :class:`TokenBatch`
    whose response mask covers each response's tokens and its EOS."""
    docs = [alpaca_document(tokenizer, i, r) for i, r in zip(instructions, responses, strict=True)]
    return token_batch(
        [d.prompt_ids for d in docs], [d.response_ids for d in docs], pad_id(tokenizer)
    )


def pair_batches(
    pairs: list[dict], tokenizer: Any, alpaca: bool, append_eos: bool
) -> tuple[TokenBatch, TokenBatch]:
    """The chosen and the rejected responses of ``{prompt, chosen, rejected}`` pairs as two
    token batches: with ``alpaca``, two Alpaca documents of each pair's ``instruction``
    (:func:`document_batch`); otherwise prompt and response tokenized apart as they stand, the
    EOS appended with ``append_eos``."""
    chosen = [p["chosen"] for p in pairs]
    rejected = [p["rejected"] for p in pairs]
    if alpaca:
        instructions = [p["instruction"] for p in pairs]
        return (
            document_batch(tokenizer, instructions, chosen),
            document_batch(tokenizer, instructions, rejected),
        )
    prompts = [p["prompt"] for p in pairs]
    if append_eos:
        chosen = [with_eos(r, tokenizer) for r in chosen]
        rejected = [with_eos(r, tokenizer) for r in rejected]
    return tokenize_pairs(prompts, chosen, tokenizer), tokenize_pairs(prompts, rejected, tokenizer)


def with_eos(response: str, tokenizer: Any) -> str:
    """``response`` followed by the tokenizer's end-of-sequence token (as text, which the
    tokenizer reads back as that one token)."""
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no eos_token to append after the response")
    return response + tokenizer.eos_token


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def tokens_log_probs(
    model: torch.nn.Module, tokens: TokenBatch, rows: list[int] | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sequence log-probs (n,), response token counts (n,))`` of ``rows`` of a
    :func:`~reasoning_core.runtime.training.batching.tokenize_pairs` batch, on ``model``'s device, with
    the gradient when it is enabled."""
    device = model_device(model)
    micro = next(micro_batches(tokens, rows, len(rows)))
    log_probs, _ = policy_log_probs(model, micro, device, with_entropy=False)
    mask = micro.response_mask.to(device)
    return sequence_log_probs(log_probs, mask), mask.sum(dim=-1)


def response_log_probs(
    model: torch.nn.Module, tokenizer: Any, prompts: list[str], responses: list[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``log pi(response | prompt)`` of each pair (the sum over the response's tokens, float32,
    on ``model``'s device) and the response token counts."""
    tokens = tokenize_pairs(prompts, responses, tokenizer)
    return tokens_log_probs(model, tokens, list(range(len(prompts))))


def per_instance_dpo(
    lm: torch.nn.Module,
    lm_ref: torch.nn.Module,
    tokenizer: Any,
    beta: float,
    prompt: str,
    response_chosen: str,
    response_rejected: str,
) -> torch.Tensor:
    """The per-instance DPO loss of one pair (the supplement's ``per_instance_dpo``).

    Each response is scored as the response part of the Alpaca document of ``(prompt,
    response)`` (its tokens and the end-of-sequence token); the chosen and the rejected
    response are scored in one batch under ``lm`` (with the gradient) and under ``lm_ref``
    (without; on its own device, then moved to ``lm``'s). Returns the scalar loss on ``lm``'s
    device."""
    tokens = document_batch(tokenizer, [prompt] * 2, [response_chosen, response_rejected])
    policy, _ = tokens_log_probs(lm, tokens, [0, 1])
    with torch.no_grad():
        reference, _ = tokens_log_probs(lm_ref, tokens, [0, 1])
    reference = reference.to(policy.device, policy.dtype)
    loss, _ = dpo_loss(policy[:1], policy[1:], reference[:1], reference[1:], beta)
    return loss[0]
