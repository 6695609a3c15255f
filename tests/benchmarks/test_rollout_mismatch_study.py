"""benchmarks/rollout_mismatch.py: the table docs/rollout_mismatch.md shows is the one the
script prints from the committed runs of results/mismatch."""

from __future__ import annotations

from project_root import ROOT, load_script


def test_the_pages_table_is_what_the_script_prints_from_the_committed_runs():
    script = load_script("benchmarks/rollout_mismatch.py")
    table = script.table(script.STUDIES)
    rows = table.splitlines()
    assert len(rows) == 2 + 5  # header, rule, three lag runs and two vLLM runs
    assert all("| 3 |" in row for row in rows[2:])  # three finished seeds each
    assert table in (ROOT / "docs/rollout_mismatch.md").read_text()


def test_a_seed_still_training_is_left_out(tmp_path):
    script = load_script("benchmarks/rollout_mismatch.py")
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 0, "split": "eval", "accuracy": 0.2}\n')
    assert not script.finished(metrics)
    metrics.write_text(metrics.read_text() + '{"step": 50, "split": "done"}\n')
    assert script.finished(metrics)
