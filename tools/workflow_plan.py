"""Every job the workflow plans, per configuration, in a form two versions can be diffed in.

    python tools/workflow_plan.py OUT_DIR

writes OUT_DIR/<config>.txt for each workflow/config/*.yaml (and config.yaml with
`model_path=null`, which plans the tiny world): one block per job of `snakemake -n -p`, run in
an empty working directory, with the job's rule, outputs, inputs, log, wildcards, threads,
resources and shell command. Job ids, dates and `reason:` lines are dropped (they change from
run to run) and the blocks are sorted, so equal files mean the same jobs with the same commands.

A configuration with a `supplement` section also plans the supplement's chain (its own target,
OUT_DIR/<config>_supplement.txt); the paths it leaves empty for the user (supplement.yaml's
model_path, judge_path, ...) are filled with placeholders, which planning never opens.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
DROPPED = ("jobid:", "reason:")
SUPPLEMENT_PATHS = ("model_path", "judge_path", "sft_train_data", "sft_val_data", "hh_dir")


def plan(configfiles: list[Path], extra: list[str]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        # The default configuration names the shipped base relative to the working directory.
        (Path(tmp) / "workflow").symlink_to(ROOT / "workflow")
        command = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", tmp]
        command += ["--configfile", *map(str, configfiles), "-n", "-p", "--cores", "2", *extra]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise SystemExit(f"{configfiles}: snakemake failed\n{result.stderr}{result.stdout}")
    text = result.stdout.replace(tmp, "<workdir>").replace(str(ROOT), "<root>")
    blocks = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        if not re.match(r"(?:local)?rule \w+:", block):
            continue
        # A job's block ends at the first blank line; the dry-run summary follows the last.
        body = block.split("\n\n")[0].split("\nJob stats:")[0]
        lines = [line.rstrip() for line in body.splitlines()]
        lines = [line for line in lines if not line.strip().startswith(DROPPED)]
        blocks.append("\n".join(lines))
    return "\n\n".join(sorted(blocks)) + f"\n\n{len(blocks)} jobs\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for the <config>.txt plans")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="workflow_plan_"))
    runs = []
    for c in sorted((ROOT / "workflow/config").glob("*.yaml")):
        supplement = (yaml.safe_load(c.read_text()) or {}).get("supplement")
        files = [c]
        if supplement is not None:
            missing = {
                key: f"/placeholder/{key}" for key in SUPPLEMENT_PATHS if not supplement.get(key)
            }
            if missing:
                files.append(scratch / f"{c.stem}_paths.yaml")
                files[-1].write_text(yaml.safe_dump({"supplement": missing}))
        runs.append((c.stem, files, []))
        if supplement is not None:
            runs.append((f"{c.stem}_supplement", files, ["supplement"]))
    runs.append(
        (
            "config_build_base",
            [ROOT / "workflow/config/config.yaml"],
            ["--config", "model_path=null"],
        )
    )
    for name, configfiles, extra in runs:
        (out / f"{name}.txt").write_text(plan(configfiles, extra))
        print(name, flush=True)


if __name__ == "__main__":
    main()
