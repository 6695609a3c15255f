"""Randomness keyed by step: named streams, so a resumed run draws what an uninterrupted one would.

Every random choice a trainer makes after start-up (which questions a step samples, the rollout
engine's seed, the order of the training rows) comes from a generator that depends only on
``(seed, stream, *keys)`` (:func:`step_rng`), never on a generator's saved position. A run
killed after step k and resumed replays steps k+1, ... exactly.

The stream numbers are part of every saved run: changing one changes what every later run
draws, so the values below are fixed (the trainers used these bare numbers before they had
names).
"""

from __future__ import annotations

import random
from enum import IntEnum

import numpy as np
import torch


class Stream(IntEnum):
    """The random streams of the trainers (the value is the first key after the seed)."""

    QUESTIONS = 1  # EI, GRPO: the questions one step samples, keyed by the step
    ROLLOUT_SEED = 2  # EI, GRPO: the rollout engine's sampling seed, keyed by the step
    GRPO_ORDER = 3  # GRPO: rollouts into train batches, keyed by (GRPO step, epoch)
    EI_ORDER = 4  # EI: kept rollouts into SFT batches, keyed by (EI step, SFT epoch)
    DPO_ORDER = 5  # DPO: a round's pairs into batches, keyed by (round, epoch)
    DPO_VAL = 6  # DPO: the pairs held out for validation
    REWARD_CONTROL = 7  # GRPO: the random control reward's shuffle, keyed by (step, round)
    ROLLOUT_GROUP = 8  # rollout_seeding group: one group's engine seed, (step, round, group)
    SFT_SUBSET = 10  # SFT: the examples that `max_examples` keeps
    SFT_ORDER = 11  # SFT: the example order of one epoch, keyed by the epoch
    PACKED_ORDER = 12  # instruction SFT: the order of the packed chunks, keyed by the epoch


def step_rng(seed: int, stream: Stream, *keys: int) -> np.random.Generator:
    """A NumPy generator that depends only on ``(seed, stream, *keys)``: resumable without
    saved state. ``np.random.default_rng([seed, stream, *keys])``."""
    return np.random.default_rng([int(seed), int(stream), *(int(k) for k in keys)])


def step_seed(seed: int, stream: Stream, *keys: int) -> int:
    """A 31-bit seed derived from ``(seed, stream, *keys)`` (for an engine or a torch
    generator): the first integer in ``[0, 2**31 - 1)`` that :func:`step_rng` draws."""
    return int(step_rng(seed, stream, *keys).integers(0, 2**31 - 1))


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (once, at the start of a run)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
