"""One run spread over several processes: ``torchrun`` and ``torch.distributed``.

- :mod:`.world`: the process group a ``torchrun`` launch asks for (its ``WORLD_SIZE``,
  ``RANK``, ``LOCAL_RANK``; gloo on a CPU, NCCL on CUDA), this process's rank and the world
  size (1 and rank 0 without a launch), rank 0 as the only writer, the teardown.
- :mod:`.collectives`: sums and gathers of metrics, scalars and gradients over the ranks, how
  a batch is split over them, and the check that refuses a world size that does not divide a
  setting, before any work.
- :mod:`.sharding`: FSDP2 (``sharding: fsdp``): the policy sharded per decoder layer, the
  gradients summed by the reduce-scatter, a full copy of the weights for the rollout engine,
  the gathered state to save and load.

Without ``torchrun`` (no ``WORLD_SIZE`` above 1) every helper is the identity and nothing is
initialized, so a plain ``rrl`` run computes what it always did. docs/gpu.md, "Several GPUs",
says what is split and what is summed.

May import: :mod:`..errors`. Nothing else of the runtime.
"""
