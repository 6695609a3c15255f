"""``ROOT``: the repository root, for tests and helpers at any depth under ``tests/``.

Tests import it (``from project_root import ROOT``) instead of counting ``parents[...]`` from
their own path, so a test file can move between folders without its paths breaking. This
folder (``tests/helpers``) is on ``sys.path`` through pytest's ``pythonpath`` setting in
pyproject.toml.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(path: str | Path) -> ModuleType:
    """The Python script at ``path`` (relative to ``ROOT`` unless absolute; a benchmark or a
    tool, not a package module) imported as a module named after its file, and registered in
    ``sys.modules`` under that name (dataclasses and pickling look a module up there)."""
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
