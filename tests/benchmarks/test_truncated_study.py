"""benchmarks/truncated_study.py on the committed study: at the study's own 50 GRPO steps it
gives back the study (every verdict, the job time); at fewer steps it reads each GRPO run's
evaluation after that many steps; a step that was not evaluated is refused, naming the file."""

from __future__ import annotations

import statistics

import pytest
from project_root import ROOT, load_script

truncated = load_script("benchmarks/truncated_study.py")
RESULTS = ROOT / "results" / "default"


def test_at_the_studys_own_length_nothing_changes():
    lines = truncated.report(RESULTS, 50, study_wall=3240.0)
    verdicts = len((RESULTS / "ablations.tsv").read_text().splitlines()) - 1  # less the header
    assert f"verdicts that differ from the full study's: 0 of {verdicts}" in lines
    before = truncated.job_seconds(RESULTS, None)
    after = truncated.job_seconds(RESULTS, 50)
    runs = {"grpo": 33, "leaderboard": 3}
    for family, value in before.items():
        # what is left after the last evaluation: the done line, logged just after it
        assert 0 <= value - after[family] <= runs.get(family, 0) * 1.0, family
    # the estimate differs from the study's wall time by half the seconds cut (two jobs at once)
    estimate = float(lines[-1].removeprefix("wall estimate ").split(" s")[0])
    cut = sum(before.values()) - sum(after.values())
    assert abs(estimate - 3240.0) <= cut / 2 + 0.5, lines[-1]


def test_fewer_steps_read_each_runs_evaluation_at_that_step():
    values = truncated.truncated_values(RESULTS, 30)
    full = truncated.read_seed_values(RESULTS / "summary.tsv")
    expected = []
    for seed in sorted((RESULTS / "grpo/default").glob("seed~*")):
        records = truncated.read_metrics(seed)
        [line] = [r for r in records if r["split"] == "eval" and r["step"] == 30]
        expected.append(line["accuracy"])
    assert len(expected) == 3
    assert values["grpo/default"]["eval_accuracy"] == expected
    # not a GRPO run: its final evaluation
    assert values["sft/default"]["eval_accuracy"] == full["sft/default"]["eval_accuracy"]
    assert statistics.mean(expected) < statistics.mean(full["grpo/default"]["eval_accuracy"])
    # job time falls by what the GRPO runs logged after step 30
    assert (
        truncated.job_seconds(RESULTS, 30)["grpo"]
        < 0.75 * truncated.job_seconds(RESULTS, None)["grpo"]
    )


def test_a_step_without_an_evaluation_is_refused(capsys):
    assert truncated.main(["--results", str(RESULTS), "--grpo-steps", "25"]) == 2
    err = capsys.readouterr().err
    assert "no evaluation after 25 GRPO steps" in err and "metrics.jsonl" in err
    assert "[0, 10, 20, 30, 40, 50]" in err


@pytest.mark.parametrize("steps", [20, 30])
def test_the_report_names_every_grpo_run(steps):
    lines = truncated.report(RESULTS, steps, study_wall=None)
    runs = {line.split()[0] for line in lines if "accuracy" in line and "±" in line}
    assert "grpo/default" in runs and "leaderboard" in runs and len(runs) == 12
    assert not any(line.startswith("wall estimate") for line in lines)
