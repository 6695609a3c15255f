"""rrl robustness: a comparison is a conclusion only when it is clear, with the same sign, on
every base; the per-base rows are the ablations' Welch differences."""

import csv
from pathlib import Path

import pytest

from reasoning_core.runtime.report.ablations import difference
from reasoning_core.runtime.report.robustness import main_robustness, parse_base, robustness_rows

COLUMNS = ["experiment", "run", "seed", "eval_accuracy", "eval_format_reward"]


def write_summary(path, runs):
    """A summary.tsv with one row per seed (and a mean row, which the report skips)."""
    with path.open("w", newline="") as f:
        out = csv.writer(f, delimiter="\t")
        out.writerow(COLUMNS)
        for run, accuracies in runs.items():
            for seed, acc in enumerate(accuracies):
                out.writerow([run.split("/")[0], run, seed, acc, 0.9])
            out.writerow([run.split("/")[0], run, "mean", sum(accuracies) / 3, 0.9])
    return path


def test_a_conclusion_holds_only_when_clear_with_one_sign_on_every_base(tmp_path):
    one = write_summary(
        tmp_path / "one.tsv",
        {
            "zero_shot": [0.20, 0.21, 0.22],
            "grpo/default": [0.80, 0.81, 0.82],
            "ei/default": [0.90, 0.91, 0.92],  # above GRPO on this base
            "sft/default": [0.60, 0.62, 0.64],
        },
    )
    two = write_summary(
        tmp_path / "two.tsv",
        {
            "zero_shot": [0.24, 0.25, 0.26],
            "grpo/default": [0.85, 0.86, 0.87],
            "ei/default": [0.70, 0.71, 0.72],  # below GRPO on this one
            "sft/default": [0.61, 0.63, 0.65],
        },
    )
    rows = robustness_rows([("b0", one), ("b1", two)])
    per_base = {(r["metric"], r["run"], r["baseline"], r["base"]): r for r in rows}
    d = difference([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    row = per_base[("eval_accuracy", "ei/default", "grpo/default", "b0")]
    assert row["diff"] == pytest.approx(d["diff"]) and row["clear"] is True
    assert row["diff_ci95"] == pytest.approx(d["diff_ci95"])
    assert per_base[("eval_accuracy", "ei/default", "grpo/default", "b1")]["clear"] is True

    verdicts = {(r["metric"], r["run"], r["baseline"]): r for r in rows if r["base"] == "all"}
    # Every method beats zero-shot clearly on both bases: a conclusion.
    for run in ("grpo/default", "ei/default", "sft/default"):
        assert verdicts[("eval_accuracy", run, "zero_shot")]["holds"] is True
    # EI against GRPO is clear on each base but with opposite signs: it depends on the base.
    ei = verdicts[("eval_accuracy", "ei/default", "grpo/default")]
    assert ei["holds"] is False
    assert ei["diff"] == pytest.approx(min([0.10, -0.15], key=abs))
    # Identical format rewards: no difference, nothing holds.
    assert verdicts[("eval_format_reward", "sft/default", "zero_shot")]["holds"] is False
    assert ("eval_accuracy", "zero_shot", "zero_shot") not in verdicts
    assert ("eval_accuracy", "grpo/default", "grpo/default") not in verdicts


def test_a_run_missing_on_one_base_gets_no_verdict(tmp_path):
    one = write_summary(
        tmp_path / "a.tsv",
        {"zero_shot": [0.2, 0.21, 0.22], "grpo/default": [0.8, 0.81, 0.82], "x/default": [1, 1, 1]},
    )
    two = write_summary(
        tmp_path / "b.tsv", {"zero_shot": [0.2, 0.21, 0.22], "grpo/default": [0.8, 0.81, 0.82]}
    )
    rows = robustness_rows([("a", one), ("b", two)])
    assert [r["base"] for r in rows if r["run"] == "x/default"] == ["a", "a", "a", "a"]


def test_a_comparison_made_on_some_bases_holds_on_those_and_says_how_many(tmp_path):
    """A robustness base runs each method's default only; its ablations stay judged on the
    bases that ran them, and the row says on how many."""
    full = {
        "zero_shot": [0.2, 0.21, 0.22],
        "grpo/default": [0.8, 0.81, 0.82],
        "grpo/lr~3e-4": [0.9, 0.91, 0.92],
    }
    a = write_summary(tmp_path / "a.tsv", full)
    b = write_summary(tmp_path / "b.tsv", full)
    c = write_summary(tmp_path / "c.tsv", {k: v for k, v in full.items() if "lr" not in k})
    rows = robustness_rows([("a", a), ("b", b), ("c", c)])
    verdicts = {
        (r["run"], r["baseline"]): r
        for r in rows
        if r["base"] == "all" and r["metric"] == "eval_accuracy"
    }
    assert verdicts[("grpo/default", "zero_shot")]["n_bases"] == 3
    ablation = verdicts[("grpo/lr~3e-4", "grpo/default")]
    assert ablation["n_bases"] == 2 and ablation["holds"] is True
    assert ablation["n_run"] == 6


def test_command_writes_the_table_and_names_bad_arguments(tmp_path, capsys):
    runs = {"zero_shot": [0.2, 0.21, 0.22], "grpo/default": [0.8, 0.81, 0.82]}
    a = write_summary(tmp_path / "a.tsv", runs)
    b = write_summary(tmp_path / "b.tsv", runs)
    out = tmp_path / "robustness.tsv"
    assert main_robustness(["--base", f"a={a}", "--base", f"b={b}", "--out", str(out)]) == 0
    table = list(csv.DictReader(out.open(), delimiter="\t"))
    assert {r["base"] for r in table} == {"a", "b", "all"}
    # accuracy: clear on both; format reward: equal everywhere
    assert "1 of 2 comparisons made on 2 bases hold on all 2" in capsys.readouterr().err
    assert main_robustness(["--base", f"a={a}", "--out", str(out)]) == 2
    assert "at least two" in capsys.readouterr().err
    assert main_robustness(["--base", f"a={a}", "--base", f"a={b}", "--out", str(out)]) == 2
    assert "base names repeat" in capsys.readouterr().err


def test_base_arguments_are_named_or_take_their_folder_name():
    assert parse_base("base~1=results/robustness/base~1/summary.tsv") == (
        "base~1",
        Path("results/robustness/base~1/summary.tsv"),
    )
    assert parse_base("results/robustness/base~2/summary.tsv")[0] == "base~2"
    with pytest.raises(ValueError, match="NAME=path"):
        parse_base("=x.tsv")
