"""tools/compare_studies.py: a study compared with itself agrees everywhere; a rerun whose
run mean moved past its band, or whose verdict changed, is counted and named."""

from __future__ import annotations

import csv
import shutil

from project_root import ROOT, load_script

compare_studies = load_script("tools/compare_studies.py")
RESULTS = ROOT / "results" / "default"


def test_the_committed_study_agrees_with_itself():
    result = compare_studies.compare(RESULTS, RESULTS)
    lines = compare_studies.report(result)
    n = len(result["bands"])
    assert n >= 20 and f"run means outside the larger of the two 95% half-widths: 0 of {n}" in lines
    assert f"verdicts that differ: 0 of {result['verdicts']}" in lines and result["verdicts"] >= 80


def edit_tsv(path, change):
    with path.open(newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        fields, rows = reader.fieldnames, list(reader)
    for row in rows:
        change(row)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def test_a_moved_mean_and_a_flipped_verdict_are_named(tmp_path):
    other = tmp_path / "results"
    other.mkdir()
    for name in ("summary.tsv", "ablations.tsv"):
        shutil.copy(RESULTS / name, other / name)

    def move_grpo_default(row):
        if row["run"] == "grpo/default" and row["seed"] == "mean":
            row["eval_accuracy"] = str(float(row["eval_accuracy"]) + 0.5)

    def flip_one(row):
        if (row["metric"], row["run"], row["baseline"]) == (
            "eval_accuracy",
            "grpo/lr~3e-4",
            "grpo/default",
        ):
            row["clear"] = "false" if row["clear"] == "true" else "true"

    edit_tsv(other / "summary.tsv", move_grpo_default)
    edit_tsv(other / "ablations.tsv", flip_one)
    result = compare_studies.compare(RESULTS, other, ["grpo"])
    assert [r["run"] for r in result["bands"] if not r["within"]] == ["grpo/default"]
    assert all(r["run"] == "zero_shot" or r["run"].startswith("grpo/") for r in result["bands"])
    assert [f["key"] for f in result["flips"]] == [
        ("eval_accuracy", "grpo/lr~3e-4", "grpo/default")
    ]
    assert "verdicts that differ: 1 of" in "\n".join(compare_studies.report(result))
