"""Group-normalized advantages (GRPO, Shao et al. 2024, "DeepSeekMath", section 4.1.2)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ._typing import Float, Tensor

__all__ = ["compute_group_normalized_rewards", "group_normalize"]


def _check_group_size(n: int, group_size: int) -> None:
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if n % group_size != 0:
        raise ValueError(
            f"group_size={group_size} does not divide the number of responses ({n}); "
            "groups are consecutive blocks of group_size responses"
        )


def group_normalize(
    raw_rewards: Float[Tensor, "*batch n"],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[Float[Tensor, "*batch n"], dict[str, Tensor]]:
    r"""Advantages of responses relative to the other responses to the same prompt.

    Responses come in consecutive groups of ``group_size`` (the ``G`` samples of one
    question). For response ``i`` of a group with rewards ``r_1..r_G``:

    .. math::
        A_i = r_i - \mathrm{mean}(r_1..r_G)
        \quad\text{or, with } \texttt{normalize\_by\_std}, \quad
        A_i = \frac{r_i - \mathrm{mean}(r_1..r_G)}{\mathrm{std}(r_1..r_G) + \epsilon}

    with ``std`` the unbiased sample standard deviation (as ``torch.std``). Without the std
    division this is REINFORCE with a per-group mean baseline (Dr. GRPO, Liu et al. 2025,
    argues for dropping the division).

    A group whose rewards are all equal gets advantage exactly 0, even with ``eps = 0``
    (where the formula is 0/0) and even when the floating-point mean of equal values is not
    exactly that value; a group of size 1 is such a group.

    Args:
        raw_rewards: rewards, the last dimension holding ``N`` responses in groups.
        group_size: responses per group; must divide ``N``.
        advantage_eps: ``epsilon`` added to the std.
        normalize_by_std: divide by the group std.

    Returns:
        ``(advantages, metadata)``; ``advantages`` has the shape of ``raw_rewards``;
        ``metadata`` holds scalar (per leading index) tensors ``reward_mean``, ``reward_std``,
        ``reward_max``, ``reward_min`` and ``frac_constant_groups`` (the share of groups
        with no learning signal).

    Raises:
        ValueError: if ``group_size`` is not a positive int dividing ``N``.
    """
    _check_group_size(raw_rewards.shape[-1], group_size)
    grouped = raw_rewards.unflatten(-1, (-1, group_size))
    constant = (grouped == grouped[..., :1]).all(dim=-1, keepdim=True)
    centered = grouped - grouped.mean(dim=-1, keepdim=True)
    centered = torch.where(constant, torch.zeros_like(centered), centered)
    if normalize_by_std:
        if group_size > 1:
            std = grouped.std(dim=-1, keepdim=True)
        else:
            std = torch.zeros_like(grouped[..., :1])
        # Constant groups have centered == 0; give them a safe denominator of 1.
        denom = torch.where(constant, torch.ones_like(std), std + advantage_eps)
        centered = centered / denom
    advantages = centered.flatten(-2)
    metadata = {
        "reward_mean": raw_rewards.mean(-1),
        "reward_std": (
            raw_rewards.std(-1)
            if raw_rewards.shape[-1] > 1
            else torch.zeros_like(raw_rewards[..., 0])
        ),
        "reward_max": raw_rewards.amax(-1),
        "reward_min": raw_rewards.amin(-1),
        "frac_constant_groups": constant.to(raw_rewards.dtype).mean((-2, -1)),
    }
    return advantages, metadata


def compute_group_normalized_rewards(
    reward_fn: Callable[[str, str], dict[str, float]],
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[str],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[Float[Tensor, " n"], Float[Tensor, " n"], dict[str, Tensor]]:
    """Score each response with ``reward_fn`` and turn the rewards into group advantages.

    This is ``reward_fn`` applied to each (response, ground truth) pair followed by
    :func:`group_normalize` (see there for the formula). Trainers that grade in batch call
    :func:`group_normalize` directly.

    Args:
        reward_fn: ``reward_fn(response, ground_truth) -> {"reward", "format_reward",
            "answer_reward"}``.
        rollout_responses: ``N`` responses, consecutive blocks of ``group_size`` sharing a
            prompt.
        repeated_ground_truths: ``N`` ground truths, each repeated ``group_size`` times.
        group_size, advantage_eps, normalize_by_std: as in :func:`group_normalize`.

    Returns:
        ``(advantages (N,), raw_rewards (N,), metadata)``; ``metadata`` holds the means of
        ``reward``, ``format_reward`` and ``answer_reward`` and :func:`group_normalize`'s
        statistics, all as tensors.

    Raises:
        ValueError: on length mismatch or a ``group_size`` not dividing ``N``.
    """
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(
            f"rollout_responses ({len(rollout_responses)}) and repeated_ground_truths "
            f"({len(repeated_ground_truths)}) differ in length"
        )
    _check_group_size(len(rollout_responses), group_size)
    scores = [
        reward_fn(r, g) for r, g in zip(rollout_responses, repeated_ground_truths, strict=True)
    ]
    table = {
        key: torch.tensor([float(s[key]) for s in scores], dtype=torch.float32)
        for key in ("reward", "format_reward", "answer_reward")
    }
    raw_rewards = table["reward"]
    advantages, stats = group_normalize(raw_rewards, group_size, advantage_eps, normalize_by_std)
    metadata = {
        "reward": raw_rewards.mean(),
        "format_reward": table["format_reward"].mean(),
        "answer_reward": table["answer_reward"].mean(),
        **stats,
    }
    return advantages, raw_rewards, metadata
