"""The prepared GPU study (tools/gpu/gpu_study.py) must not rot: its reduced configuration
plans one job per family with a GPU each, every setting it passes names a real trainer setting,
the `rrl` wrapper records exit status and time, and the wheel list is computable. The whole
script runs end to end with ``--tiny`` (about 10 minutes on the 2-core machine), by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml
from project_root import ROOT, load_script
from snakemake_runs import known_settings, planned_jobs, resources, snakemake


def _load_gpu_study():
    """tools/gpu/gpu_study.py as the module ``gpu_study`` (a script, not a package module)."""
    return load_script("tools/gpu/gpu_study.py")


gpu_study = _load_gpu_study()


def test_reduced_config_plans_every_family_once_on_a_gpu(tmp_path):
    result = snakemake("-n", "--configfile", str(gpu_study.REDUCED), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    runs = sorted(j["output"] for j in jobs if j["rule"] in gpu_study.TRAINING_RULES)
    prefix = "results/gpu_math_reduced/"
    # Every run in the folder of the GPU study's one seed (`seeds: [0]`), zero-shot too.
    assert runs == [
        prefix + r + "/seed~0/done.json"
        for r in (
            "ei/default",
            "grpo/default",
            "grpo/epochs_per_rollout_batch~2/gradient_accumulation_steps~1/loss_type~grpo_clip"
            "/n_grpo_steps~1/train_batch_size~8",
            "leaderboard",
            "sft/default",
            "sft/filter_correct~true",
            "zero_shot",
        )
    ]
    training = [j for j in jobs if j["rule"] in gpu_study.TRAINING_RULES]
    assert all(resources(j).get("gpu") == "1" for j in training)
    assert [j for j in jobs if j["rule"] == "sft_data"]


def test_every_setting_the_study_passes_is_a_real_setting():
    cfg = yaml.safe_load(gpu_study.REDUCED.read_text())
    for overrides in (cfg["settings"], gpu_study.TINY_OVERRIDES["settings"]):
        for command, settings in overrides.items():
            assert set(settings) <= known_settings(command), (command, settings)
    assert set(cfg["leaderboard"]["settings"]) <= known_settings("grpo")
    assert set(gpu_study.FULL_STEP) <= known_settings("grpo")
    assert set(gpu_study.TINY_FULL_STEP) <= known_settings("grpo")
    # The full step is the handout's: 256 rollouts = 32 questions x 8, 1,024 tokens, train
    # batch 256; its micro batch and checkpointing are the methods file's (micro batch 8).
    full = gpu_study.FULL_STEP
    assert (full["rollout_batch_size"], full["group_size"], full["sampling_max_tokens"]) == (
        256,
        8,
        1024,
    )
    assert not {"gradient_accumulation_steps", "gradient_checkpointing"} & set(full)
    grpo = yaml.safe_load(gpu_study.METHODS.read_text())["grpo"]
    assert full["train_batch_size"] // grpo["gradient_accumulation_steps"] == 8
    assert grpo["gradient_checkpointing"] is False


def test_rrl_wrapper_records_status_and_time(tmp_path):
    stats = tmp_path / "stats.jsonl"
    env = {**os.environ, "RRL_JOB_STATS": str(stats), "PYTHONPATH": str(ROOT)}
    shim = [sys.executable, str(ROOT / "tools/gpu/gpu_study_rrl.py")]
    ok = subprocess.run([*shim, "--help"], env=env, capture_output=True, text=True)
    bad = subprocess.run(
        [*shim, "sft", "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True
    )
    assert (ok.returncode, bad.returncode) == (0, 2), bad.stderr
    first, second = [json.loads(line) for line in stats.read_text().splitlines()]
    assert first["rc"] == 0 and first["out"] is None
    assert second["rc"] == 2 and second["out"] == str(tmp_path / "run")
    assert second["wall_seconds"] >= 0 and second["cuda_peak_allocated_gib"] is None


def test_wheel_list_covers_what_the_device_lacks():
    closure = gpu_study.requirement_closure()
    device = gpu_study.device_packages()
    assert {"torch", "transformers", "pyyaml", "sympy"} <= device
    assert {"snakemake", "math-verify", "latex2sympy2-extended", "jsonschema"} <= set(closure)
    bring = set(closure) - device
    assert "snakemake" in bring and "sympy" not in bring


def _offline_session(tmp_path, *args, **env):
    """tools/gpu/gpu_offline_session.sh with PYTHON a stub that logs the scripts it is asked
    to run (and sleeps ``STUB_SLEEP`` seconds when it is rollout_gpu.py) instead of
    running anything. Other calls (gpu_study.sh's ``-m pip install`` of the wheels, made when
    ``.gpu_study/`` has been prepared in this checkout) succeed and are not logged."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    calls = tmp_path / "calls.txt"
    stub = tmp_path / "python"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'case "$1" in benchmarks/*|tools/*) echo "$*" >> {calls} ;; esac\n'
        'case "$1" in *rollout_gpu.py) sleep "${STUB_SLEEP:-0}" ;; esac\n'
    )
    stub.chmod(0o755)
    env = {**os.environ, "PYTHON": str(stub), **env}
    env.pop("OUT", None)
    script = str(ROOT / "tools/gpu/gpu_offline_session.sh")
    result = subprocess.run(["bash", script, *args], env=env, capture_output=True, text=True)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return result, lines


def test_offline_session_runs_the_rollout_benchmark_then_the_study_within_its_budget(tmp_path):
    """One call on the GPU machine: rollout_gpu.py first, then gpu_study.sh with what is left
    of TOTAL_SECONDS; a rollout benchmark past ROLLOUT_SECONDS is stopped, the study still runs."""
    out = tmp_path / "out"
    result, calls = _offline_session(tmp_path, "--tiny", "--out", str(out), TOTAL_SECONDS="500")
    assert result.returncode == 0, result.stderr + result.stdout
    rollout, study = calls
    assert rollout == f"benchmarks/rollout_gpu.py --out {out} --tiny"
    assert study.startswith(f"tools/gpu/gpu_study.py run --tiny --out {out} --budget-seconds ")
    assert 495 <= int(study.split()[-1]) <= 500

    env = {"TOTAL_SECONDS": "500", "ROLLOUT_SECONDS": "1", "STUB_SLEEP": "5"}
    result, calls = _offline_session(tmp_path / "slow", "--out", str(out), **env)
    assert result.returncode == 1  # the benchmark was stopped: the script says it failed
    assert "stopped at 1 s" in result.stdout
    assert calls[0] == f"benchmarks/rollout_gpu.py --out {out}"
    assert 495 <= int(calls[1].split()[-1]) <= 499


def test_offline_session_needs_an_output_folder_and_known_arguments(tmp_path):
    result, calls = _offline_session(tmp_path)
    assert result.returncode == 2 and "set OUT or pass --out" in result.stderr and not calls
    result, calls = _offline_session(tmp_path, "--fast")
    assert result.returncode == 2 and "unknown argument '--fast'" in result.stderr and not calls
