"""The planned GPU study of the free-running rollout worker (workflow/config/gpu_async.yaml):
every GRPO job holds a second GPU for the worker's engine (``worker_gpus_per_run``) and the
worker runs have it as ``worker_device``; the extra GPUs are refused where the learner would
run under torchrun."""

from __future__ import annotations

import yaml
from project_root import ROOT
from snakemake_runs import known_settings, planned_jobs, resources, snakemake

CONFIG = ROOT / "workflow/config/gpu_async.yaml"


def test_gpu_async_plans_worker_runs_on_a_second_gpu(tmp_path):
    result = snakemake("-n", "-p", "--configfile", str(CONFIG), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    training = [j for j in planned_jobs(result.stdout) if j["rule"] == "grpo"]
    assert len(training) == 4  # the synchronous run and three worker runs
    assert all(resources(j).get("gpu") == "2" for j in training)
    commands = [
        line.removeprefix("Shell command: ")
        for line in result.stdout.splitlines()
        if line.startswith("Shell command: rrl grpo ")
    ]
    workers = [c for c in commands if "--set rollout_worker=true" in c]
    assert len(workers) == 3
    assert all("--set worker_device=cuda:1" in c and "--set max_staleness=" in c for c in workers)
    assert all(c.startswith("rrl grpo ") for c in commands)  # one process, never torchrun
    cfg = yaml.safe_load(CONFIG.read_text())
    assert set(cfg["settings"]["grpo"]) <= known_settings("grpo")


def test_worker_gpus_are_refused_under_torchrun(tmp_path):
    result = snakemake(
        "-n", "--configfile", str(CONFIG), "--config", "gpus_per_run=2", cwd=tmp_path
    )
    assert result.returncode != 0
    assert "worker_gpus_per_run is 1" in result.stderr + result.stdout
