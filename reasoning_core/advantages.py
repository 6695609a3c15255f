"""Advantages of sampled responses from their scalar rewards.

GRPO's group-normalized advantages (Shao et al. 2024, "DeepSeekMath", section 4.1.2) and the
estimators that followed it, all pure functions of a flat reward vector whose consecutive
blocks of ``group_size`` responses share a prompt. Each is registered by name in
:data:`~reasoning_core.registry.ADVANTAGE_ESTIMATORS` with its formula and paper
(docs/algorithms.md's table reads them); :func:`compute_advantages` dispatches on the name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ._typing import Float, Tensor
from .registry import ADVANTAGE_ESTIMATORS, register_advantage_estimator

__all__ = [
    "batch_std_advantages",
    "compute_advantages",
    "compute_group_normalized_rewards",
    "group_normalize",
    "reinforce_pp_advantages",
    "rloo_advantages",
]


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


def _last_dim_std(x: Tensor) -> Tensor:
    """Unbiased std (as ``torch.std``) over the last dimension, kept; 0 for one element."""
    if x.shape[-1] > 1:
        return x.std(dim=-1, keepdim=True)
    return torch.zeros_like(x[..., :1])


def rloo_advantages(
    raw_rewards: Float[Tensor, "*batch n"],
    group_size: int,
) -> tuple[Float[Tensor, "*batch n"], dict[str, Tensor]]:
    r"""REINFORCE leave-one-out advantages (Kool et al. 2019; Ahmadian et al. 2024, "Back to
    Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs").

    Each response's baseline is the mean reward of the *other* responses to the same prompt:

    .. math::
        A_i = r_i - \frac{1}{G-1}\sum_{j \ne i} r_j = \frac{G}{G-1}\,(r_i - \bar r)

    so the baseline of response ``i`` does not depend on ``r_i`` (raising ``r_i`` by ``d``
    raises ``A_i`` by exactly ``d`` and lowers each other ``A_j`` of its group by
    ``d / (G - 1)``), which keeps the gradient estimate unbiased. A group whose rewards are all
    equal gets exactly 0.

    >>> rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), 3)[0]
    tensor([ 1.0000, -0.5000, -0.5000,  0.0000,  0.0000,  0.0000])

    Args:
        raw_rewards: rewards, the last dimension holding ``N`` responses in groups.
        group_size: ``G >= 2`` responses per group (a baseline needs another response).

    Returns:
        ``(advantages, metadata)``: advantages of ``raw_rewards``' shape and
        :func:`group_normalize`'s statistics.

    Raises:
        ValueError: if ``group_size < 2`` or does not divide ``N``.
    """
    _check_group_size(raw_rewards.shape[-1], group_size)
    if group_size < 2:
        raise ValueError(f"rloo needs group_size >= 2 (a leave-one-out baseline), got {group_size}")
    centered, metadata = group_normalize(raw_rewards, group_size, 0.0, normalize_by_std=False)
    return centered * (group_size / (group_size - 1)), metadata


def batch_std_advantages(
    raw_rewards: Float[Tensor, "*batch n"],
    group_size: int,
    advantage_eps: float,
) -> tuple[Float[Tensor, "*batch n"], dict[str, Tensor]]:
    r"""Group mean, batch std (LitePPO: Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL
    for LLM Reasoning", section 4.1).

    .. math:: A_i = \frac{r_i - \mathrm{mean}(r_{g(i)})}{\mathrm{std}(r_1..r_N) + \epsilon}

    The std is the unbiased std of the raw rewards over the whole batch (all ``N`` responses
    along the last dimension), so a group whose rewards barely differ is not blown up as
    GRPO's per-group std does. With one group it is GRPO's advantage. (verl's
    "REINFORCE++-baseline" divides by the std of the group-centered rewards instead.) A group
    whose rewards are all equal gets exactly 0.

    Returns:
        ``(advantages, metadata)`` as :func:`group_normalize`.
    """
    centered, metadata = group_normalize(raw_rewards, group_size, 0.0, normalize_by_std=False)
    std = _last_dim_std(raw_rewards)
    # Where every reward of the batch is equal, every group is constant and centered == 0.
    denom = torch.where(std > 0, std + advantage_eps, torch.ones_like(std))
    return centered / denom, metadata


def reinforce_pp_advantages(
    raw_rewards: Float[Tensor, "*batch n"],
    advantage_eps: float,
) -> tuple[Float[Tensor, "*batch n"], dict[str, Tensor]]:
    r"""REINFORCE++ advantages (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for
    Aligning Large Language Models", eq. 8): the outcome reward normalized over the whole
    batch, with no group baseline.

    .. math:: A_i = \frac{r_i - \mathrm{mean}(r_1..r_N)}{\mathrm{std}(r_1..r_N) + \epsilon}

    (the per-token KL of the paper's return is a separate term here:
    :func:`reasoning_core.kl.kl_penalty`). A batch whose rewards are all equal gets exactly 0.

    Returns:
        ``(advantages, metadata)``: ``metadata`` as :func:`group_normalize` with the whole
        batch as one group.
    """
    n = raw_rewards.shape[-1]
    if n == 0:
        raise ValueError("reinforce_pp needs at least one reward")
    return group_normalize(raw_rewards, n, advantage_eps, normalize_by_std=True)


@register_advantage_estimator(
    "grpo",
    paper="Shao et al. 2024, DeepSeekMath",
    formula="(r - mean_g) / (std_g + eps)",
    without_std="dr_grpo",
    note="the baseline of GRPO (the handout's default)",
)
def _grpo(raw_rewards, group_size, advantage_eps):
    return group_normalize(raw_rewards, group_size, advantage_eps, normalize_by_std=True)


@register_advantage_estimator(
    "dr_grpo",
    paper="Liu et al. 2025, Understanding R1-Zero-Like Training",
    formula="r - mean_g",
    note="no std division: questions almost always solved (or failed) are not up-weighted",
)
def _dr_grpo(raw_rewards, group_size, advantage_eps):
    return group_normalize(raw_rewards, group_size, advantage_eps, normalize_by_std=False)


@register_advantage_estimator(
    "rloo",
    paper="Ahmadian et al. 2024 (RLOO)",
    formula="r - mean of the other G-1 rewards of g",
    note="the baseline does not contain the response's own reward: an unbiased estimate",
)
def _rloo(raw_rewards, group_size, advantage_eps):
    return rloo_advantages(raw_rewards, group_size)


@register_advantage_estimator(
    "batch_std",
    paper="Liu et al. 2025, Tricks or Traps? (LitePPO)",
    formula="(r - mean_g) / (std over the batch + eps)",
    note="group mean, batch std: a group whose rewards barely differ is not blown up",
)
def _batch_std(raw_rewards, group_size, advantage_eps):
    return batch_std_advantages(raw_rewards, group_size, advantage_eps)


@register_advantage_estimator(
    "reinforce_pp",
    paper="Hu 2025 (REINFORCE++)",
    formula="(r - batch mean) / (batch std + eps)",
    note="no group at all: the baseline is the batch",
)
def _reinforce_pp(raw_rewards, group_size, advantage_eps):
    return reinforce_pp_advantages(raw_rewards, advantage_eps)


def compute_advantages(
    raw_rewards: Float[Tensor, "*batch n"],
    group_size: int,
    estimator: str,
    advantage_eps: float,
) -> tuple[Float[Tensor, "*batch n"], dict[str, Tensor]]:
    """Advantages by the estimator's name, an entry of :data:`ADVANTAGE_ESTIMATORS`.

    ``grpo`` and ``dr_grpo`` are :func:`group_normalize` with and without the std division;
    ``rloo``, ``batch_std`` and ``reinforce_pp`` are the functions of those names (the last
    ignores ``group_size``). The Dr. GRPO method also sums each response's loss over a
    constant instead of its length: the preset ``dr_grpo`` (``reasoning_core.presets``) pairs
    the estimator with that reduction.

    Raises:
        ValueError: on an unknown estimator, or as the estimator's function.
    """
    return ADVANTAGE_ESTIMATORS[estimator].fn(raw_rewards, group_size, advantage_eps)
