"""``ROOT``: the repository root, for tests and helpers at any depth under ``tests/``.

Tests import it (``from project_root import ROOT``) instead of counting ``parents[...]`` from
their own path, so a test file can move between folders without its paths breaking. This
folder (``tests/helpers``) is on ``sys.path`` through pytest's ``pythonpath`` setting in
pyproject.toml.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
