r"""Sampling-side pieces of DAPO (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement
Learning System at Scale", sections 3.2 and 3.4) as pure functions of tensors.

- :func:`dynamic_sampling_keep`: which groups carry a learning signal. A group whose rewards
  are all equal has advantage 0 under every group estimator, so it only dilutes the batch; DAPO
  drops such groups and samples more prompts until the batch is full (the loop is the
  trainer's; this function decides).
- :func:`mask_truncated`: "overlong filtering", the response mask with truncated responses
  (cut at the generation limit, so their reward says nothing about the answer) masked out.
- :func:`soft_overlong_penalty`: DAPO's soft length penalty, added to the reward.
"""

from __future__ import annotations

import torch

from ._typing import Bool, Float, Int, Shaped, Tensor

__all__ = ["dynamic_sampling_keep", "mask_truncated", "soft_overlong_penalty"]


def dynamic_sampling_keep(
    raw_rewards: Float[Tensor, "*batch n"],
    group_size: int,
) -> Bool[Tensor, "*batch groups"]:
    r"""One flag per group: True where the group's rewards are not all equal (DAPO eq. 11,
    :math:`0 < |\{o_i \text{ correct}\}| < G` for 0/1 rewards).

    Groups are consecutive blocks of ``group_size`` along the last dimension, as in
    :func:`~reasoning_core.group_normalize`. A kept group has a non-zero advantage for at least
    one response under every group estimator (its rewards are not all equal to their mean); a
    dropped one has all advantages exactly 0. Per response:
    ``keep.repeat_interleave(group_size, dim=-1)``.

    >>> dynamic_sampling_keep(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]), 2)
    tensor([False,  True, False, False])

    Raises:
        ValueError: if ``group_size`` is not a positive int dividing the number of rewards.
    """
    n = raw_rewards.shape[-1]
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if n % group_size != 0:
        raise ValueError(f"group_size={group_size} does not divide the number of rewards ({n})")
    grouped = raw_rewards.unflatten(-1, (-1, group_size))
    return (grouped != grouped[..., :1]).any(dim=-1)


def mask_truncated(
    response_mask: Shaped[Tensor, "*batch seq"],
    truncated: Bool[Tensor, "*batch"],
) -> Shaped[Tensor, "*batch seq"]:
    """The response mask with every token of a truncated response set to 0 (DAPO's overlong
    filtering, section 3.4): such a response adds 0 to the loss and gets no gradient.

    Its row still counts in the batch size of the per-response mean (as an empty response
    does, ``grpo_loss``); with ``length_norm="token_mean"`` compute
    :func:`~reasoning_core.losses.token_mean_constant` from the returned mask. The input is not
    modified.

    >>> mask_truncated(torch.tensor([[1, 1, 0], [1, 1, 1]]), torch.tensor([False, True]))
    tensor([[1, 1, 0],
            [0, 0, 0]])
    """
    keep = ~truncated.unsqueeze(-1)
    return torch.where(keep, response_mask, torch.zeros_like(response_mask))


def soft_overlong_penalty(
    response_lengths: Int[Tensor, "*batch"] | Float[Tensor, "*batch"],
    max_length: int,
    cache_length: int,
) -> Float[Tensor, "*batch"]:
    r"""DAPO's soft overlong punishment (eq. 13), added to each response's reward.

    .. math::
        R_\text{length}(y) = \begin{cases}
            0 & |y| \le L_\text{max} - L_\text{cache} \\
            \frac{(L_\text{max} - L_\text{cache}) - |y|}{L_\text{cache}}
                & L_\text{max} - L_\text{cache} < |y| \le L_\text{max} \\
            -1 & L_\text{max} < |y|
        \end{cases}

    The penalty falls linearly from 0 to -1 over the last ``cache_length`` tokens before
    ``max_length``. DAPO uses 20,480 and 4,096.

    >>> soft_overlong_penalty(torch.tensor([10, 16, 18, 20, 25]), 20, 4)
    tensor([ 0.0000,  0.0000, -0.5000, -1.0000, -1.0000])

    Raises:
        ValueError: unless ``0 < cache_length <= max_length``.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(
            f"soft_overlong_penalty needs 0 < cache_length <= max_length, got "
            f"cache_length={cache_length}, max_length={max_length}"
        )
    lengths = response_lengths.to(torch.get_default_dtype())
    free = max_length - cache_length
    ramp = (free - lengths) / cache_length
    return torch.clamp(ramp, min=-1.0, max=0.0)
