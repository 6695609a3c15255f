"""Apply each mutant of mutants.yaml to a temporary copy of the repository and run its tests.

Each mutant is one edit: in ``file``, the ``original`` snippet (which must occur exactly once)
becomes ``replacement``. The mutated copy runs ``python -m pytest -x -q`` on the mutant's
``tests`` (files or node ids, relative to the repository root): a failing run kills the
mutant, a passing run means it survived, a run past ``--timeout`` kills it by timeout (listed
apart: a hang is a weak way to be caught). Before the mutants, each distinct test selection
runs once on the unmutated copy; a selection that fails there makes its mutants "invalid".

The working tree is never modified: the copy is made from ``git ls-files`` (tracked and
untracked-but-not-ignored files) into a temporary folder, each mutant is written there and
undone after its run. The copy's own code is what runs (``PYTHONPATH`` and the working
directory point at it).

    .venv/bin/python tests/mutation/run_mutants.py                    # every mutant
    .venv/bin/python tests/mutation/run_mutants.py --part core        # one part
    .venv/bin/python tests/mutation/run_mutants.py --only core-03,envs-11
    .venv/bin/python tests/mutation/run_mutants.py --list             # print them, run nothing

Prints one line per mutant as it finishes, then a table per part (killed, survived, killed
by timeout, invalid) in Markdown.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).resolve().with_name("mutants.yaml")
PARTS = ("core", "trainers", "runtime", "envs", "workflow", "tinyworld")
FIELDS = ("id", "part", "file", "original", "replacement", "tests", "description")


class MutantError(ValueError):
    """A mutant entry that cannot be applied; the message names the entry and the field."""


def load_mutants(path: Path = MUTANTS, root: Path = ROOT) -> list[dict]:
    """The mutant list, checked: every field present, known part, unique id, the original
    snippet found exactly once in its file, a replacement that differs, tests that exist."""
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(entries, list):
        raise MutantError(f"{path}: expected a list of mutants")
    seen: set[str] = set()
    for i, m in enumerate(entries):
        where = f"{path.name} entry {i} ({m.get('id', '?') if isinstance(m, dict) else '?'})"
        if not isinstance(m, dict):
            raise MutantError(f"{where}: not a mapping")
        missing = [f for f in FIELDS if f not in m]
        if missing:
            raise MutantError(f"{where}: missing field(s) {missing}")
        if m["id"] in seen:
            raise MutantError(f"{where}: duplicate id")
        seen.add(m["id"])
        if m["part"] not in PARTS:
            raise MutantError(f"{where}: field 'part' must be one of {PARTS}, got {m['part']!r}")
        source = root / m["file"]
        if not source.is_file():
            raise MutantError(f"{where}: field 'file': {m['file']} does not exist")
        count = source.read_text().count(m["original"])
        if count != 1:
            raise MutantError(
                f"{where}: field 'original' occurs {count} times in {m['file']} (must be once)"
            )
        if m["original"] == m["replacement"]:
            raise MutantError(f"{where}: 'replacement' equals 'original'")
        if source.suffix == ".py":
            mutated = source.read_text().replace(m["original"], m["replacement"], 1)
            try:
                compile(mutated, str(source), "exec")
            except SyntaxError as exc:
                raise MutantError(
                    f"{where}: the mutated {m['file']} does not compile: {exc}"
                ) from None
        if not m["tests"] or not isinstance(m["tests"], list):
            raise MutantError(f"{where}: field 'tests' must be a non-empty list")
        for t in m["tests"]:
            if not (root / t.split("::")[0]).is_file():
                raise MutantError(f"{where}: field 'tests': {t} names no file")
    return entries


def copy_repository(dest: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def run_tests(copy: Path, tests: list[str], timeout: float) -> tuple[str, str, float]:
    """(outcome, detail, seconds): outcome "pass", "fail" or "timeout"; detail names the first
    failing test (or the last lines of output)."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"over {timeout:.0f} s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    if proc.returncode == 0:
        return "pass", "", seconds
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, flags=re.M)
    tail = " | ".join(proc.stdout.strip().splitlines()[-2:])
    return "fail", failed[0] if failed else tail[-200:], seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=PARTS, action="append", help="only these parts")
    parser.add_argument("--only", help="comma-separated mutant ids")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated runs")
    parser.add_argument("--list", action="store_true", help="print the mutants and stop")
    args = parser.parse_args(argv)

    mutants = load_mutants()
    if args.part:
        mutants = [m for m in mutants if m["part"] in args.part]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m["id"] for m in mutants}
        if unknown:
            parser.error(f"--only: unknown mutant id(s) {sorted(unknown)}")
        mutants = [m for m in mutants if m["id"] in wanted]
    if args.list:
        for m in mutants:
            print(f"{m['id']}\t{m['file']}\t{m['description']}")
        return 0

    results: list[tuple[dict, str, str, float]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rrl-mutants-") as tmp:
        copy = Path(tmp)
        copy_repository(copy)
        broken: set[tuple[str, ...]] = set()
        if not args.no_baseline:
            for selection in dict.fromkeys(tuple(m["tests"]) for m in mutants):
                outcome, detail, seconds = run_tests(copy, list(selection), args.timeout)
                print(f"baseline\t{outcome}\t{seconds:.0f}s\t{' '.join(selection)}\t{detail}")
                if outcome != "pass":
                    broken.add(selection)
        for m in mutants:
            if tuple(m["tests"]) in broken:
                results.append((m, "invalid", "its tests fail unmutated", 0.0))
                print(f"{m['id']}\tinvalid\t-\t{m['description']}", flush=True)
                continue
            path = copy / m["file"]
            original = path.read_text()
            path.write_text(original.replace(m["original"], m["replacement"], 1))
            try:
                outcome, detail, seconds = run_tests(copy, m["tests"], args.timeout)
            finally:
                path.write_text(original)
            verdict = {"fail": "killed", "pass": "survived", "timeout": "timeout"}[outcome]
            results.append((m, verdict, detail, seconds))
            print(
                f"{m['id']}\t{verdict}\t{seconds:.0f}s\t{m['description']}"
                + (f"\t[{detail}]" if detail else ""),
                flush=True,
            )

    print(f"\n{len(results)} mutants in {time.perf_counter() - started:.0f} s\n")
    print("| part | mutants | killed | survived | killed by timeout | invalid |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for part in PARTS:
        counts = Counter(v for m, v, _, _ in results if m["part"] == part)
        total = sum(counts.values())
        if total:
            print(
                f"| {part} | {total} | {counts['killed']} | {counts['survived']} | "
                f"{counts['timeout']} | {counts['invalid']} |"
            )
    survivors = [m for m, v, _, _ in results if v == "survived"]
    if survivors:
        print("\nSurvived:")
        for m in survivors:
            print(f"- {m['id']} ({m['file']}): {m['description']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
