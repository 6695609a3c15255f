"""Fixtures of the runtime tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from micro_world import build_world

import envs


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> Path:
    """A micro base model: a few pretraining steps (near-random outputs, which the real grader
    scores 0 but for luck; tests that need rewards script them, see scripted_rollouts). Built
    once per session and only read: the trainer tests start every run from it."""
    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def task():
    """The synthetic arithmetic task, which the evaluation tests sample and grade."""
    return envs.get_task("arithmetic")
