"""A run's folder and its state on disk: what survives the process.

- :mod:`.folder`: :class:`~.folder.RunContext`, the ``--out`` folder of a run (config.yaml,
  metrics, wall clock, final checkpoint and done.json).
- :mod:`.resume`: the resumable state (model, optimizer, scheduler, RNG, counters), the
  settings a run may resume under, and the check that they are the saved ones.
- :mod:`.checkpoint`: Hugging Face model folders written atomically, and checked (files,
  safetensors headers, SHA256SUMS) before a command uses one.
- :mod:`.metrics` (metrics.jsonl, generations) and :mod:`.trackers` (TensorBoard, W&B).
- :mod:`.rng`: the named random streams of a run.

May import: :mod:`..errors`, :mod:`..settings`, :mod:`..distributed`. Not engines, training,
evaluation or trainers.
"""
