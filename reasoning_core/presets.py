"""Named combinations of settings that together make one published method.

Each preset maps setting names, as ``rrl grpo`` spells them, to values: what its paper changes
with respect to GRPO. The loss's part (its aggregation, the settings its paper uses) is read
from the loss's registry entry (:data:`~reasoning_core.registry.POLICY_LOSSES`), so a clip
range or an aggregation is written once. ``rrl grpo --set preset=NAME`` applies one; a setting
given explicitly wins over the preset's. ``normalize_constant`` of ``masked_normalize`` is left
to the caller (the paper uses the maximum generation length); that of ``token_mean`` is
:func:`~reasoning_core.losses.token_mean_constant` of the whole batch.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from . import advantages, losses  # noqa: F401 - they register the methods the presets name
from .registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

__all__ = ["PRESETS", "preset_settings"]


def preset_settings(estimator: str, loss_type: str, **more: Any) -> MappingProxyType:
    """The settings of advantage estimator ``estimator`` with loss ``loss_type`` as its paper
    runs it (the entry's aggregation and paper settings), then ``more``."""
    ADVANTAGE_ESTIMATORS[estimator]  # noqa: B018 - an unknown name fails here, by name
    entry = POLICY_LOSSES[loss_type]
    return MappingProxyType(
        {
            "advantage_estimator": estimator,
            "loss_type": loss_type,
            "length_normalization": entry.aggregation,
            **entry.paper_settings,
            **more,
        }
    )


PRESETS = MappingProxyType(
    {
        # Shao et al. 2024: group mean and std, PPO's clip, per-response mean over tokens.
        "grpo": preset_settings("grpo", "grpo_clip"),
        # Liu et al. 2025, "Understanding R1-Zero-Like Training": no std division (it
        # up-weights easy and hard questions) and no division by each response's length (it
        # favours long wrong answers); each response's token sum is divided by a constant.
        "dr_grpo": preset_settings("dr_grpo", "grpo_clip", length_normalization="masked_normalize"),
        # Yu et al. 2025: clip-higher, token-level loss, dynamic sampling, soft overlong penalty.
        "dapo": preset_settings("grpo", "dapo", dynamic_sampling=True, overlong="soft_penalty"),
        # Zheng et al. 2025: sequence-level ratio and clip, per-response mean.
        "gspo": preset_settings("grpo", "gspo"),
    }
)
