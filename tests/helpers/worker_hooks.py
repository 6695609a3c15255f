"""Engine factories a rollout worker process receives by name (tests of its failures)."""

from __future__ import annotations


def broken_engine(cfg, model, tokenizer):
    """An engine factory that fails the way a real one might (out of memory, a bad option)."""
    raise RuntimeError("the engine could not start (a test's broken factory)")
