"""Log-probs of preference pairs under a policy and a reference, and the handout's per-instance
DPO loss.

:func:`response_log_probs` scores responses to prompts under one model (the sum of each
response's token log-probs, :func:`reasoning_core.sequence_log_probs`); :func:`per_instance_dpo`
is the CS336 supplement's ``per_instance_dpo(lm, lm_ref, tokenizer, beta, prompt,
response_chosen, response_rejected)``: the prompt in the Alpaca template, the end-of-sequence
token after each response, the reference model on any device (its log-probs move to the
policy's), the loss on the policy's device.

The handout notes that ``log pi(y_w|x) - log pi(y_l|x)`` equals the difference of the log-probs
of the whole sequences ``x + y_w`` and ``x + y_l``, the prompt's log-prob cancelling. Here the
prompt and the response are tokenized apart (:func:`reasoning_core.tokenize_prompt_and_output`)
and only the response tokens are summed, which is the same difference when the prompt's tokens
are the same in both sequences, and exact at the boundary when they would not be.
"""

from __future__ import annotations

from typing import Any

import torch

from envs.base import load_prompt, render
from reasoning_core import dpo_loss, sequence_log_probs
from reasoning_core.runtime.training.batching import (
    TokenBatch,
    micro_batches,
    policy_log_probs,
    tokenize_pairs,
)


def alpaca_prompt(instruction: str) -> str:
    """``instruction`` in the supplement's Alpaca template (``envs/prompts/alpaca_sft.prompt``,
    the one packed instruction tuning fills), up to and including ``### Response:`` and its
    newline: the response follows directly."""
    head, _, _ = load_prompt("alpaca_sft").partition("{response}")
    return render(head, {"instruction": instruction})


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

    ``prompt`` goes into the Alpaca template, each response is followed by the end-of-sequence
    token; the chosen and the rejected response are scored in one batch under ``lm`` (with the
    gradient) and under ``lm_ref`` (without; on its own device, then moved to ``lm``'s). Returns
    the scalar loss on ``lm``'s device."""
    prompts = [alpaca_prompt(prompt)] * 2
    responses = [with_eos(response_chosen, tokenizer), with_eos(response_rejected, tokenizer)]
    policy, _ = response_log_probs(lm, tokenizer, prompts, responses)
    with torch.no_grad():
        reference, _ = response_log_probs(lm_ref, tokenizer, prompts, responses)
    reference = reference.to(policy.device, policy.dtype)
    loss, _ = dpo_loss(policy[:1], policy[1:], reference[:1], reference[1:], beta)
    return loss[0]
