"""FSDP2: the policy sharded over the ranks, and what a sharded policy needs around it.

``sharding: fsdp`` (``rrl sft``, ``ei``, ``grpo``, ``dpo`` and ``instruction-sft`` under
``torchrun``; DPO's frozen reference too) wraps each decoder layer and then the
whole model in ``torch.distributed.fsdp.fully_shard``: each rank holds 1/N of every parameter,
gradient and AdamW moment; a forward gathers a layer's parameters for its time, a backward
reduce-scatters its gradients. The reduce-scatter is set to *sum* (gradient divide factor 1):
each rank's loss is already its share of the global batch mean. On CUDA the layers compute in
bfloat16 and reduce in float32 (``MixedPrecisionPolicy``); on a CPU everything stays float32.

Every rank must then run the same forwards: the rollout engine cannot sample from the sharded
module (ranks decode different lengths), so it samples from a full copy of the weights of its
own, refreshed from the shards on every sync (:class:`FullWeightsEngine`); the evaluation's
entropy pass and the final checkpoint use that copy (instruction SFT, which has no engine,
gathers into a CPU copy on rank 0 alone: :func:`gather_whole`); the resumable state is the
gathered full state (:func:`full_state`, :func:`load_full_state`), loadable at any world size. A rank with
fewer micro batches in an accumulation runs passes of zero loss up to the most any rank has
(:func:`lockstep_passes`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from reasoning_core.runtime.distributed.collectives import is_sharded, max_value
from reasoning_core.runtime.errors import ConfigError

# torch.distributed.fsdp and torch.distributed.checkpoint are imported by the functions that
# use them: importing them costs 1-1.5 s of every process's start on a CPU, and only a run
# with ``sharding: fsdp`` needs them (``is_sharded`` tells without them).


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a Hugging Face causal LM (``model.model.layers``)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ConfigError(
            f"setting 'sharding' is fsdp, but {type(model).__name__} has no decoder layers at "
            "model.layers to shard; use sharding: none"
        )
    return list(layers)


def shard_policy(model: torch.nn.Module) -> torch.nn.Module:
    """``fully_shard`` each decoder layer, then the whole model (in place; returns it), the
    gradients summed over the ranks. bf16 compute with float32 reduction on CUDA; none on CPU."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    device = next(model.parameters()).device
    if device.type == "cuda":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for module in model.modules():
        if is_sharded(module):
            module.set_gradient_divide_factor(1.0)  # sum: each rank's loss is its share
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no other)
    return model


def lockstep_passes(model: torch.nn.Module, passes: int) -> int:
    """The forward-backward passes this rank runs in an accumulation: its own ``passes``, or,
    for a sharded ``model``, the most that any rank runs (every sharded forward and backward
    waits for every rank, and a batch's share can be one micro batch shorter on some ranks);
    the rank runs the ones it lacks as passes of zero loss (a collective: every rank calls it)."""
    if not is_sharded(model):
        return passes
    return int(max_value(float(passes)))


def _full_options(cpu: bool) -> Any:
    """Options of ``torch.distributed.checkpoint.state_dict``: whole tensors, on rank 0's CPU
    when ``cpu`` (the other ranks then get empty dicts)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu)


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of a sharded ``model`` gathered whole, on every rank (a
    collective: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options(cpu=False))


def gather_whole(model: torch.nn.Module, whole: torch.nn.Module | None) -> torch.nn.Module:
    """``whole`` (rank 0's unsharded CPU copy of ``model``) holding the shards of ``model``
    gathered onto rank 0's CPU; on the other ranks, which pass None and save nothing,
    ``model`` itself (a collective: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(model, options=_full_options(cpu=True))  # empty elsewhere
    if whole is None:
        return model
    with torch.no_grad():
        whole.load_state_dict(state)
    return whole


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The whole model and optimizer state of a sharded policy, gathered onto rank 0's CPU
    (the other ranks get empty dicts; every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    return (
        get_model_state_dict(model, options=_full_options(cpu=True)),
        get_optimizer_state_dict(model, optimizer, options=_full_options(cpu=True)),
    )


def load_full_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict
) -> None:
    """Load a :func:`full_state` (read by every rank) into a sharded policy and its optimizer:
    each rank keeps its own shards, whatever the world size that saved it."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    set_model_state_dict(model, model_state, options=_full_options(cpu=False))
    set_optimizer_state_dict(model, optimizer, optim_state, options=_full_options(cpu=False))


class FullWeightsEngine:
    """A rollout engine over a full copy of a sharded policy's weights.

    ``engine`` samples from ``full_model`` (an unsharded copy of the policy, made before it was
    sharded); :meth:`sync_weights` gathers the shards into it (a collective: every rank syncs
    at the same points, as the trainers do) and then syncs ``engine`` from it. Everything else
    is ``engine``'s."""

    def __init__(self, engine: Any, full_model: torch.nn.Module):
        self.engine = engine
        self.full_model = full_model

    def gather(self, model: torch.nn.Module) -> torch.nn.Module:
        """``full_model`` holding the shards of ``model`` gathered whole (a collective), the
        engine left as it is (it may keep older weights between syncs)."""
        with torch.no_grad():
            self.full_model.load_state_dict(full_weights(model))
        return self.full_model

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.engine.sync_weights(self.gather(model))

    def generate(self, prompts: list[str], params: Any) -> Any:
        return self.engine.generate(prompts, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def unsharded_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain copy of ``model`` for its engine (before sharding), without gradients."""
    full = copy.deepcopy(model)
    full.requires_grad_(False)
    return full
