"""tools/rerun_identical.py, the check a refactor is held to: a run retrained from its saved
config.yaml by the same code is reported identical; a changed metric (not a time/ key) is not."""

from __future__ import annotations

import json

import pytest
from micro_world import QUIET, SFT, build_world, run_trainer
from project_root import load_script

from reasoning_core.runtime.trainers import sft


def rewrite_line(path, index: int, **changes) -> None:
    lines = path.read_text().splitlines()
    record = json.loads(lines[index])
    lines[index] = json.dumps({**record, **changes})
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_a_rerun_is_identical_and_a_changed_metric_is_reported(tmp_path, capsys):
    world = build_world(tmp_path / "world")
    saved = tmp_path / "saved"
    run_trainer(sft, {**SFT, **QUIET}, world, saved)
    script = load_script("tools/rerun_identical.py")
    out = tmp_path / "rerun"
    assert script.main([str(saved), "--out", str(out)]) == 0
    report = capsys.readouterr().out
    rerun = out / saved.relative_to(saved.anchor) / "metrics.jsonl"
    n = len(rerun.read_text().splitlines())
    assert f"IDENTICAL {saved}: {n} lines equal apart from time/ keys" in report, report

    rewrite_line(rerun, 0, **{"time/train": 1e9})  # wall clock: never compared
    assert script.main([str(saved), "--out", str(out), "--compare-only"]) == 0
    capsys.readouterr()

    loss = json.loads(rerun.read_text().splitlines()[1])["loss"]
    rewrite_line(rerun, 1, loss=loss + 1e-6)
    assert script.main([str(saved), "--out", str(out), "--compare-only"]) == 1
    report = capsys.readouterr().out
    assert f"DIFFERENT {saved}: line 2: loss: {loss!r} -> {loss + 1e-6!r}" in report, report


def test_a_renamed_setting_is_passed_under_its_new_name(tmp_path):
    """A zero-shot run saved before rrl eval's settings took the trainers' names reruns with
    them renamed one to one (values unchanged); a config with nothing renamed is used as is."""
    script = load_script("tools/rerun_identical.py")
    run = tmp_path / "results" / "zero_shot" / "seed~0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("model_path: m\nsplit: test\nlimit: 512\nseed: 0\n")
    (run / "done.json").write_text('{"eval_accuracy": 0.25, "engine": "static"}')
    assert script.method_of(run) == "eval"
    path = script.renamed_config(run / "config.yaml", "eval", tmp_path)
    assert path != run / "config.yaml"
    assert path.read_text().splitlines() == [
        "model_path: m",
        "eval_split: test",
        "eval_examples: 512",
        "seed: 0",
    ]
    current = tmp_path / "current.yaml"
    current.write_text("model_path: m\neval_examples: 512\n")
    assert script.renamed_config(current, "eval", tmp_path) == current
    assert script.renamed_config(current, "grpo", tmp_path) == current


def test_ignored_keys_are_left_out_of_the_comparison(tmp_path):
    """--ignore leaves out a key a change adds (a new metric) as time/ keys are; another key
    that differs is still reported."""
    script = load_script("tools/rerun_identical.py")
    saved, rerun = tmp_path / "saved.jsonl", tmp_path / "rerun.jsonl"
    saved.write_text(json.dumps({"step": 1, "loss": 0.5, "time/train": 1.0}) + "\n")
    new = {"step": 1, "loss": 0.5, "time/train": 2.0, "rollout/logprob_diff_mean": 1e-7}
    rerun.write_text(json.dumps(new) + "\n")
    assert script.compare(saved, rerun, frozenset({"rollout/logprob_diff_mean"})) == []
    assert script.compare(saved, rerun) != []
    rerun.write_text(json.dumps({**new, "loss": 0.25}) + "\n")
    problems = script.compare(saved, rerun, frozenset({"rollout/logprob_diff_mean"}))
    assert problems == ["line 1: loss: 0.5 -> 0.25"]
