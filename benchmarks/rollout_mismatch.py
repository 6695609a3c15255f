"""The rollout engine off the policy on the tiny world, with and without TIS: run the two
workflow configurations and print the table of docs/rollout_mismatch.md.

``workflow/config/mismatch.yaml`` trains GRPO at the tiny world's default settings with the
engine lagging the policy (``sync_every: 5``), without and with ``rollout_correction: tis``,
and the default run in sync, three seeds each (``results/mismatch/lag``);
``workflow/config/mismatch_vllm.yaml`` samples with vLLM in bfloat16 against the float32 policy,
without and with TIS (``results/mismatch/vllm_bfloat16``). Per run, over its seeds (mean and
95% t-interval of the mean, ``rrl summary``'s): the final evaluation's accuracy, the mean
rollout reward of the last 10 GRPO steps, and over every train line the logged mean |engine -
policy| log-prob difference, the share of tokens whose ratio left [0.5, 2], the mean TIS weight
and the share of tokens clipped at the cap.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/rollout_mismatch.py           # train, then print
    PYTHONPATH=$PWD .venv/bin/python benchmarks/rollout_mismatch.py --table   # print only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from reasoning_core.runtime.report.bands import mean_interval

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("workflow/config/mismatch.yaml", "workflow/config/mismatch_vllm.yaml")
STUDIES = {"lag": "results/mismatch/lag", "vllm_bfloat16": "results/mismatch/vllm_bfloat16"}
LAST_STEPS = 10
# Small quantities in scientific notation; the TIS weight, near 1, to five places.
FORMATS = {
    "rollout/logprob_diff_mean": ".2e",
    "rollout/ratio_outside": ".1e",
    "rollout/tis_weight_mean": ".5f",
    "rollout/tis_clipped": ".1e",
}
COLUMNS = (
    ("accuracy", "final eval accuracy"),
    ("reward", f"reward, last {LAST_STEPS} steps"),
    ("rollout/logprob_diff_mean", "logprob diff"),
    ("rollout/ratio_outside", "ratio outside"),
    ("rollout/tis_weight_mean", "TIS weight"),
    ("rollout/tis_clipped", "TIS clipped"),
)


def finished(metrics: Path) -> bool:
    """Whether a seed's run has its last line (``done``): a run in progress is left out."""
    lines = metrics.read_text().splitlines()
    return bool(lines) and json.loads(lines[-1])["split"] == "done"


def seed_values(metrics: Path) -> dict[str, float]:
    """One seed's numbers of :data:`COLUMNS` (a TIS key absent without TIS)."""
    lines = [json.loads(s) for s in metrics.read_text().splitlines() if s.strip()]
    train = [r for r in lines if r["split"] == "train"]
    evals = [r for r in lines if r["split"] == "eval"]
    last = [r for r in train if r["grpo_step"] > train[-1]["grpo_step"] - LAST_STEPS]
    out = {
        "accuracy": evals[-1]["accuracy"],
        "reward": sum(r["reward"] for r in last) / len(last),
    }
    for key, _ in COLUMNS[2:]:
        if key in train[0]:
            out[key] = sum(r[key] for r in train) / len(train)
    return out


def table(studies: dict[str, str]) -> str:
    rows = ["| study | run | seeds | " + " | ".join(name for _, name in COLUMNS) + " |"]
    rows.append("| --- | --- | ---: |" + " ---: |" * len(COLUMNS))
    for study, folder in studies.items():
        found = sorted((ROOT / folder / "grpo").rglob("seed~*/metrics.jsonl"))
        for run in sorted({m.parent.parent for m in found}):
            seeds = [m for m in sorted(run.glob("seed~*/metrics.jsonl")) if finished(m)]
            if not seeds:
                continue
            values = [seed_values(m) for m in seeds]
            name = run.relative_to(ROOT / folder / "grpo")
            cells = []
            for key, _ in COLUMNS:
                got = [v[key] for v in values if key in v]
                if not got:
                    cells.append("")
                    continue
                i = mean_interval(got)
                form = FORMATS.get(key, ".3f")
                band = f" [{i.lo:{form}}, {i.hi:{form}}]" if i.n > 1 else ""
                cells.append(f"{i.mean:{form}}{band}")
            rows.append(f"| {study} | {name} | {len(values)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", action="store_true", help="print the table of finished runs only")
    p.add_argument("--cores", default="2", help="snakemake --cores")
    args = p.parse_args(argv)
    if not args.table:
        snakemake = Path(sys.executable).parent / "snakemake"
        for config in CONFIGS:
            cmd = [str(snakemake), "--cores", args.cores, "--configfile", config]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT)
    print(table(STUDIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
