"""rrl ablations: each ablation against its baseline, its difference and 95% Welch interval."""

import csv
import math

import pytest

from reasoning_core.runtime.report.ablations import (
    ablation_rows,
    comparisons,
    difference,
    main_ablations,
    read_seed_values,
)
from reasoning_core.runtime.report.seeds import mean_std_ci95

# t_{0.975, df} from a table (Student's t, two-sided 95%).
T975 = {2: 4.302652729749464, 3: 3.182446305284263, 4: 2.7764451051977934}


def test_welch_interval_against_a_hand_computation():
    run, base = [0.80, 0.82, 0.84], [0.70, 0.70, 0.73]
    va = ((0.80 - 0.82) ** 2 + 0 + (0.84 - 0.82) ** 2) / 2 / 3  # s_a^2 / n
    vb = ((0.70 - 0.71) ** 2 * 2 + (0.73 - 0.71) ** 2) / 2 / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    assert 3 < df < 4  # rounded down to 3
    d = difference(run, base)
    assert d["diff"] == pytest.approx(0.11)
    assert d["run_mean"] == pytest.approx(0.82) and d["baseline_mean"] == pytest.approx(0.71)
    assert d["diff_ci95"] == pytest.approx(T975[3] * math.sqrt(va + vb), rel=1e-9)


def test_equal_variances_and_sizes_give_the_pooled_degrees_of_freedom():
    # Same spread on both sides: Welch's df is 2(n-1) = 4 exactly.
    d = difference([1.0, 2.0, 3.0], [11.0, 12.0, 13.0])
    assert d["diff"] == pytest.approx(-10.0)
    assert d["diff_ci95"] == pytest.approx(T975[4] * math.sqrt(1 / 3 + 1 / 3), rel=1e-9)


def test_a_single_baseline_value_is_a_constant():
    # Against zero-shot (one evaluation) the interval is the run's own 95% interval.
    run = [0.61, 0.66, 0.70]
    d = difference(run, [0.23])
    assert d["diff_ci95"] == pytest.approx(mean_std_ci95(run)["ci95"], rel=1e-9)
    assert d["diff_ci95"] == pytest.approx(T975[2] * mean_std_ci95(run)["std"] / math.sqrt(3))


def test_no_band_with_one_seed_and_none_with_no_spread():
    assert difference([0.5], [0.4])["diff_ci95"] is None
    assert difference([0.5, 0.5], [0.4, 0.4])["diff_ci95"] == 0.0


def test_comparisons_pair_each_ablation_with_its_default():
    runs = [
        "base",
        "zero_shot",
        "sft/default",
        "sft/max_examples~128",
        "grpo/default",
        "grpo/lr~3e-4",
        "ei/group_size~4",  # no ei/default: no ablation pair
        "leaderboard",
    ]
    pairs = comparisons(runs)
    assert ("sft/max_examples~128", "sft/default") in pairs
    assert ("grpo/lr~3e-4", "grpo/default") in pairs
    assert ("leaderboard", "grpo/default") in pairs
    assert not [p for p in pairs if p[0] == "ei/group_size~4" and p[1] != "zero_shot"]
    vs_zero = [run for run, base in pairs if base == "zero_shot"]
    assert vs_zero == [r for r in runs if r not in ("base", "zero_shot")]
    # A default run is compared with zero-shot only.
    assert {base for run, base in pairs if run.endswith("/default")} == {"zero_shot"}


def test_dpo_is_compared_with_its_default_and_with_ei_and_grpo():
    runs = ["zero_shot", "sft/default", "ei/default", "grpo/default", "dpo/default"]
    runs += ["dpo/beta~0.5", "dpo/init~base"]
    pairs = comparisons(runs)
    assert ("dpo/beta~0.5", "dpo/default") in pairs and ("dpo/init~base", "dpo/default") in pairs
    assert ("dpo/default", "ei/default") in pairs and ("dpo/default", "grpo/default") in pairs
    assert ("dpo/default", "sft/default") in pairs  # against the checkpoint it starts from
    # DPO from the base against the methods that start there too.
    assert ("dpo/init~base", "ei/default") in pairs and ("dpo/init~base", "grpo/default") in pairs
    assert ("dpo/beta~0.5", "ei/default") not in pairs
    assert ("dpo/init~base", "sft/default") not in pairs
    # Without the other methods' runs, only the family's own and the zero-shot comparisons.
    alone = comparisons(["zero_shot", "dpo/default", "dpo/beta~0.5"])
    assert {base for _, base in alone} == {"dpo/default", "zero_shot"}


def write_summary(path, rows):
    columns = ["experiment", "run", "seed", "eval_accuracy", "eval_format_reward"]
    lines = ["\t".join(columns)] + ["\t".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


SUMMARY = [
    ("base", "base", "", "", ""),
    ("zero_shot", "zero_shot", "", 0.25, 0.35),
    ("sft", "sft/default", 0, 0.60, 0.99),
    ("sft", "sft/default", 1, 0.64, 1.0),
    ("sft", "sft/default", 2, 0.62, 0.98),
    ("sft", "sft/default", "mean", 0.62, 0.99),
    ("sft", "sft/filter_correct~true", 0, 0.88, 1.0),
    ("sft", "sft/filter_correct~true", 1, 0.90, 1.0),
    ("sft", "sft/filter_correct~true", 2, 0.89, 1.0),
    ("sft", "sft/filter_correct~true", "mean", 0.89, 1.0),
]


def test_summary_rows_to_ablations_tsv(tmp_path):
    summary, out = tmp_path / "summary.tsv", tmp_path / "ablations.tsv"
    write_summary(summary, SUMMARY)
    values = read_seed_values(summary)
    assert values["sft/default"]["eval_accuracy"] == [0.60, 0.64, 0.62]  # mean row skipped
    assert values["zero_shot"]["eval_accuracy"] == [0.25]
    assert values["base"]["eval_accuracy"] == []  # the base is never evaluated there

    assert main_ablations(["--summary", str(summary), "--out", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    acc = {(r["run"], r["baseline"]): r for r in rows if r["metric"] == "eval_accuracy"}
    assert set(acc) == {
        ("sft/filter_correct~true", "sft/default"),
        ("sft/default", "zero_shot"),
        ("sft/filter_correct~true", "zero_shot"),
    }
    row = acc[("sft/filter_correct~true", "sft/default")]
    assert float(row["diff"]) == pytest.approx(0.27, abs=1e-6)
    assert row["clear"] == "true"
    assert float(row["diff_low"]) == pytest.approx(float(row["diff"]) - float(row["diff_ci95"]))
    assert row["n_run"] == row["n_baseline"] == "3"
    # Format rewards of 1.0 on every seed against 0.99 +- 0.01: not clear of 0.
    fmt = [r for r in rows if r["metric"] == "eval_format_reward"]
    [same] = [
        r for r in fmt if r["run"] == "sft/filter_correct~true" and r["baseline"] != "zero_shot"
    ]
    assert same["clear"] == "false"
    assert ablation_rows(values) and len(rows) == len(ablation_rows(values))


def test_a_bad_cell_names_the_file_and_line(tmp_path, capsys):
    summary = tmp_path / "summary.tsv"
    write_summary(summary, [*SUMMARY[:3], ("sft", "sft/default", 1, "n/a", 1.0)])
    with pytest.raises(ValueError, match=r"summary.tsv line 5: eval_accuracy 'n/a'"):
        read_seed_values(summary)
    assert main_ablations(["--summary", str(summary), "--out", str(tmp_path / "a.tsv")]) == 2
    assert "line 5" in capsys.readouterr().err
    (tmp_path / "bad.tsv").write_text("run\tseed\n")
    with pytest.raises(ValueError, match="missing column"):
        read_seed_values(tmp_path / "bad.tsv")
