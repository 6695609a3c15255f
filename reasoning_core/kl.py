r"""Per-token estimators of the KL divergence from the policy to a frozen reference policy.

For tokens sampled from the policy :math:`\pi_\theta`, with
:math:`\delta_t = \log\pi_\text{ref}(o_t) - \log\pi_\theta(o_t)` (Schulman 2020,
"Approximating KL Divergence"; GRPO uses k3, Shao et al. 2024, eq. 4):

======  ===========================================  =====================================
name    per-token value                              property
======  ===========================================  =====================================
``k1``  :math:`-\delta`                              unbiased for KL(pi || ref); can be < 0
``k2``  :math:`\tfrac12 \delta^2`                    >= 0, biased, low variance
``k3``  :math:`e^{\delta} - 1 - \delta`              >= 0 (as e^x >= 1 + x), unbiased
======  ===========================================  =====================================

All three are 0 where the two policies give the sampled token the same log-prob. The
reference's log-probs are constants (detached): the gradient flows only through the policy.
"""

from __future__ import annotations

import torch

from ._typing import Float, Tensor

__all__ = ["KL_ESTIMATORS", "kl_penalty"]

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


def kl_penalty(
    policy_log_probs: Float[Tensor, "*batch seq"],
    ref_log_probs: Float[Tensor, "*batch seq"],
    estimator: str = "k3",
) -> Float[Tensor, "*batch seq"]:
    r"""Per-token KL estimate of the sampled tokens, by the estimator's name (module table).

    Unreduced: the caller adds ``beta`` times it to the per-token loss
    (``grpo_loss`` with ``LossInputs(ref_log_probs=...)`` and ``LossSettings(kl_coef=beta)``)
    before the masked reduction.

    >>> kl_penalty(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -1.0]), "k3")
    tensor([0.0000, 0.7183])

    Raises:
        ValueError: on an unknown estimator.
    """
    delta = ref_log_probs.detach() - policy_log_probs
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta.square()
    if estimator == "k3":
        return torch.expm1(delta) - delta
    raise ValueError(f"unknown kl estimator {estimator!r}; expected one of {KL_ESTIMATORS}")
