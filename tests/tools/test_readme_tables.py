"""The results tables of README.md and docs/results.md are the committed study's: each
document is exactly what tools/readme_tables.py --write makes of it from results/."""

from __future__ import annotations

import pytest
from project_root import ROOT, load_script

tables = load_script("tools/readme_tables.py")


@pytest.mark.parametrize("document", tables.DOCUMENTS)
def test_documents_show_the_committed_results(document):
    text = (ROOT / document).read_text(encoding="utf-8")
    generated = tables.blocks(ROOT / "results" / "default")
    found = [m.group(2) for m in tables.BLOCK.finditer(text)]
    assert "runs" in found, f"{document} has no results:runs block"
    assert text == tables.render(text, generated), (
        f"{document} differs from results/: run python tools/readme_tables.py --write"
    )


def test_results_page_has_every_table_and_the_readme_the_run_table():
    on_page = {m.group(2) for m in tables.BLOCK.finditer((ROOT / "docs/results.md").read_text())}
    assert on_page == set(tables.blocks(ROOT / "results" / "default"))
    in_readme = [m.group(2) for m in tables.BLOCK.finditer((ROOT / "README.md").read_text())]
    assert in_readme == ["runs"]


def test_blocks_have_a_row_per_run_and_per_comparison():
    summary = tables.read_tsv(ROOT / "results/default/summary.tsv")
    ablations = tables.read_tsv(ROOT / "results/default/ablations.tsv")
    generated = tables.blocks(ROOT / "results" / "default")
    runs = {r["run"] for r in summary if r["run"] != "base"}
    assert len(generated["runs"]) == 2 + len(runs)
    against_baseline = sum(
        r["metric"] == "eval_accuracy" and r["baseline"] != "zero_shot" for r in ablations
    )
    assert len(generated["ablations"]) == 2 + against_baseline
    assert sum(line.startswith("- `") for line in generated["verdicts"]) == against_baseline
    assert generated["jobs"][-2].startswith("all ")


def test_render_replaces_only_the_blocks_bodies():
    text = "intro\n<!-- results:runs -->\nstale\n<!-- /results:runs -->\noutro 24.9%\n"
    assert tables.render(text, {"runs": ["| a |", "| b |"]}) == (
        "intro\n<!-- results:runs -->\n| a |\n| b |\n<!-- /results:runs -->\noutro 24.9%\n"
    )
    with pytest.raises(SystemExit, match="unknown results block 'nope'"):
        tables.render("<!-- results:nope -->\n<!-- /results:nope -->", {"runs": []})


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
