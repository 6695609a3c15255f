"""The imperative shell: models, rollout engines, trainers, checkpoints and metrics.

It imports the pure core (:mod:`reasoning_core`); the core never imports it.
"""
