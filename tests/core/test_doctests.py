"""The examples in the docstrings of the packages run as tests (``doctest``): every module of
``reasoning_core`` and ``envs`` whose source holds an example is imported and its examples
checked, so a docstring that drifts from the code fails here."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import envs
import reasoning_core

PACKAGES = (reasoning_core, envs)


def modules_with_examples() -> list[str]:
    names = []
    for package in PACKAGES:
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            spec = importlib.util.find_spec(info.name)
            if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
                continue
            if ">>> " in Path(spec.origin).read_text(encoding="utf-8"):
                names.append(info.name)
    return sorted(names)


MODULES = modules_with_examples()


def test_the_core_modules_with_examples_are_found():
    assert {"reasoning_core.masked", "reasoning_core.logprobs"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    # Tensors print with 4 decimals (torch's default), so a value is checked to that precision.
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed"
