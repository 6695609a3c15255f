"""Training jobs over several GPUs and nodes: what the workflow plans (docs/gpu.md, "Several GPUs
and nodes"). The launches themselves are tested in tests/runtime (torchrun on CPU)."""

from __future__ import annotations

import yaml
from project_root import ROOT
from snakemake_runs import DEFAULT_CONFIG, planned_jobs, resources, snakemake

CONFIG_7B = str(ROOT / "workflow/config/gpu_math_7b.yaml")
TRAINING = {"grpo"}
ONE_PROCESS = {"zero_shot", "sft_data"}


def shell(job: dict[str, str]) -> str:
    return job["Shell command"]


def test_the_7b_study_runs_each_training_job_under_torchrun_on_8_gpus(tmp_path):
    result = snakemake("-n", "-p", "--configfile", CONFIG_7B, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    training = [j for j in jobs if j["rule"] in TRAINING]
    assert len(training) >= 17  # the default run, two ablations, the family's 15 rows
    for job in training:
        assert resources(job)["gpu"] == "8", job
        assert shell(job).startswith("torchrun --standalone --nproc-per-node 8 --no-python rrl ")
    evaluation = [j for j in jobs if j["rule"] == "zero_shot"]
    assert evaluation and all(resources(j)["gpu"] == "1" for j in evaluation)
    assert all(shell(j).startswith("rrl eval ") for j in evaluation)


def test_the_7b_methods_split_the_train_batch_into_micro_batches_of_4_per_gpu():
    """GRPO's train batch is global: 8 ranks x accumulation steps x a micro batch of 4
    sequences (the size tools/memory_estimate.py puts at about 48 GiB of an 80 GB card)."""
    cfg = yaml.safe_load(open(CONFIG_7B))
    methods = yaml.safe_load((ROOT / cfg["methods"]).read_text())
    ranks = cfg["gpus_per_run"] * cfg["nodes_per_run"]
    assert ranks == 8
    grpo = methods["grpo"]
    assert grpo["train_batch_size"] / (ranks * grpo["gradient_accumulation_steps"]) == 4
    assert grpo["gradient_checkpointing"] is True
    # sharded, and sampled the same on any number of ranks (which torchrun requires)
    assert grpo["sharding"] == "fsdp" and grpo["rollout_seeding"] == "group"
    assert grpo["oom_backoff"] is False
    # groups are never split over ranks: each rank samples whole groups
    assert (grpo["rollout_batch_size"] // grpo["group_size"]) % ranks == 0


def test_several_nodes_start_one_torchrun_per_node_through_srun(tmp_path):
    result = snakemake(
        "-n", "-p", "--configfile", CONFIG_7B, "--config", "nodes_per_run=2", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr + result.stdout
    training = [j for j in planned_jobs(result.stdout) if j["rule"] in TRAINING]
    assert training
    for job in training:
        declared = resources(job)
        assert declared["nodes"] == "2" and declared["tasks"] == "2", job
        assert declared["mpi"] == "srun" and declared["slurm_extra"] == "--gpus-per-node=8", job
        command = shell(job)
        assert command.startswith(
            "srun --nodes 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc-per-node 8 "
            "--rdzv-backend c10d --rdzv-endpoint "
        ), command
        assert '--rdzv-id "$SLURM_JOB_ID" --no-python rrl ' in command


def test_several_nodes_without_gpus_are_refused_naming_the_setting(tmp_path):
    result = snakemake(
        "-n", "--configfile", CONFIG_7B, "--config", "gpus_per_run=0", "nodes_per_run=2",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert "nodes_per_run is 2" in result.stderr + result.stdout


def test_runs_that_sample_under_torchrun_without_group_seeding_are_refused_when_planned(tmp_path):
    result = snakemake(
        "-n", "--configfile", str(ROOT / "workflow/config/gpu_math.yaml"),
        "--config", "gpus_per_run=4", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    text = result.stderr + result.stdout
    assert "needs rollout_seeding: group (it has 'batch')" in text
    assert "run ei/default" in text or "run grpo/" in text, text[-2000:]
    assert "workflow/config/methods/gpu_math.yaml" in text


def test_expert_iteration_trains_under_torchrun_on_several_gpus(tmp_path):
    group = {"rollout_seeding": "group"}
    seeding = tmp_path / "group_seeding.yaml"
    seeding.write_text(yaml.safe_dump({"settings": {m: group for m in ("ei", "grpo", "dpo")}}))
    result = snakemake(
        "-n", "-p", "--configfile", str(ROOT / "workflow/config/gpu_math.yaml"), str(seeding),
        "--config", "gpus_per_run=4", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    ei = [j for j in jobs if j["rule"] == "ei"]
    assert len(ei) >= 2  # the default run and the family's rows
    for job in ei:
        assert resources(job)["gpu"] == "4", job
        assert shell(job).startswith("torchrun --standalone --nproc-per-node 4 --no-python rrl ei ")


def test_the_supplements_instruction_sft_trains_under_torchrun_on_several_gpus(tmp_path):
    smoke = str(ROOT / "workflow/config/supplement_smoke.yaml")
    result = snakemake(
        "supplement", "-n", "-p", "--configfile", DEFAULT_CONFIG, smoke,
        "--config", "gpus_per_run=2", "families=[]", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    (job,) = [j for j in jobs if j["rule"] == "supplement_instruction_sft"]
    assert resources(job)["gpu"] == "2", job
    assert shell(job).startswith(
        "torchrun --standalone --nproc-per-node 2 --no-python rrl instruction-sft "
    )
    # its evaluations stay one process on one GPU
    evals = [j for j in jobs if j["rule"] == "supplement_eval"]
    assert evals and all(shell(j).startswith("rrl eval ") for j in evals)
