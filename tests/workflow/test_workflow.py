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
import yaml
from project_root import ROOT
from snakemake_runs import (
    BIN,
    SECTIONS,
    SNAKEMAKE,
    known_settings,
    planned_jobs,
    resources,
    snakemake,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HEAVY_RULES = {"tiny_world", "zero_shot", "sft", "ei", "grpo", "leaderboard", "dpo", "dpo_pairs"}
GPU_RULES = (HEAVY_RULES - {"tiny_world"}) | {"eval_suite_base", "eval_suite_run"}


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


SHIPPED_BASE = "workflow/resources/tiny_world"


def shipped_base_copy(cwd: Path) -> Path:
    """The shipped base, copied to where the default configuration looks for it from `cwd`,
    every file newer than anything else (as a fresh clone or a `touch` could leave them)."""
    folder = cwd / SHIPPED_BASE
    shutil.copytree(ROOT / SHIPPED_BASE, folder)
    later = time.time() + 3600
    for path in folder.iterdir():
        os.utime(path, (later, later))
    return folder


def test_each_seeds_json_is_a_shell_job_of_rrl_seeds_over_every_seed(tmp_path):
    """seeds.json comes from `rrl seeds`, a command that starts without torch. A `run:` block
    would be run by a new snakemake process that parses the whole workflow again: about 4 s of
    CPU for each of the study's 28 runs."""
    shipped_base_copy(tmp_path)
    result = snakemake("-n", "-p", "--cores", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = [j for j in planned_jobs(result.stdout) if j["rule"] == "seeds"]
    assert len(jobs) == 28
    for job in jobs:
        name = job["wildcards"].removeprefix("run=")
        run = f"results/default/{name}"
        assert job["Shell command"] == (
            f"rrl seeds --run {run} --seeds 0 1 2 --out {run}/seeds.json "
            f"> results/default/logs/seeds/{name}.log 2>&1"
        ), job


def test_default_study_plan_shares_the_control_and_runs_two_jobs_at_once(tmp_path):
    shipped_base_copy(tmp_path)
    result = snakemake("-n", "--cores", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    heavy = [j for j in jobs if j["rule"] in HEAVY_RULES]
    # threads_per_job (1) on every heavy rule, so `--cores 2` runs two heavy jobs at once.
    assert heavy and all(j.get("threads", "1") == "1" for j in heavy), heavy
    # The shipped base is a source, not a rule's output: never rebuilt, whatever its files'
    # times; zero-shot and the runs from the base take its weights as input.
    assert not [j for j in jobs if j["rule"] == "tiny_world"]
    [zero] = [j for j in jobs if j.get("output") == "results/default/zero_shot/seed~0/done.json"]
    assert f"{SHIPPED_BASE}/model.safetensors" in zero["input"].split(", ")
    outputs = [j["output"] for j in jobs if "output" in j]
    assert len(outputs) == len(set(outputs))
    assert "results/default/summary.tsv" in outputs
    # Every run once per seed (0, 1, 2), zero-shot included, and one seeds.json per run across
    # seeds; the base model once.
    for seed in (0, 1, 2):
        assert f"results/default/grpo/default/seed~{seed}/done.json" in outputs
        assert f"results/default/leaderboard/seed~{seed}/done.json" in outputs
        assert f"results/default/zero_shot/seed~{seed}/done.json" in outputs
    assert "results/default/grpo/default/done.json" not in outputs
    assert "results/default/zero_shot/done.json" not in outputs
    assert "results/default/base/done.json" not in outputs
    by_rule = {}
    for job in jobs:
        by_rule.setdefault(job["rule"], []).append(job)
    assert len(by_rule["zero_shot"]) == 3
    seeded = [
        j for j in jobs if j["rule"] in {"zero_shot", "sft", "ei", "grpo", "leaderboard", "dpo"}
    ]
    assert len(seeded) == 3 * len(by_rule["seeds"])
    [summary] = by_rule["summary"]
    inputs = summary["input"].split(", ")
    assert (
        "results/default/grpo/lr~3e-4/seeds.json" in inputs
        and "results/default/leaderboard/seeds.json" in inputs
    )
    assert "results/default/zero_shot/seeds.json" in inputs
    assert all(j["output"].endswith("/seeds.json") for j in by_rule["seeds"])
    # Plots read the run folders and wait for every seed.
    [methods] = by_rule["plot_methods"]
    assert "results/default/grpo/default/seed~2/done.json" in methods["input"].split(", ")

    # model_path null builds a base once, on two threads (nothing else can start before it),
    # from the pretraining seed `base_seed`.
    built = snakemake(
        "-n", "-p", "--cores", "2", "--config", "model_path=null", "base_seed=2", cwd=tmp_path
    )
    assert built.returncode == 0, built.stderr + built.stdout
    [base] = [j for j in planned_jobs(built.stdout) if j["rule"] == "tiny_world"]
    assert base["threads"] == "2" and base["output"] == "results/default/base/done.json"
    assert " --set seed=2 --out results/default/base " in built.stdout

    # threads_per_job: 2 runs one heavy job at a time on two cores.
    two = snakemake("-n", "--cores", "2", "--config", "threads_per_job=2", cwd=tmp_path)
    assert two.returncode == 0, two.stderr + two.stdout
    heavy = [j for j in planned_jobs(two.stdout) if j["rule"] in HEAVY_RULES]
    assert heavy and all(j.get("threads", "1") == "2" for j in heavy), heavy


def test_job_server_is_switched_off_from_the_command_line(tmp_path):
    """`--config job_server=false` arrives as text; the plan reads it as the boolean."""
    result = snakemake("-n", "--config", "job_server=false", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout


def test_leaderboard_seed_starts_from_the_same_sft_seed(tmp_path):
    """Seed N of the leaderboard recipe starts from seed N of its SFT run; the seed reaches
    every training and zero-shot command as --set seed=N, after the run's own settings."""
    result = snakemake("-n", "-p", "--cores", "2", "--config", "seeds=[3, 7]", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    boards = sorted(j["output"] for j in jobs if j["rule"] == "leaderboard")
    assert boards == [f"results/default/leaderboard/seed~{n}/done.json" for n in (3, 7)]
    for job in jobs:
        if job["rule"] == "leaderboard":
            seed = job["wildcards"].removeprefix("seed=")
            assert f"results/default/sft/default/seed~{seed}/done.json" in job["input"].split(", ")
    lines = [line.removeprefix("Shell command: ") for line in result.stdout.splitlines()]
    # Every run's seed folder N, of every family, trains (or evaluates) with --set seed=N.
    commands = [line for line in lines if re.match(r"rrl (eval|sft|ei|grpo) ", line)]
    assert {line.split()[1] for line in commands} == {"eval", "sft", "ei", "grpo"}
    for line in commands:
        seed = re.search(r"--out \S+/seed~(\d+) ", line).group(1)
        assert f" --set seed={seed} --out " in line, line
    # Zero-shot seed N samples its evaluation with seed N, as the trained runs' seed N do.
    zero = sorted(line for line in lines if line.startswith("rrl eval "))
    assert len(zero) == 2
    for seed, line in zip((3, 7), zero, strict=True):
        assert f"--set seed={seed} --out results/default/zero_shot/seed~{seed} >" in line
    lines = [line for line in lines if line.startswith("rrl grpo ")]
    board = [line for line in lines if "--out results/default/leaderboard/seed~7" in line]
    assert len(board) == 1
    assert "--set model_path=results/default/sft/default/seed~7/checkpoint" in board[0]
    assert board[0].endswith(
        "--set seed=7 --out results/default/leaderboard/seed~7 > results/default/logs/leaderboard/seed~7.log 2>&1"
    )
    runs = [line for line in lines if "--out results/default/grpo/lr~3e-4/seed~3" in line]
    assert len(runs) == 1 and "--set lr=3e-4 --set seed=3 --out" in runs[0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["seeds=[]"], "seeds"),
        (["seeds=[0, 0]"], "seeds"),
        (["seeds=[-1]"], "seeds"),
        (["threads_per_job=0"], "threads_per_job"),
        (["job_server=sometimes"], "job_server"),
        (["settings={grpo: {seed: 3}}"], "setting 'settings.grpo.seed': runs take"),
        (["settings={eval: {seed: 3}}"], "setting 'settings.eval.seed': runs take"),
        (
            ["leaderboard={settings: {seed: 1}}"],
            "setting 'leaderboard.settings.seed': runs take",
        ),
        (["leaderboard={sft_run: 'seed~1'}"], "setting 'leaderboard.sft_run': 'seed~1' names a"),
    ],
)
def test_bad_seed_settings_stop_the_plan(overrides, message, tmp_path):
    result = snakemake("-n", "--config", *overrides, cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout, result.stderr + result.stdout


def test_settings_given_with_config_are_read_as_set_reads_them(tmp_path):
    """`--config 'settings={...}'` hands nested values over as text: a number is passed on as
    a number, and a bad value is refused naming the setting, not a sweep table's row."""
    shipped_base_copy(tmp_path)
    given = ["--config", "settings={grpo: {n_grpo_steps: 40}}"]
    result = snakemake("-n", "-p", *given, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    lines = [line.removeprefix("Shell command: ") for line in result.stdout.splitlines()]
    grpo = [line for line in lines if line.startswith("rrl grpo ")]
    assert grpo and all("--set n_grpo_steps=40 " in line for line in grpo), grpo
    bad = snakemake("-n", "--config", "settings={grpo: {n_grpo_steps: abc}}", cwd=tmp_path)
    assert bad.returncode != 0
    text = bad.stderr + bad.stdout
    assert "then 'settings.grpo'): setting 'n_grpo_steps' must be an integer, got 'abc'" in text
    assert "grpo_lr.tsv" not in text, text


def test_a_seed_column_in_a_sweep_table_is_refused(tmp_path):
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    (sweeps / "grpo_lr.tsv").write_text("lr\tseed\n3e-5\t1\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"methods: workflow/config/methods/tiny.yaml\nsweeps: {sweeps}\nfamilies: [grpo_lr]\n"
    )
    result = snakemake("-n", "--configfile", str(config), cwd=tmp_path)
    assert result.returncode != 0
    assert f"{sweeps / 'grpo_lr.tsv'}: column 'seed'" in result.stderr + result.stdout


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
    assert grpo == [  # one seed (the schema's default seeds: [0])
        "results/default/grpo/default/seed~0/done.json",
        "results/default/grpo/loss_type~no_baseline/seed~0/done.json",
        "results/default/grpo/lr~3e-5/seed~0/done.json",
    ]
    # The variant's settings reach the command line as --set overrides.
    target = "results/default/grpo/lr~3e-5/seed~0/done.json"
    shell = snakemake(target, "-n", "-p", "--configfile", str(config), cwd=tmp_path)
    assert "--set lr=3e-5 --set seed=0" in shell.stdout
    assert f"--set model_path={tmp_path}" in shell.stdout


def test_a_changed_shipped_base_stops_the_plan_naming_the_file(tmp_path):
    folder = shipped_base_copy(tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")  # one byte changed
    result = snakemake("-n", "--cores", "2", cwd=tmp_path)
    assert result.returncode != 0
    text = result.stderr + result.stdout
    assert "setting 'model_path'" in text and "model.safetensors differs from its checksum" in text
    assert "SHA256SUMS, line" in text


def test_schema_rejects_unknown_settings_and_fills_defaults(tmp_path):
    bad = snakemake("-n", "--config", "learning_rate=1", cwd=tmp_path)
    assert bad.returncode != 0
    assert "learning_rate" in bad.stderr + bad.stdout
    config = tmp_path / "minimal.yaml"
    config.write_text("methods: workflow/config/methods/tiny.yaml\n")
    good = snakemake("-n", "--configfile", str(config), cwd=tmp_path)
    assert good.returncode == 0, good.stderr + good.stdout
    assert "results/default/base/done.json" in good.stdout  # results_dir, model_path: defaults


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


FAMILY_METHOD = {"sft": "sft", "ei": "ei", "dpo": "dpo"}  # every other table: a GRPO family
# Columns the workflow reads itself (common.smk, WORKFLOW_KEYS): where a DPO run starts.
WORKFLOW_COLUMNS = {"dpo": {"init"}}


@pytest.mark.parametrize(
    "config",
    [
        "config",
        "smoke",
        "gpu_math",
        "gpu_gsm8k",
        "gpu_countdown",
        "mismatch",
        "mismatch_vllm",
        "pg_family",
        "gpu_math_7b",
        "real_cpu",
    ],
)
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
        columns -= WORKFLOW_COLUMNS.get(method, set())
        assert columns <= known_settings(method), (table, columns - known_settings(method))
    recipe = set(cfg.get("leaderboard", {}).get("settings", {}))
    assert recipe <= known_settings("grpo"), recipe - known_settings("grpo")


@pytest.mark.parametrize("config", ["gpu_math", "gpu_gsm8k", "gpu_countdown"])
def test_every_gpu_training_job_uses_the_measured_micro_batch(config):
    """The GPU studies train at the micro batch chosen on the H200 (8 sequences, no gradient
    checkpointing; docs/gpu.md): the methods' batches, every sweep row that changes the
    train batch and the leaderboard recipe all divide into micro batches of 8, so no job of the
    study trains at a size nobody measured."""
    cfg = yaml.safe_load((ROOT / f"workflow/config/{config}.yaml").read_text())
    methods = yaml.safe_load((ROOT / cfg["methods"]).read_text())
    batches = [
        (f"{config} methods sft", methods["sft"]["batch_size"], methods["sft"]),
        (f"{config} methods ei", methods["ei"]["batch_size"], methods["ei"]),
        (f"{config} methods grpo", methods["grpo"]["train_batch_size"], methods["grpo"]),
    ]
    for table in sorted((ROOT / cfg["sweeps"]).glob("*.tsv")):
        with open(table, newline="", encoding="utf-8") as f:
            for number, row in enumerate(csv.DictReader(f, delimiter="\t"), start=2):
                if "train_batch_size" in row:
                    batches.append((f"{table.name}:{number}", int(row["train_batch_size"]), row))
    recipe = cfg.get("leaderboard", {}).get("settings")
    if recipe:
        batches.append((f"{config} leaderboard", recipe["train_batch_size"], recipe))
    assert len(batches) > 3  # the off-policy and clip sweeps change the train batch
    for where, batch, settings in batches:
        assert batch / int(settings["gradient_accumulation_steps"]) == 8, where
    for method in ("sft", "ei", "grpo"):
        assert methods[method]["gradient_checkpointing"] is False, (config, method)


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

    # The smoke configuration sets job_server: every training and evaluation job forked from
    # the one `rrl job-server`, which stopped with snakemake (its socket folder removed).
    log = (tmp_path / ".snakemake/log/rrl-job-server.log").read_text().splitlines()
    socket_path = Path(
        next(line for line in log if " serving at " in line).split(" serving at ")[1]
    )
    commands = [line.split(": rrl ", 1)[1].split()[0] for line in log if ": rrl " in line]
    assert "does not answer" not in result.stderr
    # one job for each folder with a done.json: the base, every run, the DPO pair jobs
    assert len(commands) == len(list(results.rglob("done.json"))), commands
    assert {"tiny-world", "eval", "sft", "ei", "grpo", "dpo"} <= set(commands), commands
    assert not socket_path.parent.exists()

    # Every planned run finished and left the run-folder files of docs/contract.md; every run in its seed
    # folder (smoke: seed 0 only), zero-shot included; the base model once.
    # The dpo_pairs jobs' folders hold sampled pairs, not runs (no metrics.jsonl).
    pair_jobs = [p.parent for p in (results / "dpo_pairs").rglob("done.json")]
    assert len(pair_jobs) == 2  # from the SFT checkpoint and from the base
    assert all((folder / "pairs" / "round_0.jsonl").is_file() for folder in pair_jobs)
    runs = [p.parent for p in results.rglob("done.json") if p.parent not in pair_jobs]
    assert len(runs) >= 15
    seeded = [run for run in runs if run.name == "seed~0"]
    trained = [run for run in seeded if run.parent.name != "zero_shot"]
    assert {run.name for run in runs} - {"seed~0"} == {"base"}
    assert results / "zero_shot" / "seed~0" in seeded
    assert yaml.safe_load((results / "zero_shot/seed~0/config.yaml").read_text())["seed"] == 0
    assert (results / "zero_shot/seeds.json").is_file()
    for run in runs:
        assert (run / "metrics.jsonl").is_file(), run
        done = json.loads((run / "done.json").read_text())
        if run.name != "base":
            assert (run / "config.yaml").is_file(), run
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for record in records:
            assert isinstance(record["step"], int), record
            assert record["split"] in {"train", "eval", "done"}, record
        if run in trained:  # a trainer's last line repeats done.json (committed, unlike it)
            assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == 0
            last = records[-1]
            assert last["split"] == "done" and last["step"] == done["step"]
            assert last["time/elapsed"] == done["wall_seconds"]
            facts = {k: v for k, v in last.items() if k not in ("step", "split", "time/elapsed")}
            assert facts == {k: done[k] for k in facts}
            # done.json alone also says the optimizer steps and, for the trainers that count
            # iterations in their own unit (no budget stops these runs), how many were done
            only_done = set(done) - set(facts)
            base_keys = {"method", "step", "wall_seconds", "optimizer_steps"}
            assert only_done in (base_keys, base_keys | {"iterations_done", "iterations_planned"})
            assert (run.parent / "seeds.json").is_file(), run

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
    assert len(plots) == 2 * 10 + 1 + 2 + 1 + 1
    for plot in plots:
        assert_png(plot)

    # summary.tsv: a row per seed and a mean row per run across seeds, one per single run;
    # The contract's columns plus one column per varied setting and the spread across seeds.
    with (results / "summary.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == len(runs) + len(seeded)
    assert sorted(r["seed"] for r in rows) == sorted([""] + ["0", "mean"] * len(seeded))
    columns = set(rows[0])
    assert {"experiment", "run", "eval_accuracy", "eval_format_reward", "eval_examples"} <= columns
    assert {"wall_seconds", "lr", "loss_type", "max_examples", "template"} <= columns
    assert {"n_seeds", "eval_accuracy_std", "eval_accuracy_ci95"} <= columns
    experiments = {r["experiment"] for r in rows}
    assert {"base", "zero_shot", "sft", "ei", "grpo", "leaderboard", "dpo"} <= experiments
    assert all(r["sampled_responses"] != "" for r in rows if r["experiment"] != "base")
    for row in rows:
        if row["experiment"] != "base":
            assert 0.0 <= float(row["eval_accuracy"]) <= 1.0, row
    # ablations.tsv: every ablation against its default, the leaderboard against GRPO, every
    # trained run against zero-shot; one seed gives no band (diff_ci95 and clear empty).
    with (results / "ablations.tsv").open() as f:
        ablations = list(csv.DictReader(f, delimiter="\t"))
    accuracy = {(r["run"], r["baseline"]): r for r in ablations if r["metric"] == "eval_accuracy"}
    assert ("grpo/lr~3e-4", "grpo/default") in accuracy
    assert ("leaderboard", "grpo/default") in accuracy and ("sft/default", "zero_shot") in accuracy
    assert ("dpo/init~base", "dpo/default") in accuracy and (
        "dpo/default",
        "ei/default",
    ) in accuracy
    row = accuracy[("sft/default", "zero_shot")]
    assert float(row["diff"]) == pytest.approx(float(row["run_mean"]) - float(row["baseline_mean"]))
    assert row["diff_ci95"] == row["clear"] == ""
    # Benchmarks of training rules; logs of every rule.
    assert (results / "job_times" / "grpo" / "default" / "seed~0.tsv").is_file()
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

    # A fresh clone has the committed files only (no done.json, checkpoints, generations):
    # `rrl summary` there rebuilds the workflow's summary.tsv byte for byte.
    clone = tmp_path / "clone"
    uncommitted = shutil.ignore_patterns("done.json", "checkpoint", "state", "generations")
    shutil.copytree(results, clone, ignore=uncommitted)
    assert not list(clone.rglob("done.json"))
    rrl = [sys.executable, "-m", "reasoning_core.runtime.cli"]
    rebuilt = subprocess.run(
        [*rrl, "summary", "--out", str(clone / "summary.tsv")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (clone / "summary.tsv").read_bytes() == (results / "summary.tsv").read_bytes()

    # A second seed of one run: only that seed trains; its seeds.json spans both.
    target = "results/smoke/sft/default/seeds.json"
    more = ("--configfile", str(config), "--config", "seeds=[0,1]")  # --config: last
    two = snakemake(target, "--cores", "2", *more, cwd=tmp_path, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert (results / "sft/default/seed~1/done.json").is_file()
    assert not (results / "sft/max_examples~128/seed~1").exists()
    spread = json.loads((results / "sft/default/seeds.json").read_text())
    assert spread["seeds"] == [0, 1]
    assert spread["eval_accuracy"]["std"] is not None and spread["eval_accuracy"]["ci95"] >= 0


@pytest.mark.parametrize(
    ("config", "sft_run"), [("config", "default"), ("gpu_math", "filter_correct~true")]
)
def test_dpo_family_plans_each_seed_from_the_same_sft_seed(config, sft_run, tmp_path):
    """The dpo family: its default run and each table row once per seed, seed N from the
    checkpoint of seed N of the leaderboard's SFT run (or from the base: init~base); rows
    equal to the defaults reuse the default run. Round 1's pairs come from a dpo_pairs job
    per start and seed, which every run with that start and seed reads."""
    args = ["-n", "-p", "--configfile", str(ROOT / f"workflow/config/{config}.yaml")]
    if config == "config":
        args += ["--config", "families=[sft,dpo]"]
    result = snakemake(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = [j for j in planned_jobs(result.stdout) if j["rule"] == "dpo"]
    seeds = yaml.safe_load((ROOT / f"workflow/config/{config}.yaml").read_text())["seeds"]
    sweeps = "workflow/config/sweeps/" + ("tiny" if config == "config" else "gpu")
    rows = (ROOT / sweeps / "dpo.tsv").read_text().splitlines()[1:]
    assert len(jobs) == len(rows) * len(seeds)  # the first row is the defaults: one run
    out = result.stdout.splitlines()
    commands = [line[line.index("rrl dpo ") :] for line in out if "rrl dpo " in line]
    results = f"results/{'gpu_math' if config != 'config' else 'default'}"
    from_base = [j for j in jobs if "/init~base/" in j["output"]]
    assert len(from_base) == (len(seeds) if config == "config" else 0)
    pair_jobs = [j for j in planned_jobs(result.stdout) if j["rule"] == "dpo_pairs"]
    assert len(pair_jobs) == len(seeds) * (2 if from_base else 1)
    for seed in seeds:
        start = f"--set model_path={results}/sft/{sft_run}/seed~{seed}/checkpoint "
        mine = [c for c in commands if f"--set seed={seed} " in c and "init~base" not in c]
        assert mine and all(start in c for c in mine), mine
        pairs = f"{results}/dpo_pairs/default/seed~{seed}"
        runs = [c for c in mine if "sample_only" not in c]
        assert runs and all(f"'first_round_pairs={pairs}'" in c for c in runs), runs
        assert [c for c in mine if "sample_only=true" in c and f"--out {pairs} " in c]
    for command in (c for c in commands if "init~base" in c):
        assert "--set model_path=workflow/resources/tiny_world " in command, command
    if config == "gpu_math":
        assert all(resources(j).get("gpu") == "1" for j in jobs)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        pytest.param(
            "lerning_rate\n3e-5\n",
            "grpo_lr.tsv: column 'lerning_rate' is no setting of rrl grpo",
            id="unknown-column",
        ),
        pytest.param(
            "lr\n3e-5\nabc\n",
            "grpo_lr.tsv: row 2 (line 3), column 'lr': setting 'lr' must be a number, got 'abc'",
            id="wrong-type",
        ),
        pytest.param(
            "lr\n3e-5\n1e-4\t2\n",
            "grpo_lr.tsv, line 3: 2 tab-separated cell(s) ['1e-4', '2'] where the header "
            "(line 1) has 1 column(s) ['lr']",
            id="extra-cell",
        ),
        pytest.param(
            "loss_type\tepochs_per_rollout_batch\ttrain_batch_size\ngrpo_clip\t2\t4\t9\n",
            "grpo_lr.tsv, line 2: 4 tab-separated cell(s) ['grpo_clip', '2', '4', '9'] where the "
            "header (line 1) has 3 column(s)",
            id="extra-cell-in-the-first-row",
        ),
        pytest.param(
            "loss_type\tepochs_per_rollout_batch\ttrain_batch_size\ngrpo_clip 2 4\n",
            "grpo_lr.tsv, line 2: 1 tab-separated cell(s) ['grpo_clip 2 4'] where the header "
            "(line 1) has 3 column(s)",
            id="row-separated-by-spaces",
        ),
        pytest.param(
            "loss_type\ngrpo_clip\ngrpo_clip 2\n",
            "grpo_lr.tsv, line 3, column 'loss_type': the cell 'grpo_clip 2' holds spaces",
            id="cell-with-spaces",
        ),
        pytest.param(
            "lr\tlr\n3e-5\t1e-4\n",
            "grpo_lr.tsv, line 1: a column is named twice in ['lr', 'lr']",
            id="column-twice",
        ),
    ],
)
def test_a_bad_sweep_table_stops_the_plan_naming_table_row_and_column(table, message, tmp_path):
    """What `rrl` would refuse when the job runs is refused by `snakemake -n` already."""
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    (sweeps / "grpo_lr.tsv").write_text(table)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"methods: workflow/config/methods/tiny.yaml\nsweeps: {sweeps}\nfamilies: [grpo_lr]\n"
    )
    result = snakemake("-n", "--configfile", str(config), cwd=tmp_path)
    assert result.returncode != 0
    text = result.stderr + result.stdout
    assert f"{sweeps}/{message}" in text, text


FAKE_RRL = """#!/bin/sh
# Stands in for rrl: writes the done.json of --out and nothing else.
while [ $# -gt 0 ]; do
  if [ "$1" = "--out" ]; then out="$2"; fi
  shift
done
mkdir -p "$out" && echo '{}' > "$out/done.json"
"""


def test_finished_jobs_rerun_for_their_own_settings_not_for_the_methods_files_bytes(tmp_path):
    """A comment or another command's section added to the methods file plans nothing; a
    change to the settings a finished job used plans that job (and what depends on it) again."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "rrl").write_text(FAKE_RRL)
    (fake / "rrl").chmod(0o755)
    methods = tmp_path / "methods.yaml"
    shutil.copy(ROOT / "workflow/config/methods/tiny.yaml", methods)
    config = tmp_path / "config.yaml"
    config.write_text(f"methods: {methods}\nmodel_path: null\n")
    targets = ["results/default/base/done.json", "results/default/zero_shot/seed~0/done.json"]
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}")

    def run(*args):
        return subprocess.run(
            [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path)]
            + ["--configfile", str(config), "--cores", "1", *targets, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    first = run()
    assert first.returncode == 0, first.stderr + first.stdout
    assert (tmp_path / "results/default/zero_shot/seed~0/done.json").is_file()

    text = methods.read_text()
    methods.write_text(
        "# a comment the jobs do not read\n"
        + text.replace("grpo:", "grpo:\n  max_grad_norm: 0.5", 1)
    )
    unchanged = run("-n")
    assert unchanged.returncode == 0, unchanged.stderr + unchanged.stdout
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr, unchanged.stdout

    methods.write_text(methods.read_text().replace("eval_max_tokens: 48", "eval_max_tokens: 40"))
    changed = run("-n")
    assert changed.returncode == 0, changed.stderr + changed.stdout
    planned = {job["rule"] for job in planned_jobs(changed.stdout)}
    assert planned == {"zero_shot"}, changed.stdout
