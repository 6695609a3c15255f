"""Runs across seeds: the t quantile, mean/std/95% interval, seeds.json (``rrl seeds``), the
summary's rows per seed and per run, and the summary rebuilt from the committed files alone
(no done.json, no checkpoints). Synthetic run folders, no training."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from reasoning_core.runtime.cli import main as rrl
from reasoning_core.runtime.report.bands import t_quantile
from reasoning_core.runtime.report.runs import seed_runs
from reasoning_core.runtime.report.seeds import mean_std_ci95, seed_summary

# Two-sided 95% Student-t critical values t_{0.975, df} (any statistics table).
T_975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451, 9: 2.2621572, 30: 2.0422725}


@pytest.mark.parametrize(("df", "want"), sorted(T_975.items()))
def test_t_quantile_matches_the_tables(df, want):
    assert t_quantile(df) == pytest.approx(want, abs=5e-7)


def test_t_quantile_tends_to_the_normal_quantile_and_rejects_bad_arguments():
    # Cornish-Fisher: t = z + (z^3 + z) / (4 df) + O(df^-2), z = 1.959964 (the normal's).
    z = 1.959964
    assert t_quantile(10_000) == pytest.approx(z + (z**3 + z) / 40_000, abs=1e-6)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)
    with pytest.raises(ValueError, match="confidence must lie"):
        t_quantile(3, confidence=1.5)


def test_mean_std_ci95_by_hand():
    """[0.7, 0.8, 0.9]: mean 0.8, sample std sqrt((0.01 + 0 + 0.01) / 2) = 0.1, half-width
    t_{0.975, 2} * 0.1 / sqrt(3)."""
    stats = mean_std_ci95([0.7, 0.8, 0.9])
    assert stats["mean"] == pytest.approx(0.8)
    assert stats["std"] == pytest.approx(0.1)
    assert stats["ci95"] == pytest.approx(T_975[2] * 0.1 / math.sqrt(3))
    assert mean_std_ci95([0.5]) == {"mean": 0.5, "std": None, "ci95": None}
    assert mean_std_ci95([]) == {"mean": None, "std": None, "ci95": None}
    assert mean_std_ci95([0.25] * 4) == {"mean": 0.25, "std": 0.0, "ci95": 0.0}


def make_seed(folder: Path, *, seed: int, acc: float, fmt: float, wall: float, **done) -> Path:
    """One seed folder as a trainer leaves it: config.yaml, metrics.jsonl ending in the `done`
    line, done.json (local only), a checkpoint (never committed)."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "lr": 1e-4}))
    lines = [
        {"step": 0, "split": "eval", "accuracy": 0.1, "format_reward": 0.2, "num_examples": 8},
        {"step": 1, "split": "train", "loss": 1.0, "time/elapsed": wall - 2},
        {"step": 1, "split": "eval", "accuracy": acc, "format_reward": fmt, "num_examples": 8},
        {"step": 1, "split": "done", "stopped_on_budget": False, **done, "time/elapsed": wall},
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    facts = {"eval_accuracy": acc, "wall_seconds": wall, **done}
    (folder / "done.json").write_text(json.dumps(facts))
    (folder / "checkpoint").mkdir()
    (folder / "checkpoint" / "model.safetensors").write_bytes(b"weights")
    return folder


def make_study(results: Path) -> None:
    base = results / "base"
    base.mkdir(parents=True)
    (base / "metrics.jsonl").write_text('{"step": 10, "split": "train", "time/elapsed": 4.5}\n')
    (base / "done.json").write_text('{"wall_seconds": 5.0}')
    zero = results / "zero_shot"
    zero.mkdir()
    line = {"step": 0, "split": "eval", "accuracy": 0.25, "format_reward": 0.5, "num_examples": 8}
    (zero / "metrics.jsonl").write_text(json.dumps({**line, "time/elapsed": 1.5}) + "\n")
    (zero / "done.json").write_text("{}")
    for seed, acc in ((0, 0.5), (1, 0.75), (2, 0.625)):
        make_seed(results / "grpo/lr~3e-4" / f"seed~{seed}", seed=seed, acc=acc, fmt=1.0, wall=10)
        make_seed(results / "grpo/default" / f"seed~{seed}", seed=seed, acc=0.5, fmt=0.75, wall=9)
    for seed, kept in ((0, 6), (1, 6)):
        make_seed(
            results / "sft/filter_correct~true" / f"seed~{seed}",
            seed=seed,
            acc=0.25 * (seed + 1),
            fmt=1.0,
            wall=20 + seed,
            pool_examples=8,
            filtered_examples=kept,
            train_examples=kept,
        )
    (results / "grpo/default/seeds.json").write_text("{}")  # a file beside the seed folders


def read_tsv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_seed_runs_and_seeds_json(tmp_path, capsys):
    make_study(tmp_path)
    run = tmp_path / "grpo/lr~3e-4"
    (run / "seed~01").mkdir()  # not a seed folder name: left out
    assert [s for s, _ in seed_runs(run)] == [0, 1, 2]
    assert seed_runs(tmp_path / "zero_shot") == []
    out = run / "seeds.json"
    assert rrl(["seeds", "--run", str(run), "--out", str(out)]) == 0
    assert "accuracy 0.6250 +- " in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["seeds"] == [0, 1, 2]
    acc = data["eval_accuracy"]
    assert acc["per_seed"] == [0.5, 0.75, 0.625]
    assert acc["mean"] == pytest.approx(0.625) and acc["std"] == pytest.approx(0.125)
    assert acc["ci95"] == pytest.approx(T_975[2] * 0.125 / math.sqrt(3))
    assert data["eval_format_reward"] == {
        "per_seed": [1.0, 1.0, 1.0],
        "mean": 1.0,
        "std": 0.0,
        "ci95": 0.0,
    }
    # The study's seeds only: a folder of a seed it no longer runs is left out.
    assert seed_summary(run, [2, 0])["seeds"] == [0, 2]
    with pytest.raises(ValueError, match=r"lr~3e-4: no folder for seed 5 \(seed~5\)"):
        seed_summary(run, [0, 5])
    assert rrl(["seeds", "--run", str(tmp_path / "zero_shot"), "--out", str(out)]) == 2
    assert "zero_shot: no seed~<N> folders" in capsys.readouterr().err


def test_summary_has_a_row_per_seed_and_a_mean_row_per_run(tmp_path):
    results = tmp_path / "results"
    make_study(results)
    out = results / "summary.tsv"
    assert rrl(["summary", "--out", str(out)]) == 0
    header = out.read_text().splitlines()[0].split("\t")
    assert header == [
        "experiment",
        "run",
        "seed",
        "filter_correct",
        "lr",
        "eval_accuracy",
        "eval_format_reward",
        "eval_examples",
        "wall_seconds",
        "sampled_responses",
        "pool_examples",
        "kept_examples",
        "train_examples",
        "n_seeds",
        "eval_accuracy_std",
        "eval_accuracy_ci95",
        "eval_format_reward_std",
        "eval_format_reward_ci95",
    ]
    rows = read_tsv(out)
    assert [(r["run"], r["seed"]) for r in rows] == [
        ("base", ""),
        ("zero_shot", ""),
        ("sft/filter_correct~true", "0"),
        ("sft/filter_correct~true", "1"),
        ("sft/filter_correct~true", "mean"),
        ("grpo/default", "0"),
        ("grpo/default", "1"),
        ("grpo/default", "2"),
        ("grpo/default", "mean"),
        ("grpo/lr~3e-4", "0"),
        ("grpo/lr~3e-4", "1"),
        ("grpo/lr~3e-4", "2"),
        ("grpo/lr~3e-4", "mean"),
    ]
    by = {(r["run"], r["seed"]): r for r in rows}
    mean = by[("grpo/lr~3e-4", "mean")]
    assert (mean["eval_accuracy"], mean["n_seeds"], mean["eval_accuracy_std"]) == (
        "0.625",
        "3",
        "0.125",
    )
    ci95 = T_975[2] * 0.125 / math.sqrt(3)  # 0.3105...
    assert float(mean["eval_accuracy_ci95"]) == pytest.approx(ci95, abs=1e-6)
    assert mean["lr"] == "0.0001" and mean["wall_seconds"] == "10"
    assert by[("grpo/lr~3e-4", "1")]["eval_accuracy"] == "0.75"
    assert by[("grpo/lr~3e-4", "1")]["eval_accuracy_std"] == ""  # spread: mean rows only
    sft = by[("sft/filter_correct~true", "mean")]
    assert (sft["pool_examples"], sft["kept_examples"], sft["wall_seconds"]) == ("8", "6", "20.5")
    assert (by[("base", "")]["wall_seconds"], by[("zero_shot", "")]["eval_accuracy"]) == (
        "4.5",
        "0.25",
    )


def test_summary_is_rebuilt_byte_for_byte_from_the_committed_files(tmp_path):
    """What a fresh clone has: no done.json, no checkpoints. The workflow's way (--runs in the
    study's order, --seeds) and the bare `rrl summary` give the same bytes."""
    results = tmp_path / "results"
    make_study(results)
    out = results / "summary.tsv"
    study_order = ["base", "zero_shot", "grpo/default", "grpo/lr~3e-4", "sft/filter_correct~true"]
    runs = [str(results / run) for run in study_order]
    assert rrl(["summary", "--runs", *runs, "--seeds", "0", "1", "2", "--out", str(out)]) == 2
    runs_args = ["--runs", *runs[:-1], "--seeds", "0", "1", "2", "--out", str(out)]
    assert rrl(["summary", *runs_args]) == 0
    first = out.read_bytes()
    for done in results.rglob("done.json"):
        done.unlink()
    for checkpoint in results.rglob("checkpoint"):
        shutil.rmtree(checkpoint)
    assert rrl(["summary", *runs_args]) == 0
    assert out.read_bytes() == first
    # The bare command finds the runs from metrics.jsonl; with every seed folder of the runs.
    shutil.rmtree(results / "sft")
    assert rrl(["summary", "--out", str(out)]) == 0
    assert out.read_bytes() == first


def test_summary_of_the_layout_before_seeds_still_works(tmp_path):
    """Run folders holding their own metrics.jsonl (the committed study before seeds): one row
    each, no seed columns; another study's results folder inside is not searched."""
    results = tmp_path / "results"
    make_study(results)
    for run in ("grpo/default", "grpo/lr~3e-4", "sft/filter_correct~true"):
        seed0 = results / run / "seed~0"
        for name in ("metrics.jsonl", "config.yaml"):
            shutil.copy(seed0 / name, results / run / name)
        for seed in results.glob(f"{run}/seed~*"):
            shutil.rmtree(seed)
    smoke = results / "smoke"
    make_seed(smoke / "grpo/default/seed~0", seed=0, acc=0.1, fmt=0.1, wall=1)
    (smoke / "summary.tsv").write_text("")
    out = results / "summary.tsv"
    assert rrl(["summary", "--out", str(out)]) == 0
    rows = read_tsv(out)
    assert "seed" not in rows[0] and "eval_accuracy_std" not in rows[0]
    assert [r["run"] for r in rows] == [
        "base",
        "zero_shot",
        "sft/filter_correct~true",
        "grpo/default",
        "grpo/lr~3e-4",
    ]
    assert rows[3]["eval_accuracy"] == "0.5"


def test_summary_names_a_run_folder_without_metrics(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "grpo/default").mkdir(parents=True)
    out = results / "summary.tsv"
    assert rrl(["summary", "--runs", str(results / "grpo/default"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"rrl summary: {results / 'grpo/default'}: neither a metrics.jsonl nor seed~<N>" in err
