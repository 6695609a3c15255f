"""What the policy-gradient loss tests share: random batches, the settings every registered
loss gets, and its inputs (tests/core/test_losses.py, test_pg_variants.py, test_correction.py).

The tables are read from the core's registry (``reasoning_core.POLICY_LOSSES``), so a newly
registered loss is under every property test without an edit here.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from reasoning_core import POLICY_LOSSES, LossInputs, LossSettings

# The clip settings every loss gets (each takes those its entry lists): both sides differ, so a
# swapped pair shows.
CLIPS = {"cliprange": 0.2, "cliprange_low": 0.1, "cliprange_high": 0.3}


@st.composite
def pg_batches(draw, min_batch=1, max_batch=4, max_seq=6, spread=0.5):
    """``log_probs`` (B, T) float64, the sampling policy's ``old`` and a reference's ``ref``
    near them (``spread``), ``adv`` and ``rewards`` (B, 1), and a random ``mask`` (B, T)."""
    b = draw(st.integers(min_batch, max_batch))
    t = draw(st.integers(1, max_seq))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    log_probs = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 5
    old = log_probs + torch.randn(b, t, generator=gen, dtype=torch.float64) * spread
    ref = log_probs + torch.randn(b, t, generator=gen, dtype=torch.float64) * spread
    adv = torch.randn(b, 1, generator=gen, dtype=torch.float64)
    rewards = torch.rand(b, 1, generator=gen, dtype=torch.float64)
    mask = torch.rand(b, t, generator=gen) > 0.3
    return {
        "log_probs": log_probs,
        "old": old,
        "ref": ref,
        "adv": adv,
        "rewards": rewards,
        "mask": mask,
    }


def grad_of(fn, x):
    """The gradient of ``fn(x).sum()`` at ``x`` by autograd."""
    x = x.clone().requires_grad_(True)
    fn(x).sum().backward()
    return x.grad


def loss_settings(loss_type: str, **more) -> LossSettings:
    """``loss_type``'s settings with :data:`CLIPS` (``more`` replaces or adds)."""
    return LossSettings(loss_type, **{**CLIPS, **more})


def loss_inputs(b: dict, rows=slice(None), **more) -> LossInputs:
    """Every input a loss may read, rows ``rows`` of batch ``b`` (``more``: the others)."""
    return LossInputs(
        raw_rewards=b["rewards"][rows],
        advantages=b["adv"][rows],
        old_log_probs=b["old"][rows],
        **more,
    )


def needs(loss_type: str) -> list[str]:
    """What a direct call of ``loss_type`` must be given: its entry's inputs, the settings
    without a default, and those the others default to."""
    entry = POLICY_LOSSES[loss_type]
    required = [p.name for p in entry.params if p.default is None and not p.unbounded]
    required += [p.default for p in entry.params if isinstance(p.default, str)]
    return [*entry.inputs, *dict.fromkeys(required)]


LOSS_TYPES = list(POLICY_LOSSES)
