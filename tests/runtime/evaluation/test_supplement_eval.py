"""`rrl eval` runs the supplement's tasks with the handout's decoding (docs/supplement.md)."""

from __future__ import annotations

import json

import pytest
from tiny_model import save_tiny_model

import envs
from reasoning_core.runtime.evaluation import evaluate


@pytest.mark.parametrize("task", ["mmlu", "gsm8k_supplement"])
def test_rrl_eval_on_a_supplement_task_with_greedy_decoding_and_the_query_stop(tmp_path, task):
    model_dir = save_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    argv = [
        "--set", f"model_path={model_dir}", "--set", f"task={task}", "--set", "eval_split=test",
        "--set", "template=zero_shot_system_prompt", "--set", "eval_examples=2", "--set", "engine=hf",
        "--set", "eval_temperature=0", "--set", 'stop=["# Query:"]',
        "--set", "include_stop_str_in_output=false", "--set", "eval_max_tokens=4",
        "--set", "entropy=false", "--out", str(out),
    ]  # fmt: skip
    assert evaluate.main(argv) == 0
    records = [
        json.loads(x) for x in (out / "generations/step_000000.jsonl").read_text().splitlines()
    ]
    examples = envs.get_task(task).load("test", limit=2)
    fmt = envs.get_task(task).format_prompt
    assert [r["prompt"] for r in records] == [fmt(ex) for ex in examples]
    assert [r["ground_truth"] for r in records] == [ex.ground_truth for ex in examples]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["num_examples"] == 2 and summary["metrics"]["time/generate"] > 0
    if task == "mmlu":  # both first test questions are abstract algebra
        report = summary["task_report"]
        assert report["n"] == 2 and set(report["per_subject"]) == {"abstract_algebra"}
        assert report["per_subject"]["abstract_algebra"]["n"] == 2
    else:
        assert "task_report" not in summary
