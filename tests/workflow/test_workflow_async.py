"""The asynchronous-GRPO study's plan: `snakemake -n` on workflow/config/async.yaml (the tiny
world, three seeds, its own results folder): every lag x correction and the losses at lag 4,
each with its settings on the command line, against the default run."""

from __future__ import annotations

import shutil

from project_root import ROOT
from snakemake_runs import planned_jobs, snakemake
from test_workflow_pg_family import SHIPPED_BASE, grpo_outputs, table_variants

CONFIG = ROOT / "workflow/config/async.yaml"
TABLE = ROOT / "workflow/config/sweeps/async/grpo_async.tsv"


def test_async_plans_every_lag_and_correction_with_three_seeds(tmp_path):
    shutil.copytree(ROOT / SHIPPED_BASE, tmp_path / SHIPPED_BASE)
    result = snakemake("-n", "--cores", "2", "--configfile", str(CONFIG), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    variants = table_variants(TABLE)
    # 5 lags x 4 corrections less the default run, and 4 losses at lag 4.
    assert len(variants) == len(set(variants)) == 5 * 4 - 1 + 4
    for lag in (1, 2, 4, 8):
        for correction in ("tis", "decoupled", "icepop"):
            assert f"offpolicy_correction~{correction}/rollout_lag~{lag}" in variants
        assert f"rollout_lag~{lag}" in variants
    for loss in ("gspo", "cispo", "sapo", "dapo"):
        assert any(f"loss_type~{loss}" in v and "rollout_lag~4" in v for v in variants), loss
    outputs = sorted(grpo_outputs(result.stdout))
    runs = sorted(f"results/async/grpo/{v}" for v in ["default", *variants])
    assert outputs == sorted(f"{run}/seed~{s}/done.json" for run in runs for s in (0, 1, 2))
    produced = {j.get("output") for j in planned_jobs(result.stdout)}
    assert "results/async/plots/grpo_async_accuracy.png" in produced
    planned = snakemake("-n", "-p", "--cores", "2", "--configfile", str(CONFIG), cwd=tmp_path)
    for setting in (
        "--set rollout_lag=8",
        "--set offpolicy_correction=icepop",
        "--set loss_type=dapo",
        "--set cliprange_high=0.28",
    ):
        assert setting in planned.stdout, setting
