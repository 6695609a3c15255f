r"""Control rewards: what a result of reinforcement learning with verifiable rewards is
compared against (Shao et al. 2025, "Spurious Rewards: Rethinking Training Signals in RLVR").

If training on a reward that says nothing about correctness raises accuracy as much as the
real reward does, the gain came from somewhere else (the format, the sampling, the
optimizer's drift), not from the verifier. Both controls are pure functions of the batch's
real rewards:

- ``random``: :func:`random_rewards`, the real rewards of the batch shuffled among its
  responses, so exactly the same number of 1s as the real reward, placed independently of
  which responses are correct.
- ``format_only``: the format reward alone (1 for a well-formed response, right or wrong).
"""

from __future__ import annotations

import torch

from ._typing import Float, Tensor

__all__ = ["CONTROL_REWARDS", "control_rewards", "random_rewards"]

CONTROL_REWARDS: tuple[str, ...] = ("none", "random", "format_only")


def random_rewards(
    raw_rewards: Float[Tensor, " n"],
    generator: torch.Generator,
) -> Float[Tensor, " n"]:
    """The batch's rewards in a random order: the same multiset of values (for 0/1 rewards,
    exactly the same rate of 1s), independent of which response earned which.

    Deterministic given the generator's state (CPU generators give the same permutation on
    every machine); the generator is advanced. Uses ``torch.randperm``, so not under ``vmap``.

    >>> random_rewards(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.Generator().manual_seed(1))
    tensor([0., 0., 0., 1.])
    """
    if raw_rewards.dim() != 1:
        raise ValueError(
            f"random_rewards takes a flat (n,) reward vector, got {tuple(raw_rewards.shape)}"
        )
    order = torch.randperm(raw_rewards.shape[0], generator=generator, device=raw_rewards.device)
    return raw_rewards.gather(0, order)


def control_rewards(
    control: str,
    raw_rewards: Float[Tensor, " n"],
    format_rewards: Float[Tensor, " n"],
    generator: torch.Generator | None = None,
) -> Float[Tensor, " n"]:
    """The reward to train on under ``control`` (one of :data:`CONTROL_REWARDS`): ``none``
    gives ``raw_rewards`` unchanged, ``random`` :func:`random_rewards` (needs ``generator``),
    ``format_only`` ``format_rewards``. The inputs are not modified.

    Raises:
        ValueError: on an unknown control, or ``random`` without a generator.
    """
    if control == "none":
        return raw_rewards
    if control == "random":
        if generator is None:
            raise ValueError("control='random' needs generator, which is None")
        return random_rewards(raw_rewards, generator)
    if control == "format_only":
        return format_rewards.to(raw_rewards.dtype)
    raise ValueError(f"unknown reward control {control!r}; expected one of {CONTROL_REWARDS}")
