"""The imperative shell: models, rollout engines, trainers, checkpoints and metrics.

It imports the pure core (:mod:`reasoning_core`); the core never imports it. Its parts, from
the bottom layer up (each may import the ones before it, never one after; each subpackage's
``__init__`` says what it holds; tests/runtime/test_layers.py checks every import):

- :mod:`.errors`: the errors written for the user (``ConfigError``, ``StateError``);
  :mod:`.commands`: the command registry (names only).
- :mod:`.settings`: reading, checking and documenting settings; provenance.
- :mod:`.engines`: the rollout interface (:mod:`.engines.rollout`) and the engines behind it
  (Hugging Face, static KV cache, vLLM).
- :mod:`.run`: the run folder, resume, checkpoints, metrics, trackers, random streams.
- :mod:`.training`: the steps a trainer is made of (policy, rollouts, batching, updates, the
  engine check).
- :mod:`.evaluation`: evaluating a model; ``rrl eval``, ``eval-suite``, the supplement's.
- :mod:`.trainers`: SFT, expert iteration, GRPO, DPO, instruction SFT, and their life cycle.
- Beside them: :mod:`.report` (tables and figures from metrics.jsonl), :mod:`.tinyworld`
  (the tiny base model), :mod:`.gpu_check` (the prepared GPU check).
- :mod:`.cli`: the ``rrl`` entry point.

To follow a GRPO step: :mod:`.trainers.grpo` (the loop) -> :mod:`.training.rollouts`
(``sample_and_grade``) -> :mod:`.training.updates` (``grpo_update``) -> the core's
``grpo_microbatch_train_step`` (ARCHITECTURE.md, "How one GRPO step flows").
"""
