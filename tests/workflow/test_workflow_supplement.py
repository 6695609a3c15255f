"""The supplement's workflow: the jobs `snakemake -n` plans, the default plan without it, and
the whole chain end to end at toy size on a CPU (a tiny random Llama with the real Llama 3
tokenizer, a few examples of each data set, HH pairs in HH's format)."""

from __future__ import annotations

import csv
import json
from collections import Counter

from project_root import ROOT
from snakemake_runs import DEFAULT_CONFIG, planned_jobs, snakemake
from tiny_llama import instruction_pairs, save_tiny_llama, write_hh, write_jsonl

SMOKE = str(ROOT / "workflow/config/supplement_smoke.yaml")
STAGES, EVALS = ("base", "sft", "dpo"), ("mmlu", "gsm8k", "alpaca_eval", "sst", "sst_judge")


def test_dry_run_plans_the_chain(tmp_path):
    run = snakemake("--configfile", DEFAULT_CONFIG, SMOKE, "-n", "supplement", cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    jobs = planned_jobs(run.stdout)
    counts = Counter(job["rule"] for job in jobs)
    assert counts == {
        "supplement_eval": 6, "supplement_generate": 6, "supplement_judge": 3,
        "supplement_instruction_sft": 1, "supplement_dpo": 1, "supplement_summary": 1,
        "supplement": 1,
    }  # fmt: skip
    outputs = {job["output"] for job in jobs if "output" in job}
    for stage in STAGES:
        for ev in EVALS:
            assert f"results/supplement_smoke/{stage}/{ev}/done.json" in outputs
    dpo = next(job for job in jobs if job["rule"] == "supplement_dpo")
    assert "results/supplement_smoke/train/sft/done.json" in dpo["input"]


def test_default_plan_has_no_supplement_job(tmp_path):
    run = snakemake("-n", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert not [j for j in planned_jobs(run.stdout) if j["rule"].startswith("supplement")]


def test_a_missing_path_is_named(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("supplement: {model_path: m, judge_path: j, sft_train_data: d}\n")
    run = snakemake("--configfile", DEFAULT_CONFIG, str(config), "-n", "supplement", cwd=tmp_path)
    assert run.returncode != 0 and "supplement.hh_dir" in run.stdout + run.stderr


def write_inputs(root):
    base = root / "supplement_smoke"
    save_tiny_llama(base / "model")
    write_jsonl(base / "sft_train.jsonl", instruction_pairs(12))
    write_jsonl(base / "sft_val.jsonl", instruction_pairs(4, offset=100))
    write_hh(base / "hh", per_file=3)


def test_smoke_chain_runs_end_to_end(tmp_path):
    write_inputs(tmp_path)
    run = snakemake(
        "--configfile", DEFAULT_CONFIG, SMOKE, "--cores", "1", "supplement",
        cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = tmp_path / "results/supplement_smoke"
    for stage in STAGES:
        mmlu = json.loads((out / stage / "mmlu/summary.json").read_text())
        assert mmlu["metrics"]["num_examples"] == 3 and "task_report" in mmlu
        alpaca = json.loads((out / stage / "alpaca_eval/alpaca_eval.json").read_text())
        assert len(alpaca) == 3
        assert set(alpaca[0]) >= {"instruction", "output", "generator", "dataset"}
        sst = (out / stage / "sst/simple_safety_tests.jsonl").read_text().splitlines()
        assert len(sst) == 3 and set(json.loads(sst[0])) >= {"prompts_final", "output"}
        judge = json.loads((out / stage / "sst_judge/summary.json").read_text())
        assert judge["n"] == 3 == judge["safe"] + judge["unsafe"] + judge["unanswered"]
    sft = json.loads((out / "train/sft/done.json").read_text())
    assert sft["method"] == "instruction-sft" and sft["step"] >= 1 and "val/loss" in sft
    assert (out / "train/sft/checkpoint/tokenizer.json").is_file()
    dpo = json.loads((out / "train/dpo/done.json").read_text())
    assert dpo["method"] == "dpo" and (out / "train/dpo/best_checkpoint/config.json").is_file()
    rows = list(csv.DictReader((out / "summary.tsv").open(), delimiter="\t"))
    assert len(rows) == len(STAGES) * len(EVALS)
