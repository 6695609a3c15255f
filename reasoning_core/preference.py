r"""Direct preference optimization (Rafailov et al. 2023): sequence log-probs and the DPO loss.

DPO needs four numbers per pair: the log-probability of the chosen response ``y_w`` and of
the rejected response ``y_l`` under the policy being trained and under a frozen reference.
:func:`sequence_log_probs` reduces per-token log-probs (as :func:`~reasoning_core.get_response_log_probs`
returns them) to one number per response with the response mask; :func:`dpo_loss` turns the
four into the per-pair loss

.. math::
    \ell = -\log\sigma\big(\beta\,[\log\pi_\theta(y_w) - \log\pi_\text{ref}(y_w)]
             - \beta\,[\log\pi_\theta(y_l) - \log\pi_\text{ref}(y_l)]\big)

and, optionally, adds a length-normalized negative log-likelihood of the chosen response
(Pang et al. 2024, "Iterative Reasoning Preference Optimization").

Both functions are pure: tensors in, tensors out, no reduction over pairs (the caller takes
the mean), so ``torch.func.vmap`` and ``torch.func.grad`` apply. Metadata tensors are detached.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._typing import Float, Shaped, Tensor

__all__ = ["sequence_log_probs", "dpo_loss"]


def sequence_log_probs(
    policy_log_probs: Float[Tensor, "*batch seq"],
    response_mask: Shaped[Tensor, "*batch seq"],
) -> Float[Tensor, "*batch"]:
    """Log-probability of each whole response: the sum of its tokens' log-probs.

    ``log pi(y | x) = sum_t m_t log pi(y_t | x, y_<t)``; prompt and padding positions
    (mask 0) add nothing, and a response with no token has log-probability 0.

    Args:
        policy_log_probs: per-token log-probs of the labels, ``(B, T)``.
        response_mask: 1 (or True) on the response tokens, ``(B, T)``.

    Returns:
        ``(B,)``, in the dtype of ``policy_log_probs``.
    """
    if policy_log_probs.shape != response_mask.shape:
        raise ValueError(
            f"policy_log_probs {tuple(policy_log_probs.shape)} and response_mask "
            f"{tuple(response_mask.shape)} differ in shape"
        )
    mask = response_mask.to(policy_log_probs.dtype)
    return (policy_log_probs * mask).sum(dim=-1)


def dpo_loss(
    policy_chosen_log_probs: Float[Tensor, "*batch"],
    policy_rejected_log_probs: Float[Tensor, "*batch"],
    reference_chosen_log_probs: Float[Tensor, "*batch"],
    reference_rejected_log_probs: Float[Tensor, "*batch"],
    beta: float,
    nll_weight: float = 0.0,
    chosen_lengths: Shaped[Tensor, "*batch"] | None = None,
) -> tuple[Float[Tensor, "*batch"], dict[str, Tensor]]:
    r"""Per-pair DPO loss from the four sequence log-probs.

    With the implicit rewards :math:`r_w = \beta(\log\pi_\theta(y_w) - \log\pi_\text{ref}(y_w))`
    and :math:`r_l = \beta(\log\pi_\theta(y_l) - \log\pi_\text{ref}(y_l))` and the margin
    :math:`m = r_w - r_l`, the loss is :math:`-\log\sigma(m)` (computed as a stable
    log-sigmoid). When the policy equals the reference, :math:`m = 0` and the loss is
    :math:`\log 2`. Its gradient raises the policy's chosen log-prob and lowers its rejected
    one, each with weight :math:`\beta\,\sigma(-m)`; the reference log-probs are constants
    (detached here).

    ``nll_weight > 0`` adds :math:`\alpha \cdot (-\log\pi_\theta(y_w) / |y_w|)`, the chosen
    response's mean token negative log-likelihood (``chosen_lengths`` = :math:`|y_w|`, the
    number of its tokens; a response with none adds 0).

    Args:
        policy_chosen_log_probs, policy_rejected_log_probs: ``(B,)`` sequence log-probs under
            the policy (:func:`sequence_log_probs`).
        reference_chosen_log_probs, reference_rejected_log_probs: ``(B,)`` under the reference.
        beta: the strength of the pull towards the reference (> 0; 0.1 in the handout).
        nll_weight: weight of the chosen response's length-normalized NLL (>= 0; 0: plain DPO).
        chosen_lengths: ``(B,)`` token counts of the chosen responses; needed when
            ``nll_weight > 0``.

    Returns:
        ``(loss (B,), metadata)``: the per-pair loss (DPO plus the weighted NLL) and, detached,
        ``dpo_loss`` (B,) (the DPO term alone), ``chosen_rewards`` and ``rejected_rewards``
        (B,) (the implicit rewards), ``margin`` (B,), ``accuracy`` (B,) float, 1 where the
        implicit reward model prefers the chosen response (``margin > 0``; a tie counts as
        wrong), and ``nll`` (B,) (the chosen response's mean token NLL, 0 without
        ``chosen_lengths``).

    Raises:
        ValueError: on ``beta <= 0``, ``nll_weight < 0``, ``nll_weight > 0`` without
            ``chosen_lengths``, or inputs of different shapes.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if nll_weight < 0:
        raise ValueError(f"nll_weight must be >= 0, got {nll_weight}")
    if nll_weight > 0 and chosen_lengths is None:
        raise ValueError("nll_weight > 0 needs chosen_lengths, which is None")
    shape = policy_chosen_log_probs.shape
    for name, value in (
        ("policy_rejected_log_probs", policy_rejected_log_probs),
        ("reference_chosen_log_probs", reference_chosen_log_probs),
        ("reference_rejected_log_probs", reference_rejected_log_probs),
        ("chosen_lengths", chosen_lengths),
    ):
        if value is not None and value.shape != shape:
            raise ValueError(
                f"{name} has shape {tuple(value.shape)}, policy_chosen_log_probs {tuple(shape)}"
            )
    chosen_rewards = beta * (policy_chosen_log_probs - reference_chosen_log_probs.detach())
    rejected_rewards = beta * (policy_rejected_log_probs - reference_rejected_log_probs.detach())
    margin = chosen_rewards - rejected_rewards
    preference = -F.logsigmoid(margin)
    if chosen_lengths is None:
        nll = torch.zeros_like(policy_chosen_log_probs)
    else:
        count = chosen_lengths.to(policy_chosen_log_probs.dtype)
        # A chosen response with no token: 0 and no gradient (never 0/0).
        nll = torch.where(count > 0, -policy_chosen_log_probs / count.clamp(min=1), 0.0)
    loss = preference + nll_weight * nll if nll_weight > 0 else preference
    metadata = {
        "dpo_loss": preference.detach(),
        "chosen_rewards": chosen_rewards.detach(),
        "rejected_rewards": rejected_rewards.detach(),
        "margin": margin.detach(),
        "accuracy": (margin > 0).to(margin.dtype).detach(),
        "nll": nll.detach(),
    }
    return loss, metadata
