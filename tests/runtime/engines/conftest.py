"""Fixtures the engine tests share: the tiny tokenizer and a random tiny Qwen2 model over it
(built once per test module)."""

from __future__ import annotations

import pytest
from tiny_model import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(len(tokenizer))
