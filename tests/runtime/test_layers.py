"""The runtime's layers: every import of the package, inside functions too, points down.

``reasoning_core/runtime`` is split by concern into subpackages, each of which may import only
the ones below it (its ``__init__`` says which). This reads every import statement of every
module of ``reasoning_core`` and of the tasks package ``envs`` (module level, inside functions
and under ``if``), and the module names given to ``importlib.import_module`` as string
literals, and checks:

* the core (``reasoning_core`` outside ``runtime``) never imports the runtime or ``envs``;
* ``envs`` imports nothing of ``reasoning_core`` (the runtime imports it, not the reverse);
* each part imports only parts of its own layer's package or of lower layers (:data:`LAYERS`);
* nothing imports a trainer but its own package (the command registry names trainers, it
  does not import them), so engines and everything else stay free of trainers;
* no circle among the modules of both packages, counting the imports inside functions;
* no Python module sits directly under ``runtime/`` but the entry point (with its job server),
  the command registry and the errors.

A second test imports every module first thing, with no other module of the project loaded
(a circle that runs at import time fails there with "partially initialized module").
"""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from project_root import ROOT

import envs
import reasoning_core

PACKAGE = ROOT / "reasoning_core"
RUNTIME = "reasoning_core.runtime"
# The packages whose imports are read: the core with its runtime, and the tasks.
PACKAGES = (reasoning_core, envs)

# The runtime's parts, bottom layer first. A module may import modules of its own part and of
# parts on a lower layer; parts on one layer do not import each other.
LAYERS: list[set[str]] = [
    {"errors", "commands"},
    {"settings", "distributed"},
    {"engines"},
    {"run"},
    {"training", "tinyworld", "models"},
    {"evaluation", "report", "gpu_check"},
    {"trainers"},
    {"job_server"},  # the entry point's warm process: it runs whatever the entry point runs
    {"cli"},
]
TOP_LEVEL_MODULES = {"__init__.py", "cli.py", "job_server.py", "commands.py", "errors.py"}


def project_modules() -> dict[str, Path]:
    """Every module and package of ``reasoning_core`` and ``envs`` (``__main__`` modules left
    out: they run a command when imported) -> its file."""
    modules = {}
    for package in PACKAGES:
        top = Path(package.__file__).parent
        modules[package.__name__] = top / "__init__.py"
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith(".__main__"):
                continue
            relative = Path(*info.name.split(".")[1:])
            if info.ispkg:
                modules[info.name] = top / relative / "__init__.py"
            else:
                modules[info.name] = top / relative.with_suffix(".py")
    return modules


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest project module that ``name`` (a dotted path, maybe with an attribute at its
    end) names, or None for a name outside the project."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def all_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports anywhere in its code (``from P import m`` counts as
    module ``P.m`` when that is a module, else as ``P``), and those named as string literals
    to ``importlib.import_module``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        else:
            continue
        found.update(m for n in names if (m := _resolve(n, modules)) is not None)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: all_imports(path, modules) - {name} for name, path in modules.items()}


def part_of(module: str) -> str | None:
    """The runtime part a module belongs to (``settings``, ``cli``, ...); None outside it and
    for the runtime package itself."""
    if not module.startswith(RUNTIME + "."):
        return None
    return module[len(RUNTIME) + 1 :].split(".")[0]


def layer_of(part: str) -> int:
    for i, parts in enumerate(LAYERS):
        if part in parts:
            return i
    raise AssertionError(f"runtime part {part!r} is in no layer: add it to LAYERS")


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


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that point up a layer, or sideways to another part of the same layer."""
    bad = []
    for module, imports in graph.items():
        mine = part_of(module)
        if mine is None:
            continue
        for target in imports:
            theirs = part_of(target)
            if theirs is None or theirs == mine:
                continue
            if layer_of(theirs) >= layer_of(mine):
                bad.append(f"{module} ({mine}) imports {target} ({theirs})")
    return sorted(bad)


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_inside_functions_and_by_name_are_read(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import importlib\n"
        "def f():\n"
        "    from reasoning_core.runtime.trainers import grpo\n"
        "    return importlib.import_module('reasoning_core.runtime.run.metrics')\n"
    )
    found = all_imports(source, project_modules())
    assert found == {"reasoning_core.runtime.trainers.grpo", "reasoning_core.runtime.run.metrics"}


def test_a_layer_violation_is_named():
    graph = {
        "reasoning_core.runtime.engines.hf": {"reasoning_core.runtime.trainers.grpo"},
        "reasoning_core.runtime.trainers.grpo": {"reasoning_core.runtime.engines.hf"},
        "reasoning_core.runtime.report.runs": {"reasoning_core.runtime.evaluation.loop"},
    }
    assert layer_violations(graph) == [
        "reasoning_core.runtime.engines.hf (engines) imports "
        "reasoning_core.runtime.trainers.grpo (trainers)",
        "reasoning_core.runtime.report.runs (report) imports "
        "reasoning_core.runtime.evaluation.loop (evaluation)",
    ]


def test_the_core_never_imports_the_runtime_or_the_tasks():
    graph = import_graph()
    core = [m for m in graph if in_package(m, "reasoning_core") and not in_package(m, RUNTIME)]
    assert len(core) >= 8
    bad = [
        (m, i) for m in core for i in graph[m] if in_package(i, RUNTIME) or in_package(i, "envs")
    ]
    assert bad == []


def test_the_tasks_import_nothing_of_reasoning_core():
    graph = import_graph()
    tasks = [m for m in graph if in_package(m, "envs")]
    assert {"envs.rewards", "envs.grader", "envs.grade_pool", "envs.grade_stats"} <= set(tasks)
    assert [(m, i) for m in tasks for i in graph[m] if in_package(i, "reasoning_core")] == []


def test_the_grading_modules_import_one_way():
    """rewards -> grader -> grade_pool -> grade_stats, and never back (the reward functions
    reach a worker pickled by reference, not imported by the pool)."""
    graph = import_graph()
    order = ["envs.grade_stats", "envs.grade_pool", "envs.grader", "envs.rewards"]
    upward = [
        f"{m} imports {i}"
        for below, m in enumerate(order)
        for i in graph[m]
        if i in order and order.index(i) > below
    ]
    assert upward == []
    assert "envs.grader" in graph["envs.rewards"]  # the hard time limit


def test_every_import_points_down_a_layer():
    graph = import_graph()
    assert len(graph) > 60
    assert layer_violations(graph) == []


def test_nothing_imports_a_trainer_but_its_own_package():
    trainers = f"{RUNTIME}.trainers"
    graph = import_graph()
    outside = [
        f"{m} imports {i}"
        for m, imports in graph.items()
        for i in imports
        if i.startswith(trainers + ".") and not m.startswith(trainers)
    ]
    assert outside == []


def test_no_import_circle_counting_imports_inside_functions():
    graph = import_graph()
    assert any(in_package(m, "envs") for m in graph)  # the tasks are read too
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_only_the_entry_point_registry_and_errors_sit_directly_under_runtime():
    runtime = PACKAGE / "runtime"
    assert {p.name for p in runtime.glob("*.py")} == TOP_LEVEL_MODULES
    for sub in runtime.iterdir():
        if sub.is_dir() and (sub / "__init__.py").is_file():
            assert part_of(f"{RUNTIME}.{sub.name}") is not None
            layer_of(sub.name)  # every subpackage has a layer


def test_the_rollout_interface_imports_no_engine():
    imports = import_graph()[f"{RUNTIME}.engines.rollout"]
    assert [m for m in imports if m.startswith(f"{RUNTIME}.engines")] == []


@pytest.mark.parametrize("part", ["settings", "run", "training", "evaluation", "trainers"])
def test_each_layer_package_says_what_it_may_import(part):
    doc = ast.get_docstring(ast.parse((PACKAGE / "runtime" / part / "__init__.py").read_text()))
    assert doc and "May import" in doc


def test_the_registry_names_every_command_module_that_exists():
    from reasoning_core.runtime.commands import COMMANDS

    modules = project_modules()
    for name, command in COMMANDS.items():
        assert command.module in modules, name


# Imports each module named in argv in a child forked from this interpreter, which has loaded
# the third-party packages the modules import (torch alone takes about 2 s) and no module of
# the project: each child starts with none of the project loaded, as a fresh interpreter does,
# and a module still needs its own import statements for the names it uses. Prints one JSON
# line per module: name, exit code, the end of the traceback.
FORK_IMPORTER = """
import json, os, sys, traceback
import numpy, torch, yaml
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("envs", "reasoning_core"))
assert not loaded, loaded
for name in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            __import__(name)
        except BaseException:
            os.write(w, traceback.format_exc()[-1500:].encode())
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        err = f.read()
    _, status = os.waitpid(pid, 0)
    print(json.dumps([name, os.waitstatus_to_exitcode(status), err]), flush=True)
"""


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    """Each module imported first thing, with no other module of the project loaded (children
    forked from one interpreter per core that holds only third-party packages). A module that
    does not exist is reported as failing, so a failure cannot pass unseen."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    missing = "reasoning_core._no_such_module"
    names = [*sorted(project_modules()), missing]
    workers = max(1, min(4, os.cpu_count() or 1))

    def import_each(part: list[str]) -> list[tuple[str, int, str]]:
        proc = subprocess.run(
            [sys.executable, "-c", FORK_IMPORTER, *part],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [tuple(json.loads(line)) for line in proc.stdout.splitlines()]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = pool.map(import_each, [names[i::workers] for i in range(workers)])
    results = {name: (rc, err) for part in parts for name, rc, err in part}
    assert sorted(results) == sorted(names)
    rc, err = results.pop(missing)
    assert rc == 1 and "ModuleNotFoundError" in err
    failed = {name: err for name, (rc, err) in results.items() if rc != 0}
    assert not failed, failed
