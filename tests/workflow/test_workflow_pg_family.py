"""The policy-gradient family's plans: `snakemake -n` on workflow/config/pg_family.yaml (the
tiny world, three seeds, its own results folder) and on the GPU configurations, which plan the
same family; the default study does not grow."""

from __future__ import annotations

import csv
import shutil

import pytest
from project_root import ROOT
from snakemake_runs import planned_jobs, resources, snakemake

SHIPPED_BASE = "workflow/resources/tiny_world"


def table_variants(path) -> list[str]:
    """Each row of a sweep table as its run folder: the non-empty cells, sorted by name."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return ["/".join(f"{k}~{v}" for k, v in sorted(row.items()) if v) for row in rows]


def grpo_outputs(stdout: str) -> list[str]:
    return [j["output"] for j in planned_jobs(stdout) if j["rule"] == "grpo"]


def test_pg_family_plans_every_variant_with_three_seeds_against_the_default(tmp_path):
    shutil.copytree(ROOT / SHIPPED_BASE, tmp_path / SHIPPED_BASE)
    config = ROOT / "workflow/config/pg_family.yaml"
    result = snakemake("-n", "--cores", "2", "--configfile", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    variants = table_variants(ROOT / "workflow/config/sweeps/pg_family/grpo_variants.tsv")
    assert len(variants) == len(set(variants)) >= 12
    outputs = grpo_outputs(result.stdout)
    expected = {
        f"results/pg_family/grpo/{v}/seed~{s}/done.json"
        for v in ["default", *variants]
        for s in (0, 1, 2)
    }
    assert set(outputs) == expected and len(outputs) == len(expected)
    jobs = planned_jobs(result.stdout)
    produced = {j.get("output") for j in jobs}
    assert {"results/pg_family/summary.tsv", "results/pg_family/ablations.tsv"} <= produced
    assert "results/pg_family/plots/grpo_variants_accuracy.png" in produced
    assert "results/pg_family/plots/grpo_variants_training.png" in produced
    # Every variant's settings reach its command.
    planned = snakemake(
        "-n", "-p", "--cores", "2", "--configfile", str(config), cwd=tmp_path
    ).stdout
    for setting in ("--set reward_control=random", "--set kl_coef=0.04", "--set loss_type=gspo"):
        assert setting in planned, setting


def test_the_default_study_plans_no_variant(tmp_path):
    shutil.copytree(ROOT / SHIPPED_BASE, tmp_path / SHIPPED_BASE)
    result = snakemake("-n", "--cores", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    outputs = grpo_outputs(result.stdout)
    assert outputs and not [o for o in outputs if "reward_control" in o or "kl_coef" in o]


@pytest.mark.parametrize("config", ["gpu_math", "gpu_gsm8k", "gpu_countdown"])
def test_gpu_configurations_plan_the_family_on_a_gpu(config, tmp_path):
    result = snakemake(
        "-n", "--configfile", str(ROOT / f"workflow/config/{config}.yaml"), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr + result.stdout
    variants = table_variants(ROOT / "workflow/config/sweeps/gpu/grpo_variants.tsv")
    assert "overlong~mask" in variants
    results = f"results/{config}"
    jobs = {j["output"]: j for j in planned_jobs(result.stdout) if j["rule"] == "grpo"}
    for variant in variants:
        job = jobs[f"{results}/grpo/{variant}/seed~0/done.json"]
        assert resources(job).get("gpu") == "1", job
    assert f"{results}/plots/grpo_variants_accuracy.png" in {
        j.get("output") for j in planned_jobs(result.stdout)
    }
