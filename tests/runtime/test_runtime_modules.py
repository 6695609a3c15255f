"""The shell's module structure: no import circle, every module importable on its own, none
longer than 400 lines, and the rollout interface free of its implementations.

* The static check reads each module's top-level imports (project imports sit at the top of
  each module, see ARCHITECTURE.md) and refuses a cycle among them, naming it.
* The dynamic check imports each module of ``reasoning_core`` first thing in a fresh
  interpreter: a circle that the static check could miss (an import hidden in a function
  that runs at import time) fails there with "partially initialized module".
"""

from __future__ import annotations

import ast
import os
import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from project_root import ROOT

import reasoning_core

PACKAGE = ROOT / "reasoning_core"
MAX_SHELL_LINES = 400


def project_modules() -> dict[str, Path]:
    """Every module and package of ``reasoning_core`` (``__main__`` modules left out: they
    run a command when imported) -> its file."""
    modules = {"reasoning_core": PACKAGE / "__init__.py"}
    for info in pkgutil.walk_packages(reasoning_core.__path__, "reasoning_core."):
        if info.name.endswith(".__main__"):
            continue
        relative = Path(*info.name.split(".")[1:])
        if info.ispkg:
            modules[info.name] = PACKAGE / relative / "__init__.py"
        else:
            modules[info.name] = PACKAGE / relative.with_suffix(".py")
    return modules


def top_level_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports at module level (``from P import m`` counts as
    module ``P.m`` when that is a module, else as ``P``)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        else:
            continue
        found.update(n for n in names if n in modules)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_has_no_cycle():
    modules = project_modules()
    graph = {name: top_level_imports(path, modules) for name, path in modules.items()}
    assert len(graph) > 40
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    # The runtime imports the core, never the other way round.
    core = [m for m in graph if not m.startswith("reasoning_core.runtime")]
    assert not [(m, i) for m in core for i in graph[m] if i.startswith("reasoning_core.runtime")]


def test_the_rollout_interface_imports_no_engine():
    modules = project_modules()
    imports = top_level_imports(modules["reasoning_core.runtime.rollout"], modules)
    assert not [m for m in imports if m.startswith("reasoning_core.runtime.engines")], imports


def test_no_shell_module_is_longer_than_400_lines():
    lengths = {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in (PACKAGE / "runtime").rglob("*.py")
    }
    assert len(lengths) > 30
    assert {p: n for p, n in lengths.items() if n > MAX_SHELL_LINES} == {}


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    """One interpreter per module (about 3 s each on one core, run in parallel)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}

    def import_alone(name: str) -> tuple[str, int, str]:
        proc = subprocess.run(
            [sys.executable, "-c", f"import {name}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )
        return name, proc.returncode, proc.stderr[-1500:]

    names = sorted(project_modules())
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        results = list(pool.map(import_alone, names))
    failed = {name: err for name, rc, err in results if rc != 0}
    assert not failed, failed
