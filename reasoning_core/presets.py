"""Named combinations of the core's settings that together make one published method.

Each preset maps setting names (the keywords of :func:`~reasoning_core.compute_advantages`
and :func:`~reasoning_core.grpo_loss`, as ``rrl grpo`` spells them) to values. A preset says
what its paper changes with respect to GRPO; everything it does not name stays as configured.
``normalize_constant`` of ``masked_normalize`` is left to the caller (the paper uses the
maximum generation length); that of ``token_mean`` is
:func:`~reasoning_core.losses.token_mean_constant` of the whole batch.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["PRESETS"]

PRESETS = MappingProxyType(
    {
        # Shao et al. 2024: group mean and std, per-response mean over tokens.
        "grpo": MappingProxyType(
            {"advantage_estimator": "grpo", "loss_type": "grpo_clip", "length_norm": "masked_mean"}
        ),
        # Liu et al. 2025, "Understanding R1-Zero-Like Training": no std division (it
        # up-weights easy and hard questions) and no division by each response's length (it
        # favours long wrong answers); each response's token sum is divided by a constant.
        "dr_grpo": MappingProxyType(
            {
                "advantage_estimator": "dr_grpo",
                "loss_type": "grpo_clip",
                "length_norm": "masked_normalize",
            }
        ),
        # Yu et al. 2025: clip-higher, token-level loss, dynamic sampling, soft overlong penalty.
        "dapo": MappingProxyType(
            {
                "advantage_estimator": "grpo",
                "loss_type": "dapo",
                "cliprange_low": 0.2,
                "cliprange_high": 0.28,
                "length_norm": "token_mean",
                "dynamic_sampling": True,
                "overlong": "soft_penalty",
            }
        ),
        # Zheng et al. 2025: sequence-level ratio and clip, per-response mean.
        "gspo": MappingProxyType(
            {
                "advantage_estimator": "grpo",
                "loss_type": "gspo",
                "cliprange_low": 3e-4,
                "cliprange_high": 4e-4,
                "length_norm": "masked_mean",
            }
        ),
    }
)
