"""One ``rrl`` run at two commits, interleaved in rounds: wall seconds, their ratio, and whether
the metrics are the same apart from ``time/`` keys (and the keys given to ``--ignore``).

For a lever that has no setting to turn it off (the old code path is gone), and for refactors
(which must change no metric). Each commit's files are exported once (``git archive``) under
``--out``; every run starts a fresh process from the same saved ``config.yaml``, with
``--set`` overrides (e.g. the model path), one torch thread as the config says.

    python tools/ab_commits.py --old 8603874 --new HEAD --command ei \\
        --config results/default/ei/default/seed~0/config.yaml --set model_path=results/default/base \\
        --ignore rollout/entropy --rounds 2 --out /tmp/ab
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from reasoning_core.runtime.run.metrics import read_metrics, without_time

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def export(commit: str, into: Path) -> Path:
    """The files of ``commit`` (``git archive``) at ``into``, reused when already there; the
    repository itself is left as it is."""
    done = into / ".exported"
    if not done.exists():
        into.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
        done.write_text(commit + "\n")
    return into


def metrics(folder: Path, ignore: set[str]) -> list[dict]:
    """The run's metric lines without ``time/`` keys and without the ``ignore`` keys."""
    return [
        {k: v for k, v in line.items() if k not in ignore}
        for line in without_time(read_metrics(folder))
    ]


def run(tree: Path, args, out: Path) -> float:
    cmd = [sys.executable, "-m", "reasoning_core.runtime.cli", args.command]
    cmd += ["--config", str(Path(args.config).resolve()), "--out", str(out)]
    for pair in ["progress=false", "save_checkpoint=false", *args.set]:
        cmd += ["--set", pair]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    with open(f"{out}.log", "w") as log:
        subprocess.run(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="baseline commit")
    p.add_argument("--new", default="HEAD", help="commit with the change (default HEAD)")
    p.add_argument("--command", required=True, help="rrl command: sft, ei, grpo or eval")
    p.add_argument("--config", required=True, help="a run's saved config.yaml")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE override (repeat)")
    p.add_argument("--ignore", action="append", default=[], help="metric key left out of the check")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, required=True, help="scratch folder")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    trees = {
        "old": export(args.old, args.out / "tree_old"),
        "new": export(args.new, args.out / "tree_new"),
    }
    print(f"# ab_commits {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"# cpu count {os.cpu_count()}, load {load()}, {time.strftime('%Y-%m-%d %H:%M')}")
    walls: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            before = load()
            wall = run(trees[name], args, args.out / f"{name}_{r}")
            walls[name].append(wall)
            print(f"round {r} {name} wall {wall:7.1f} s  load before {before} after {load()}")
    ratios = [o / n for o, n in zip(walls["old"], walls["new"], strict=True)]
    print(
        "wall ratio old / new: "
        + ", ".join(f"{x:.2f}" for x in ratios)
        + f"  (mean {statistics.mean(ratios):.2f})"
    )
    ignore = set(args.ignore)
    same = all(
        metrics(args.out / f"{a}_{r}", ignore) == metrics(args.out / "new_0", ignore)
        for a in ("old", "new")
        for r in range(args.rounds)
    )
    kept = "time/" + "".join(f", {k}" for k in sorted(ignore))
    print(f"metrics identical across every run apart from {kept}: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
