"""Off-policy training in the GRPO loop: the correction of a rollout batch, the policy
versions a fixed rollout lag samples with, and the staleness a train line records.

- :func:`offpolicy_correction` is the registered correction (``offpolicy_correction``,
  :func:`reasoning_core.offpolicy_weights`) that weights each response token: proximal = the
  learner's log-probs at the start of the update (the scored old log-probs or, with one
  optimizer step per rollout batch and none scored, that step's own forward, detached),
  behaviour = the engine's log-probs of its sampled tokens where they align with the training
  tokens (:func:`~reasoning_core.runtime.training.engine_check.engine_log_probs`). The
  engine check weighs it with its other measurements of the batch.
- :class:`PolicyVersions` keeps the last ``rollout_lag`` versions of the weights (version v:
  after v GRPO steps) so that step k's rollout batch is sampled by version ``max(0, k - lag)``;
  the versions are part of the resumable state (:meth:`PolicyVersions.state`). With lag 0 it
  hands back the live policy itself: the synchronous loop, unchanged.
- :func:`staleness_metrics`: how many versions old a batch's samples are.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from reasoning_core import offpolicy_weights
from reasoning_core.runtime.training.engine_check import Correction

# The upper ends of the staleness histogram's buckets (a last bucket takes the rest).
STALENESS_BUCKETS = (0, 1, 2, 4, 8)


def offpolicy_correction(cfg: Any) -> Correction | None:
    """``cfg.offpolicy_correction`` with its settings bound (None for ``none``): what the
    rollout batch's engine check (:class:`~reasoning_core.runtime.training.engine_check.
    RolloutCheck`) weighs each token by, from the scored old log-probs or, with none scored,
    on the batch's first update's own forward."""
    if cfg.offpolicy_correction == "none":
        return None
    return partial(
        offpolicy_weights, cfg.offpolicy_correction, settings=cfg.correction_settings_given
    )


class FrozenWeights:
    """A saved version of the policy's weights, as an engine's ``sync_weights`` reads a
    module: its ``state_dict()``."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._state


class PolicyVersions:
    """The policy's weights by version for ``rollout_lag`` = ``lag``: version v is the policy
    after v GRPO steps. :meth:`sampler` at step k keeps version k (the live policy's weights
    now) and returns version ``max(0, k - lag)``, dropping the older ones; at most ``lag`` + 1
    versions are held. ``saved``: the versions of a resumed run's state."""

    def __init__(self, lag: int, saved: dict[int, dict[str, torch.Tensor]] | None = None) -> None:
        self.lag = lag
        self.versions: dict[int, dict[str, torch.Tensor]] = dict(saved or {})

    def version(self, step: int) -> int:
        """The version that samples step ``step``'s rollout batch."""
        return max(0, step - self.lag)

    def sampler(self, step: int, model: torch.nn.Module) -> Any:
        """What the engine syncs from before step ``step``'s rollouts: with lag 0 the policy
        ``model`` itself; else the saved version :meth:`version` (a :class:`FrozenWeights`)."""
        if self.lag == 0:
            return model
        self.versions[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        wanted = self.version(step)
        for old in [v for v in self.versions if v < wanted]:
            del self.versions[old]
        return FrozenWeights(self.versions[wanted])

    def state(self) -> dict[str, Any] | None:
        """What the resumable state keeps: the held versions (None with lag 0: nothing)."""
        if self.lag == 0:
            return None
        return {"policy_versions": dict(self.versions)}

    @classmethod
    def resumed(cls, lag: int, extra: dict[str, Any] | None) -> PolicyVersions:
        """The versions of a resumed run's state (``extra``), or none on a fresh start."""
        return cls(lag, (extra or {}).get("policy_versions"))


def staleness_metrics(versions: list[int], step: int) -> dict[str, float]:
    """How many GRPO steps older than ``step`` the samples' policy versions are:
    ``async/staleness_mean``, ``async/staleness_max`` and the share of samples in each bucket
    ``async/staleness_le_{b}`` (staleness <= b, above the bucket before) and
    ``async/staleness_gt_8``."""
    ages = torch.tensor([step - v for v in versions], dtype=torch.float64)
    out = {
        "async/staleness_mean": float(ages.mean()),
        "async/staleness_max": float(ages.max()),
    }
    low = -1
    for high in STALENESS_BUCKETS:
        out[f"async/staleness_le_{high}"] = float(((ages > low) & (ages <= high)).double().mean())
        low = high
    out[f"async/staleness_gt_{low}"] = float((ages > low).double().mean())
    return out
