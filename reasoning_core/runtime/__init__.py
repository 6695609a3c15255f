"""The imperative shell: models, rollout engines, trainers, checkpoints and metrics.

It imports the pure core (:mod:`reasoning_core`); the core never imports it. One module per
concern, read in this order to follow a training step (ARCHITECTURE.md, "How one GRPO step
flows", names the functions):

- :mod:`.sft`, :mod:`.ei`, :mod:`.grpo`: the trainers, each one loop over the steps below;
- :mod:`.sampling`: ``sample_and_grade`` (rollouts through an engine of :mod:`.engines`,
  behind the interface in :mod:`.rollout`);
- :mod:`.updates`: the ``sft_update`` / ``grpo_update`` optimizer steps over the micro
  batches of :mod:`.batching`;
- :mod:`.run`: the run folder, evaluation, resume and the ``rrl`` entry of a trainer;
- :mod:`.settings`, :mod:`.policy`, :mod:`.rng`: what a run is configured with, the model and
  optimizer, the named random streams;
- beside them: :mod:`.config`, :mod:`.checkpoint`, :mod:`.metrics` and :mod:`.trackers`,
  :mod:`.evaluate` (``rrl eval``), :mod:`.generations`, :mod:`.tinyworld`, :mod:`.report`,
  :mod:`.gpu_check`, :mod:`.cli`.
"""
