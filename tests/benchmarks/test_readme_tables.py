"""The README's results tables are the committed study's: every row benchmarks/readme_tables.py
prints from results/summary.tsv, results/ablations.tsv and results/benchmarks/ is a line of
README.md."""

from __future__ import annotations

from project_root import ROOT, load_script

tables = load_script("benchmarks/readme_tables.py")


def test_readme_shows_the_committed_results():
    readme = set((ROOT / "README.md").read_text().splitlines())
    summary = tables.read_tsv(ROOT / "results/summary.tsv")
    ablations = tables.read_tsv(ROOT / "results/ablations.tsv")
    rows = tables.runs_table(summary) + tables.ablations_table(ablations)
    runs = {r["run"] for r in summary if r["run"] != "base"}
    assert len(rows) == 4 + len(runs) + sum(
        r["metric"] == "eval_accuracy" and r["baseline"] != "zero_shot" for r in ablations
    )
    times = tables.family_times(ROOT / "results/benchmarks")
    assert times[-1].startswith("all ") and len(times) >= 6
    missing = [row for row in rows + times if row not in readme]
    assert not missing, "README.md lacks (rerun benchmarks/readme_tables.py):\n" + "\n".join(
        missing
    )


def test_flipped_verdicts_are_listed_by_metric_run_and_baseline():
    def row(run, diff, clear, baseline="grpo/default"):
        return {
            "metric": "eval_accuracy",
            "run": run,
            "baseline": baseline,
            "diff": str(diff),
            "clear": clear,
        }

    old = [row("grpo/a", 0.05, "true"), row("grpo/b", 0.01, "false"), row("grpo/c", 0.1, "true")]
    new = [row("grpo/a", 0.01, "false"), row("grpo/b", 0.02, "false"), row("grpo/d", 0.1, "")]
    assert tables.flipped(old, new) == [
        "1 of 2 verdicts flipped",
        "eval_accuracy grpo/a vs grpo/default: +5.0 (true) -> +1.0 (false)",
    ]
