"""Figures of runs over several seeds (seed~N/ folders): the mean and 95% t-interval that are
drawn, the final bars' error bars, panels left out when no run logs them, and curves against
GRPO steps. The drawn arrays are read from the matplotlib calls, not from pixels."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.axes
import pytest
import yaml

from reasoning_core.runtime import report
from reasoning_core.runtime.cli import main as rrl
from reasoning_core.runtime.report import figures

T_975 = {1: 12.706204736, 2: 4.302652730, 4: 2.776445105, 10: 2.228138852, 30: 2.042272456}


def grpo_records(accuracies, *, losses, seconds_per_step, epochs=2):
    """Metrics lines of a GRPO-like run: an eval at step 0, then per GRPO step ``epochs``
    train lines (optimizer steps) and an eval at the last of them (``accuracies[g]`` after
    g GRPO steps; ``losses`` one per optimizer step)."""
    records = [
        {"step": 0, "split": "eval", "accuracy": accuracies[0], "time/elapsed": 1.0},
    ]
    step = 0
    for g in range(1, len(accuracies)):
        for _ in range(epochs):
            step += 1
            records.append(
                {
                    "step": step,
                    "split": "train",
                    "grpo_step": g,
                    "loss": losses[step - 1],
                    "clip_fraction": 0.1,
                    "time/elapsed": 1.0 + step * seconds_per_step,
                }
            )
        records.append(
            {
                "step": step,
                "split": "eval",
                "accuracy": accuracies[g],
                "response_length_correct": 10.0 + g,
                "time/elapsed": 1.5 + step * seconds_per_step,
            }
        )
    return records


def write_run(folder: Path, records, *, lr=1e-4) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"lr": lr, "seed": folder.name}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


# Three seeds of one run: accuracy after 0, 1, 2 GRPO steps (optimizer steps 0, 2, 4).
SEED_ACC = {0: [0.2, 0.4, 0.6], 1: [0.2, 0.5, 0.7], 2: [0.2, 0.6, 0.5]}
SEED_LOSS = {0: [1.0, 3.0, 2.0, 4.0], 1: [2.0, 2.0, 2.0, 2.0], 2: [3.0, 1.0, 5.0, 3.0]}
SEED_SECONDS = {0: 10.0, 1: 20.0, 2: 30.0}


def three_seed_run(root: Path, *, names=(0, 1, 2)) -> Path:
    run = root / "grpo" / "default"
    for name, seed in zip(names, SEED_ACC, strict=True):
        records = grpo_records(
            SEED_ACC[seed], losses=SEED_LOSS[seed], seconds_per_step=SEED_SECONDS[seed]
        )
        write_run(run / f"seed~{name}", records)
    return run


def interval(values):
    """mean +- t * s / sqrt(n), written out."""
    n = len(values)
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T_975[n - 1] * s / math.sqrt(n)
    return mean, mean - half, mean + half


class Spy:
    """Records the calls of matplotlib Axes methods (and still draws)."""

    def __init__(self, monkeypatch, *names):
        self.calls = {name: [] for name in names}
        for name in names:
            original = getattr(matplotlib.axes.Axes, name)

            def wrapper(ax, *args, _name=name, _original=original, **kwargs):
                self.calls[_name].append((ax, args, kwargs))
                return _original(ax, *args, **kwargs)

            monkeypatch.setattr(matplotlib.axes.Axes, name, wrapper)


def test_t_quantile_matches_the_student_t_table():
    for df, t in T_975.items():
        assert report.t_quantile(df) == pytest.approx(t, rel=1e-8), df
    assert report.t_quantile(1000) == pytest.approx(1.962339, rel=1e-6)  # near 1.959964
    assert report.bands.t_two_sided_mass(T_975[4], 4) == pytest.approx(0.95, abs=1e-9)
    with pytest.raises(ValueError, match="positive integer"):
        report.t_quantile(0)


def test_mean_interval_is_the_t_interval_of_the_mean():
    stats = report.mean_interval([0.4, 0.5, 0.6])
    # mean 0.5, s = 0.1, half width = 4.3027 * 0.1 / sqrt(3) = 0.248414
    assert (stats.mean, stats.n) == (pytest.approx(0.5), 3)
    assert stats.hi - stats.mean == pytest.approx(0.2484137, abs=1e-6)
    assert stats.mean - stats.lo == pytest.approx(0.2484137, abs=1e-6)
    one = report.mean_interval([0.7])
    assert (one.mean, one.lo, one.hi, one.n) == (0.7, 0.7, 0.7, 1)


def test_seed_folders_old_layout_and_numeric_seed_order(tmp_path):
    old = write_run(tmp_path / "zero_shot", [{"step": 0, "split": "eval", "accuracy": 0.2}])
    assert report.seed_folders(old) == [old]
    run = three_seed_run(tmp_path, names=(10, 2, 0))
    assert [p.name for p in report.seed_folders(run)] == ["seed~0", "seed~2", "seed~10"]
    (run / "seed~5").mkdir()  # a seed not yet run (no metrics.jsonl) is not one
    assert len(report.seed_folders(run)) == 3
    assert report.seed_folders(tmp_path / "absent") == []
    # A metrics.jsonl left beside seed folders (zero-shot's, from before it had seeds) is not
    # read: the seeds stand for the run, in the figures as in the summary.
    write_run(old / "seed~0", [{"step": 0, "split": "eval", "accuracy": 0.3}])
    assert report.seed_folders(old) == [old / "seed~0"]
    # labels read the settings from the first seed's config.yaml
    assert report.config_file(run) == run / "seed~0" / "config.yaml"


def test_three_seeds_accuracy_band_against_step_time_and_grpo_step(tmp_path):
    seeds = report.read_seeds(three_seed_run(tmp_path))
    raw, line = report.curve_bands(seeds, "eval/accuracy")
    assert line is raw
    assert line.x == [0.0, 2.0, 4.0] and line.n == [3, 3, 3]
    for j in range(3):
        mean, lo, hi = interval([SEED_ACC[s][j] for s in range(3)])
        assert line.mean[j] == pytest.approx(mean)
        assert line.lo[j] == pytest.approx(lo)
        assert line.hi[j] == pytest.approx(hi)
    assert (line.lo[0], line.hi[0]) == pytest.approx((0.2, 0.2))  # the seeds agree at step 0
    # Against wall-clock minutes: the mean of the seeds' elapsed times at each step.
    _, timed = report.curve_bands(seeds, "eval/accuracy", x="time/elapsed", time_unit="min")
    assert timed.x == pytest.approx([1.0 / 60, (1.5 + 2 * 20.0) / 60, (1.5 + 4 * 20.0) / 60])
    assert timed.mean == pytest.approx(line.mean)
    # Against GRPO steps: eval lines get the GRPO step of their optimizer step.
    _, per_rollout = report.curve_bands(seeds, "eval/accuracy", x="grpo_step")
    assert per_rollout.x == [0.0, 1.0, 2.0]
    assert per_rollout.mean == pytest.approx(line.mean)


def test_train_band_spans_the_seeds_smoothed_curves(tmp_path):
    seeds = report.read_seeds(three_seed_run(tmp_path))
    raw, line = report.curve_bands(seeds, "train/loss", smooth=2)
    assert raw.x == line.x == [1.0, 2.0, 3.0, 4.0]
    assert raw.mean == pytest.approx([2.0, 2.0, 3.0, 3.0])  # means of the raw losses
    smoothed = {0: [1.0, 2.0, 2.5, 3.0], 1: [2.0, 2.0, 2.0, 2.0], 2: [3.0, 2.0, 3.0, 4.0]}
    for j in range(4):
        mean, lo, hi = interval([smoothed[s][j] for s in range(3)])
        assert (line.mean[j], line.lo[j], line.hi[j]) == pytest.approx((mean, lo, hi))


def test_one_seed_draws_exactly_its_own_curve(tmp_path):
    records = grpo_records([0.1, 0.3, 0.2], losses=[1, 2, 3, 4], seconds_per_step=5.0)
    old = write_run(tmp_path / "old", records)
    seeded = write_run(tmp_path / "new" / "seed~0", records).parent
    for run in (old, seeded):
        seeds = report.read_seeds(run)
        for metric, x in [("eval/accuracy", "time/elapsed"), ("train/loss", "step")]:
            raw, line = report.curve_bands(seeds, metric, x=x, smooth=3)
            xs, ys = report.series(records, metric, x)
            assert raw.x == xs and raw.mean == ys and raw.lo == raw.hi == ys
            assert line.seeds == 1
        assert report.curve_bands(seeds, "train/loss", smooth=3)[1].mean == pytest.approx(
            report.moving_average([1, 2, 3, 4], 3)
        )


def test_a_seed_that_stopped_early_leaves_fewer_seeds_at_the_end(tmp_path):
    run = three_seed_run(tmp_path)
    short = grpo_records([0.2, 0.9], losses=[0.0, 0.0], seconds_per_step=1.0)
    write_run(run / "seed~3", short)
    _, line = report.curve_bands(report.read_seeds(run), "eval/accuracy")
    assert line.x == [0.0, 2.0, 4.0] and line.n == [4, 4, 3]
    assert line.mean[1] == pytest.approx((0.4 + 0.5 + 0.6 + 0.9) / 4)
    assert (line.mean[2], line.lo[2], line.hi[2]) == pytest.approx(interval([0.6, 0.7, 0.5]))


def test_grpo_step_of_eval_lines_is_derived_from_train_lines():
    records = [
        {"step": 0, "split": "eval", "accuracy": 0.1},
        {"step": 1, "split": "train", "grpo_step": 1},
        {"step": 2, "split": "train", "grpo_step": 1},
        {"step": 2, "split": "eval", "accuracy": 0.2},
        {"step": 3, "split": "train", "grpo_step": 2},
        {"step": 3, "split": "eval", "accuracy": 0.25},  # mid rollout batch 2
        {"step": 4, "split": "train", "grpo_step": 2},
        {"step": 4, "split": "eval", "accuracy": 0.3},
        {"step": 5, "split": "eval", "accuracy": 0.4, "grpo_step": 7},  # logged: kept
    ]
    assert [r.get("grpo_step") for r in report.with_grpo_steps(records) if "accuracy" in r] == [
        0.0,
        1.0,
        2.0,
        2.0,
        7,
    ]
    assert report.points(records, "eval/accuracy", "grpo_step") == [
        (0.0, 0.0, 0.1),
        (1.0, 1.0, 0.2),
        (2.0, 2.0, 0.25),
        (2.0, 2.0, 0.3),
        (7.0, 7.0, 0.4),
    ]
    sft = [{"step": 0, "split": "eval", "accuracy": 0.1}, {"step": 1, "split": "train"}]
    assert report.with_grpo_steps(sft) == sft  # no GRPO train lines: nothing derived


def test_curve_figure_draws_the_band_and_leaves_out_unlogged_panels(tmp_path, monkeypatch, capsys):
    run = three_seed_run(tmp_path)
    single = write_run(
        tmp_path / "grpo" / "lr~3e-05",
        grpo_records([0.1, 0.2, 0.3], losses=[1, 1, 1, 1], seconds_per_step=5.0),
        lr=3e-5,
    )
    spy = Spy(monkeypatch, "plot", "fill_between")
    shown = {}
    monkeypatch.setattr(figures, "_save", lambda fig, out: shown.setdefault("fig", fig))
    panels = ["eval/accuracy", "eval/entropy", "eval/response_length_correct"]
    drawn = report.plot_curves(
        [run, single], panels, tmp_path / "f.png", x="grpo_step", title="offpolicy"
    )
    assert drawn == 4  # two runs x two logged panels
    assert "eval/entropy is logged in none of the runs: no panel" in capsys.readouterr().err
    fig = shown["fig"]
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_ylabel() for ax in visible] == ["eval/accuracy", "eval/response_length_correct"]
    assert visible[0].get_xlabel() == "GRPO step (rollout batches)"
    assert "mean over 1-3 seeds; band: 95% t-interval of the mean" in fig._suptitle.get_text()
    # the three-seed run's band on the accuracy panel, as computed by hand
    (ax, (xs, lo, hi), _), *rest = spy.calls["fill_between"]
    assert len(rest) == 1  # one band per panel for the seeded run, none for the single run
    assert list(xs) == [0.0, 1.0, 2.0] and ax is visible[0]
    for j in range(3):
        _, want_lo, want_hi = interval([SEED_ACC[s][j] for s in range(3)])
        assert (lo[j], hi[j]) == pytest.approx((want_lo, want_hi))
    lines = [args for a, args, kw in spy.calls["plot"] if a is visible[0]]
    assert list(lines[0][1]) == pytest.approx([0.2, 0.5, 0.6])  # the mean line
    assert list(lines[1][1]) == [0.1, 0.2, 0.3]  # the single-seed run, as logged


def test_final_bars_have_t_interval_error_bars_and_seed_dots(tmp_path, monkeypatch):
    run = three_seed_run(tmp_path)
    zero = write_run(tmp_path / "zero_shot", [{"step": 0, "split": "eval", "accuracy": 0.2}])
    values, stats = report.final_values(report.read_seeds(run), "eval/accuracy")
    assert values == [0.6, 0.7, 0.5]
    assert stats == report.mean_interval(values)
    assert (stats.mean, stats.lo, stats.hi) == pytest.approx(interval(values))
    spy = Spy(monkeypatch, "bar", "errorbar", "scatter")
    assert report.plot_final([zero, run], ["eval/accuracy"], tmp_path / "m.png") == 2
    (_, (_, heights), _), *_ = spy.calls["bar"]
    assert list(heights) == pytest.approx([0.2, 0.6])
    ((_, (x, y), kw),) = spy.calls["errorbar"]  # only the seeded run has one
    assert y == pytest.approx(0.6)
    (below,), (above,) = kw["yerr"]
    assert (below, above) == pytest.approx((0.6 - stats.lo, stats.hi - 0.6))
    assert above == pytest.approx(T_975[2] * 0.1 / math.sqrt(3))  # s = 0.1 over 3 seeds
    ((_, (_, dots), _),) = spy.calls["scatter"]
    assert dots == values


def test_rrl_plot_reads_seed_folders_and_their_labels(tmp_path, capsys):
    run = three_seed_run(tmp_path)
    other = write_run(
        tmp_path / "grpo" / "lr~3e-05" / "seed~0",
        grpo_records([0.1, 0.2, 0.3], losses=[1, 1, 1, 1], seconds_per_step=5.0),
        lr=3e-5,
    ).parent
    assert report.run_labels([run, other], ["lr"]) == ["lr=0.0001 (default)", "lr=3e-05"]
    out = tmp_path / "plots" / "a.png"
    common = ["plot", "--runs", str(run), str(other), "--label-keys", "lr", "--out", str(out)]
    assert rrl([*common, "--x", "grpo_step"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rrl([*common, "--x", "time/elapsed", "--time-unit", "min"]) == 0
    assert rrl([*common, "--kind", "final", "--metric", "eval/accuracy"]) == 0
    assert "(2 series)" in capsys.readouterr().out
    empty = tmp_path / "grpo" / "empty"
    (empty / "seed~0").mkdir(parents=True)
    assert rrl(["plot", "--runs", str(empty), "--out", str(out)]) == 2
    assert "no metrics.jsonl (nor seed~N/metrics.jsonl)" in capsys.readouterr().err
