"""``rrl tool-use``: the call rate at the end against the start of each tool run, and tool runs
against each other and against the runs without tool keys (the single-turn control: accuracy
only), with the Welch bands of ``rrl ablations``; a study without a tool run is a message."""

from __future__ import annotations

import csv
import json

import pytest

from reasoning_core.runtime.report.tool_use import main_tool_use, tool_use_rows


def write_run(folder, evals):
    """Seed folders whose ``eval`` lines are ``(call_rate, accuracy)`` per evaluation; a None
    call rate writes no tool key (a single-turn run)."""
    for seed, lines in enumerate(evals):
        path = folder / f"seed~{seed}"
        path.mkdir(parents=True)
        with (path / "metrics.jsonl").open("w") as f:
            for step, (rate, accuracy) in enumerate(lines):
                record = {"step": step * 10, "split": "eval", "accuracy": accuracy}
                if rate is not None:
                    record["tool/call_rate"] = rate
                f.write(json.dumps(record) + "\n")
                f.write(json.dumps({"step": step * 10 + 1, "split": "train", "loss": 1.0}) + "\n")


@pytest.fixture
def study(tmp_path):
    root = tmp_path / "results"
    write_run(root / "grpo/default", [[(None, 0.0), (None, 0.0)]] * 3)
    rising = [[(0.5, 0.1), (0.9, 0.5)], [(0.4, 0.1), (0.95, 0.6)], [(0.45, 0.1), (0.9, 0.55)]]
    write_run(root / "grpo/env~calculator", rising)
    flat = [[(0.5, 0.1), (0.5, 0.5)], [(0.4, 0.1), (0.6, 0.6)], [(0.45, 0.1), (0.4, 0.55)]]
    write_run(root / "grpo/env~calculator/tool_bonus~0.1", flat)
    return root


def test_rows_say_which_runs_keep_calling(study):
    runs = ["grpo/default", "grpo/env~calculator", "grpo/env~calculator/tool_bonus~0.1"]
    rows = tool_use_rows([(r, study / r) for r in runs])
    by = {(r["metric"], r["run"], r["baseline"]): r for r in rows}
    # two runs against their start and the control's accuracy, then one pair in two metrics
    assert len(rows) == 6
    pays = by[("eval_accuracy", runs[1], runs[0])]
    assert pays["run_mean"] == pytest.approx(0.55) and pays["baseline_mean"] == 0.0
    assert pays["clear"] is True and ("eval_tool_call_rate", runs[0], runs[1]) not in by
    rise = by[("eval_tool_call_rate", runs[1], f"{runs[1]}@start")]
    assert rise["run_mean"] == pytest.approx((0.9 + 0.95 + 0.9) / 3)
    assert rise["baseline_mean"] == pytest.approx(0.45) and rise["clear"] is True
    flat = by[("eval_tool_call_rate", runs[2], f"{runs[2]}@start")]
    assert flat["diff"] == pytest.approx(0.05) and flat["clear"] is False
    pair = by[("eval_tool_call_rate", runs[2], runs[1])]
    assert pair["diff"] == pytest.approx(0.5 - (0.9 + 0.95 + 0.9) / 3) and pair["clear"] is True
    accuracy = by[("eval_accuracy", runs[2], runs[1])]
    assert accuracy["diff"] == pytest.approx(0.0) and accuracy["clear"] is False


def test_command_writes_the_table_and_refuses_a_study_without_tools(study, tmp_path, capsys):
    out = tmp_path / "tool_use.tsv"
    runs = [str(study / "grpo/env~calculator"), str(study / "grpo/env~calculator/tool_bonus~0.1")]
    assert main_tool_use([*runs, "--root", str(study), "--out", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert {r["run"] for r in rows} == {"grpo/env~calculator", "grpo/env~calculator/tool_bonus~0.1"}
    # a control from another folder (another study's committed runs) keeps its path
    control = tmp_path / "elsewhere"
    write_run(control, [[(None, 0.2)]] * 2)
    assert main_tool_use([*runs, str(control), "--root", str(study), "--out", str(out)]) == 0
    with out.open() as f:
        baselines = {r["baseline"] for r in csv.DictReader(f, delimiter="\t")}
    assert str(control) in baselines
    assert main_tool_use([str(study / "grpo/default"), "--out", str(tmp_path / "x.tsv")]) == 2
    assert "has 'tool/call_rate'" in capsys.readouterr().err
    assert not (tmp_path / "x.tsv").exists()
