"""The Snakemake workflow: planning (fast), lint and formatting, and the real smoke run.

The smoke run (marker ``workflow``) executes ``snakemake --cores 2`` on
``workflow/config/smoke.yaml`` in a temporary working directory, so it trains every rule of
the study at toy sizes and checks the outputs, plots and summary it leaves.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake") if (BIN / "snakemake").exists() else "snakemake"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HEAVY_RULES = {"tiny_world", "zero_shot", "sft", "ei", "grpo", "leaderboard"}
GPU_RULES = HEAVY_RULES - {"tiny_world"}


DEFAULT_CONFIG = str(ROOT / "workflow/config/config.yaml")


def snakemake(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run snakemake on the repository's Snakefile in working directory `cwd`. Outside the
    repository root the default `configfile:` is not found, so a --configfile is always given
    (the default configuration unless the caller passes one)."""
    if "--configfile" not in args:
        args = ("--configfile", DEFAULT_CONFIG, *args)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(cwd), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def planned_jobs(output: str) -> list[dict[str, str]]:
    """Jobs of a `snakemake -n` listing: rule name plus the job's `key: value` lines."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output):
        match = re.match(r"(?:local)?rule (\w+):", block)
        if not match:
            continue
        job = {"rule": match.group(1)}
        for line in block.splitlines()[1:]:
            key, sep, value = line.strip().partition(": ")
            if sep:
                job[key] = value
        jobs.append(job)
    return jobs


def resources(job: dict[str, str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in job.get("resources", "").split(", ") if "=" in item)


@pytest.mark.parametrize("config", ["gpu_math", "gpu_gsm8k", "gpu_countdown"])
def test_gpu_dry_run_lists_every_job_with_its_gpu(config, tmp_path):
    """The GPU studies plan without the weights; every training/eval job asks for one GPU."""
    result = snakemake(
        "-n", "--configfile", str(ROOT / f"workflow/config/{config}.yaml"), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    gpu_jobs = [j for j in jobs if j["rule"] in GPU_RULES]
    assert len(gpu_jobs) >= 10
    assert all(resources(j).get("gpu") == "1" for j in gpu_jobs), gpu_jobs
    # No tiny world on GPUs: the model path is a setting, not a job.
    assert not [j for j in jobs if j["rule"] == "tiny_world"]
    assert all(resources(j).get("gpu", "0") == "0" for j in jobs if j["rule"] not in GPU_RULES)


def test_default_study_plan_shares_the_control_and_keeps_heavy_jobs_apart(tmp_path):
    result = snakemake("-n", "--cores", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    heavy = [j for j in jobs if j["rule"] in HEAVY_RULES]
    # threads: 2 on every heavy rule, so `--cores 2` runs one heavy torch job at a time.
    assert heavy and all(j.get("threads", "1") == "2" for j in heavy), heavy
    outputs = [j["output"] for j in jobs if "output" in j]
    assert len(outputs) == len(set(outputs))
    assert "results/grpo/default/done.json" in outputs
    assert "results/summary.tsv" in outputs


def test_rows_equal_to_the_defaults_reuse_the_default_run(tmp_path):
    """A sweep row equal to the method's defaults is the default run, planned once."""
    methods = tmp_path / "methods.yaml"
    methods.write_text("grpo: {lr: 1.0e-4, loss_type: reinforce_with_baseline}\n")
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    (sweeps / "grpo_lr.tsv").write_text("lr\n3e-5\n1e-4\n")
    (sweeps / "grpo_baseline.tsv").write_text("loss_type\nno_baseline\nreinforce_with_baseline\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"methods: {methods}\nsweeps: {sweeps}\nmodel_path: {tmp_path}\n"
        "families: [grpo_lr, grpo_baseline]\n"
    )
    result = snakemake("-n", "--configfile", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    grpo = sorted(j["output"] for j in planned_jobs(result.stdout) if j["rule"] == "grpo")
    assert grpo == [
        "results/grpo/default/done.json",
        "results/grpo/loss_type~no_baseline/done.json",
        "results/grpo/lr~3e-5/done.json",
    ]
    # The variant's settings reach the command line as --set overrides.
    shell = snakemake(
        "results/grpo/lr~3e-5/done.json", "-n", "-p", "--configfile", str(config), cwd=tmp_path
    )
    assert "--set lr=3e-5" in shell.stdout
    assert f"--set model_path={tmp_path}" in shell.stdout


def test_schema_rejects_unknown_settings_and_fills_defaults(tmp_path):
    bad = snakemake("-n", "--config", "learning_rate=1", cwd=tmp_path)
    assert bad.returncode != 0
    assert "learning_rate" in bad.stderr + bad.stdout
    config = tmp_path / "minimal.yaml"
    config.write_text("methods: workflow/config/methods/tiny.yaml\n")
    good = snakemake("-n", "--configfile", str(config), cwd=tmp_path)
    assert good.returncode == 0, good.stderr + good.stdout
    assert "results/base/done.json" in good.stdout  # results_dir, model_path: defaults


def test_lint_reports_nothing(tmp_path):
    result = snakemake("--lint", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    text = result.stdout + result.stderr
    assert "Lints for" not in text, text
    assert "Congratulations" in text


def test_snakefiles_are_snakefmt_formatted():
    snakefmt = shutil.which("snakefmt", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if snakefmt is None:
        pytest.skip("snakefmt is not installed")
    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow/rules").glob("*.smk"))]
    result = subprocess.run(
        [snakefmt, "--check", *map(str, files)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr + result.stdout


SECTIONS = {
    "tiny-world": ("reasoning_core.runtime.tinyworld", "TinyWorldConfig"),
    "eval": ("reasoning_core.runtime.evaluate", "EvalConfig"),
    "sft": ("reasoning_core.runtime.sft", "SFTConfig"),
    "ei": ("reasoning_core.runtime.ei", "EIConfig"),
    "grpo": ("reasoning_core.runtime.grpo", "GRPOConfig"),
}
FAMILY_METHOD = {"sft": "sft", "ei": "ei"}  # every other table is a GRPO family


def known_settings(command: str) -> set[str]:
    import dataclasses
    import importlib

    module, name = SECTIONS[command]
    return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), name))}


@pytest.mark.parametrize("config", ["config", "smoke", "gpu_math", "gpu_gsm8k", "gpu_countdown"])
def test_workflow_settings_name_real_trainer_settings(config):
    """Method files, per-config settings, sweep columns and the leaderboard recipe use only
    settings the commands know, so no planned job can fail on a misspelt name."""
    import yaml

    cfg = yaml.safe_load((ROOT / f"workflow/config/{config}.yaml").read_text())
    methods = yaml.safe_load((ROOT / cfg["methods"]).read_text())
    for command in SECTIONS:
        used = set(methods.get(command) or {}) | set(cfg.get("settings", {}).get(command, {}))
        assert used <= known_settings(command), (config, command, used - known_settings(command))
    for table in sorted((ROOT / cfg.get("sweeps", "workflow/config/sweeps/tiny")).glob("*.tsv")):
        columns = set(table.read_text().splitlines()[0].split("\t"))
        method = FAMILY_METHOD.get(table.stem, "grpo")
        assert columns <= known_settings(method), (table, columns - known_settings(method))
    recipe = set(cfg.get("leaderboard", {}).get("settings", {}))
    assert recipe <= known_settings("grpo"), recipe - known_settings("grpo")


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) > 100, (path, image.shape)


@pytest.mark.workflow
def test_smoke_workflow_runs_end_to_end(tmp_path):
    """`snakemake --cores 2` on the smoke configuration: every rule runs; outputs are sound."""
    config = ROOT / "workflow/config/smoke.yaml"
    start = time.monotonic()
    result = snakemake("--cores", "2", "--configfile", str(config), cwd=tmp_path, timeout=1800)
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-5000:]
    print(f"smoke workflow: {seconds:.0f} s")
    results = tmp_path / "results" / "smoke"

    # Every planned run finished and left the SPEC section 3 files.
    runs = [p.parent for p in results.rglob("done.json")]
    assert len(runs) >= 15
    for run in runs:
        assert (run / "metrics.jsonl").is_file(), run
        json.loads((run / "done.json").read_text())
        if run.name != "base":
            assert (run / "config.yaml").is_file(), run
        for line in (run / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            assert isinstance(record["step"], int) and record["split"] in {"train", "eval"}

    # Plots: well-formed PNGs readable by matplotlib, one set per family.
    plots = sorted((results / "plots").glob("*.png"))
    names = {p.name for p in plots}
    assert {"grpo_lr_accuracy.png", "grpo_offpolicy_accuracy_time.png", "methods.png"} <= names
    assert {
        "grpo_offpolicy_accuracy_grpo_step.png",
        "grpo_clip_accuracy_grpo_step.png",
        "leaderboard_accuracy_time.png",
    } <= names
    # accuracy and training per family; off-policy against time; off-policy and clip against
    # GRPO steps; methods; the leaderboard against time
    assert len(plots) == 2 * 9 + 1 + 2 + 1 + 1
    for plot in plots:
        assert_png(plot)

    # summary.tsv: one row per run, SPEC columns plus one column per varied setting.
    with (results / "summary.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == len(runs)
    columns = set(rows[0])
    assert {"experiment", "run", "eval_accuracy", "eval_format_reward", "eval_examples"} <= columns
    assert {"wall_seconds", "lr", "loss_type", "max_examples", "template"} <= columns
    experiments = {r["experiment"] for r in rows}
    assert {"base", "zero_shot", "sft", "ei", "grpo", "leaderboard"} <= experiments
    for row in rows:
        if row["experiment"] != "base":
            assert 0.0 <= float(row["eval_accuracy"]) <= 1.0, row
    # Benchmarks of training rules; logs of every rule.
    assert (results / "benchmarks" / "grpo" / "default.tsv").is_file()
    assert (results / "logs" / "summary.log").is_file()

    # The HTML report gathers every figure with its caption.
    report_html = tmp_path / "report.html"
    made = snakemake("--report", str(report_html), "--configfile", str(config), cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    html = report_html.read_text()
    assert "grpo_lr_accuracy.png" in html and "learning-rate sweep" in html

    # Running again does nothing: completed jobs are never redone.
    again = snakemake("-n", "--configfile", str(config), cwd=tmp_path)
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
