"""rrl plot and rrl summary on synthetic run folders and on a copy of the committed study's runs
(no training)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from project_root import ROOT

from reasoning_core.runtime import report
from reasoning_core.runtime.cli import main as rrl

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_run(folder: Path, *, lr: float, accuracies: list[float], done: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"lr": lr, "loss_type": "grpo_clip"}))
    lines, t = [], 0.0
    for step, acc in enumerate(accuracies):
        t += 2.5
        lines.append(
            {
                "step": step * 2,
                "split": "eval",
                "accuracy": acc,
                "format_reward": 0.5,
                "num_examples": 64,
                "time/elapsed": t,
            }
        )
        lines.append(
            {
                "step": step * 2 + 1,
                "split": "train",
                "entropy": 1.0 / (step + 1),
                "grad_norm": 0.5,
                "reward": acc,
                "time/elapsed": t + 1,
            }
        )
    if done:  # a finished trainer's last line repeats done.json (wall time as time/elapsed)
        lines.append(
            {"step": 9, "split": "done", "stopped_on_budget": False, "time/elapsed": t + 1}
        )
    # a run killed mid-write leaves a partial last line; readers must skip it
    text = "\n".join(json.dumps(x) for x in lines) + "\n" + '{"step": 9, "spl'
    (folder / "metrics.jsonl").write_text(text)
    if done:
        (folder / "done.json").write_text(
            json.dumps(
                {
                    "eval_accuracy": accuracies[-1],
                    "eval_format_reward": 0.5,
                    "eval_examples": 64,
                    "wall_seconds": t + 1,
                }
            )
        )
    return folder


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_series_skips_other_splits_missing_and_non_finite_values():
    records = [
        {"step": 0, "split": "eval", "accuracy": 0.1},
        {"step": 1, "split": "train", "accuracy": 0.9},
        {"step": 2, "split": "eval"},
        {"step": 3, "split": "eval", "accuracy": float("nan")},
        {"step": 4, "split": "eval", "accuracy": 0.3, "time/elapsed": 7.0},
    ]
    assert report.series(records, "eval/accuracy") == ([0.0, 4.0], [0.1, 0.3])
    assert report.series(records, "eval/accuracy", x="time/elapsed") == ([7.0], [0.3])
    assert report.last_value(records, "eval/accuracy") == 0.3  # the final bars' value
    assert report.last_value(records, "eval/reward") is None
    with pytest.raises(ValueError, match="split/key"):
        report.series(records, "accuracy")


def test_moving_average_is_a_trailing_mean():
    assert report.moving_average([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]
    assert report.moving_average([1, 2], 1) == [1, 2]


def test_plot_curves_writes_a_readable_png_with_labels_from_config(tmp_path, capsys):
    a = make_run(tmp_path / "grpo" / "default", lr=1e-4, accuracies=[0.1, 0.3, 0.5])
    b = make_run(tmp_path / "grpo" / "lr~3e-05", lr=3e-5, accuracies=[0.1, 0.2, 0.25])
    out = tmp_path / "plots" / "lr.png"
    code = rrl(
        [
            "plot",
            "--runs",
            str(a),
            str(b),
            "--label-keys",
            "lr",
            "--metric",
            "eval/accuracy",
            "train/entropy",
            "train/response_length",
            "--smooth",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert_png(out)
    assert "(4 series)" in capsys.readouterr().out  # response_length is not logged: skipped
    # labels name only the settings that differ between the runs
    assert report.run_labels([a, b], ["lr", "loss_type"]) == ["lr=0.0001 (default)", "lr=3e-05"]
    assert report.run_labels([a, b], ["loss_type"]) == ["default", "lr~3e-05"]
    # A key no configuration holds (one the workflow reads itself) comes from the folder name.
    c = make_run(tmp_path / "dpo" / "init~base", lr=1e-4, accuracies=[0.1])
    assert report.run_labels([a, c], ["lr", "init"]) == ["init=- (default)", "init=base"]


def test_plot_against_wall_clock_and_final_bars(tmp_path):
    a = make_run(tmp_path / "zero_shot", lr=0.0, accuracies=[0.1])
    b = make_run(tmp_path / "sft" / "default", lr=1e-4, accuracies=[0.1, 0.4])
    out_time = tmp_path / "time.png"
    assert (
        rrl(["plot", "--runs", str(a), str(b), "--x", "time/elapsed", "--out", str(out_time)]) == 0
    )
    assert_png(out_time)
    out_final = tmp_path / "final.png"
    assert (
        rrl(
            [
                "plot",
                "--kind",
                "final",
                "--runs",
                str(a),
                str(b),
                "--metric",
                "eval/accuracy",
                "eval/format_reward",
                "--out",
                str(out_final),
            ]
        )
        == 0
    )
    assert_png(out_final)
    assert report.short_names([a, b]) == ["zero_shot", "sft/default"]


def test_plot_fails_when_nothing_is_logged_or_a_run_is_missing(tmp_path, capsys):
    a = make_run(tmp_path / "a", lr=1e-4, accuracies=[0.1])
    assert (
        rrl(
            [
                "plot",
                "--runs",
                str(a),
                "--metric",
                "train/nothing",
                "--out",
                str(tmp_path / "x.png"),
            ]
        )
        == 1
    )
    assert rrl(["plot", "--runs", str(tmp_path / "absent"), "--out", str(tmp_path / "y.png")]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err


def read_tsv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_summary_has_one_row_per_run_and_one_column_per_varied_setting(tmp_path):
    results = tmp_path / "results"
    make_run(results / "grpo" / "default", lr=1e-4, accuracies=[0.1, 0.5])
    make_run(results / "grpo" / "lr~3e-05", lr=3e-5, accuracies=[0.1, 0.2])
    off = make_run(
        results / "grpo" / "epochs_per_rollout_batch~2" / "loss_type~grpo_clip",
        lr=1e-4,
        accuracies=[0.1, 0.3],
    )
    make_run(results / "zero_shot", lr=0.0, accuracies=[0.12])
    out = results / "summary.tsv"
    assert rrl(["summary", "--out", str(out)]) == 0
    rows = read_tsv(out)
    header = out.read_text().splitlines()[0].split("\t")
    assert header == [
        "experiment",
        "run",
        "epochs_per_rollout_batch",  # in order of first appearance (sorted run folders)
        "loss_type",
        "lr",
        "eval_accuracy",
        "eval_format_reward",
        "eval_examples",
        "wall_seconds",
        "sampled_responses",
    ]
    by_run = {r["run"]: r for r in rows}
    assert set(by_run) == {
        "grpo/default",
        "grpo/lr~3e-05",
        "zero_shot",
        "grpo/epochs_per_rollout_batch~2/loss_type~grpo_clip",
    }
    assert by_run["grpo/lr~3e-05"]["lr"] == "3e-05"
    assert by_run["grpo/default"]["lr"] == "0.0001"  # resolved value from config.yaml
    assert by_run["grpo/default"]["eval_accuracy"] == "0.5"
    assert by_run["zero_shot"]["experiment"] == "zero_shot"
    # a varied key absent from a run's config comes from its folder name
    (off / "config.yaml").write_text("{}")
    assert rrl(["summary", "--out", str(out)]) == 0
    first = out.read_text()
    row = {r["run"]: r for r in read_tsv(out)}[
        "grpo/epochs_per_rollout_batch~2/loss_type~grpo_clip"
    ]
    assert row["epochs_per_rollout_batch"] == "2" and row["lr"] == ""
    # idempotent: rebuilding from the same folders gives the same table
    assert rrl(["summary", "--out", str(out)]) == 0
    assert out.read_text() == first


def test_summary_of_a_missing_or_empty_results_folder_is_refused(tmp_path, capsys):
    missing = tmp_path / "missing"
    assert rrl(["summary", "--results", str(missing), "--out", str(tmp_path / "s.tsv")]) == 2
    assert f"rrl summary: --results {missing}: no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    out = tmp_path / "empty" / "summary.tsv"
    assert rrl(["summary", "--out", str(out)]) == 2
    assert "no run folders in it (none holds a metrics.jsonl)" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "s.tsv").exists()


def test_summary_into_a_folder_it_cannot_write_is_a_message(tmp_path, capsys):
    make_run(tmp_path / "results" / "grpo" / "lr~1e-4", lr=1e-4, accuracies=[0.1, 0.2])
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "summary.tsv"
    assert rrl(["summary", "--results", str(tmp_path / "results"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"rrl summary: --out {out}: cannot write there" in err
    assert "Traceback" not in err


def test_summary_reports_the_last_evaluation_not_the_best(tmp_path):
    """A run that peaked early ends where it ended: the final accuracy is its last evaluation
    (picking the best one would bias every comparison upwards)."""
    results = tmp_path / "results"
    make_run(results / "grpo" / "default", lr=1e-4, accuracies=[0.1, 0.6, 0.4])
    out = results / "summary.tsv"
    assert rrl(["summary", "--out", str(out)]) == 0
    (row,) = read_tsv(out)
    assert row["eval_accuracy"] == "0.4"


def add_to_done_line(run: Path, values: dict) -> None:
    """Add ``values`` to the ``done`` line of a run made by :func:`make_run`."""
    lines = (run / "metrics.jsonl").read_text().split("\n")
    i = next(i for i, line in enumerate(lines) if '"split": "done"' in line)
    lines[i] = json.dumps({**json.loads(lines[i]), **values})
    (run / "metrics.jsonl").write_text("\n".join(lines))


def test_summary_records_how_many_sft_examples_the_filter_kept(tmp_path):
    """SFT runs' example counts from their `done` metrics line become columns; other runs
    leave them empty. done.json is not read (it is not committed)."""
    results = tmp_path / "results"
    plain = make_run(results / "sft" / "default", lr=1e-4, accuracies=[0.2])
    kept = make_run(results / "sft" / "filter_correct~true", lr=1e-4, accuracies=[0.3])
    make_run(results / "grpo" / "default", lr=1e-4, accuracies=[0.4])
    for run, counts in (
        (plain, {"pool_examples": 20, "train_examples": 20}),
        (kept, {"pool_examples": 20, "filtered_examples": 17, "train_examples": 17}),
    ):
        add_to_done_line(run, counts)
        (run / "done.json").write_text(json.dumps({"pool_examples": 999}))  # never read
    out = results / "summary.tsv"
    assert rrl(["summary", "--out", str(out)]) == 0
    header = out.read_text().splitlines()[0].split("\t")
    assert header[-6:] == ["eval_examples", "wall_seconds", "sampled_responses",
                           *report.SUMMARY_COUNTS]  # fmt: skip
    by_run = {r["run"]: r for r in read_tsv(out)}
    row = by_run["sft/filter_correct~true"]
    assert (row["pool_examples"], row["kept_examples"], row["train_examples"]) == ("20", "17", "17")
    row = by_run["sft/default"]
    assert (row["pool_examples"], row["kept_examples"], row["train_examples"]) == ("20", "", "20")
    assert by_run["grpo/default"]["pool_examples"] == ""


def test_summary_counts_the_responses_each_method_sampled_to_train(tmp_path):
    """sampled_responses: EI's rollouts (questions x group size per iteration), GRPO's
    (rollout batch size per rollout batch), DPO's count from its done line, 0 for SFT and
    zero-shot; the mean row averages the seeds."""
    results = tmp_path / "results"
    sft = make_run(results / "sft" / "default", lr=1e-4, accuracies=[0.2])
    zero = make_run(results / "zero_shot", lr=0.0, accuracies=[0.1])
    ei = make_run(results / "ei" / "default", lr=1e-4, accuracies=[0.3])
    (ei / "config.yaml").write_text(yaml.safe_dump({"ei_batch_size": 16, "group_size": 4}))
    grpo = make_run(results / "grpo" / "default", lr=1e-4, accuracies=[0.4])
    (grpo / "config.yaml").write_text(yaml.safe_dump({"rollout_batch_size": 32}))
    for run, extra in (
        (ei, [{"split": "train", "ei_step": i, "kept": 5} for i in (1, 2, 3)]),
        (grpo, [{"split": "train", "grpo_step": i // 2} for i in range(2, 12)]),  # 5 batches
    ):
        lines = [json.dumps({"step": 0, **line}) for line in extra]
        text = (run / "metrics.jsonl").read_text()
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n" + text)
    for seed, count in ((0, 2048), (1, 1024)):
        dpo = make_run(results / "dpo" / "default" / f"seed~{seed}", lr=1e-5, accuracies=[0.5])
        add_to_done_line(dpo, {"sampled_responses": count})
    out = results / "summary.tsv"
    assert rrl(["summary", "--out", str(out)]) == 0
    got = {(r["run"], r["seed"]): r["sampled_responses"] for r in read_tsv(out)}
    assert got[("ei/default", "")] == str(3 * 16 * 4)
    assert got[("grpo/default", "")] == str(5 * 32)
    assert got[("dpo/default", "0")] == "2048" and got[("dpo/default", "mean")] == "1536"
    assert got[("sft/default", "")] == got[("zero_shot", "")] == "0"
    assert report.sampled_responses(sft) == report.sampled_responses(zero) == 0
    assert report.sampled_responses(tmp_path / "nothing") is None


def test_summary_reads_metrics_alone_and_orders_runs_by_experiment(tmp_path):
    """Final values come from metrics.jsonl (the last eval line; the wall time of the `done`
    line, else of the last line), never from done.json; rows follow the experiments' order
    (base, zero_shot, sft, ...), whatever the order of --runs."""
    results = tmp_path / "r"
    a = make_run(results / "sft" / "max_examples~128", lr=1e-4, accuracies=[0.1, 0.35])
    b = make_run(results / "base", lr=1e-3, accuracies=[0.05], done=False)
    add_to_done_line(a, {"time/elapsed": 100.0})
    (a / "done.json").write_text(json.dumps({"eval_accuracy": 0.9, "wall_seconds": 1.0}))
    out = tmp_path / "summary.tsv"
    assert (
        rrl(["summary", "--results", str(results), "--runs", str(b), str(a), "--out", str(out)])
        == 0
    )
    rows = read_tsv(out)
    assert [r["run"] for r in rows] == ["base", "sft/max_examples~128"]
    assert rows[1]["eval_accuracy"] == "0.35" and rows[1]["eval_examples"] == "64"
    assert rows[1]["wall_seconds"] == "100"  # time/elapsed of the done line
    assert (rows[0]["eval_accuracy"], rows[0]["wall_seconds"]) == ("0.05", "3.5")
    assert rows[1]["max_examples"] == "128" and rows[0]["max_examples"] == ""
    given = ["--runs", str(a), str(b)]
    assert rrl(["summary", "--results", str(results), *given, "--out", str(out)]) == 0
    assert read_tsv(out) == rows
    outside = make_run(tmp_path / "elsewhere", lr=1e-4, accuracies=[0.1])
    assert (
        rrl(["summary", "--results", str(results), "--runs", str(outside), "--out", str(out)]) == 2
    )


def test_damaged_run_files_give_a_message_not_a_traceback(tmp_path, capsys):
    """A metrics line that is JSON but not an object is skipped with a warning naming the
    file and line; an unreadable config.yaml or done.json is named (exit 2)."""
    a = make_run(tmp_path / "a", lr=1e-4, accuracies=[0.1, 0.3])
    b = make_run(tmp_path / "b", lr=3e-4, accuracies=[0.2, 0.4])
    lines = (a / "metrics.jsonl").read_text().splitlines()
    lines[1:1] = ["3", '{"step": 1, "split": "ev']  # garbage in the middle
    (a / "metrics.jsonl").write_text("\n".join(lines))  # still ends in the partial line
    png = tmp_path / "p.png"
    assert rrl(["plot", "--runs", str(a), str(b), "--out", str(png)]) == 0
    err = capsys.readouterr().err
    assert f"{a / 'metrics.jsonl'}:2: skipped (not a JSON object)" in err
    assert f"{a / 'metrics.jsonl'}:3: skipped (not valid JSON)" in err
    assert err.count(":2: skipped") == 1  # warned once per file, not once per reader
    assert ":7:" not in err  # the partial last line of a killed run is skipped silently
    assert_png(png)

    (b / "config.yaml").write_text("lr: [1\n")
    assert rrl(["plot", "--runs", str(a), str(b), "--label-keys", "lr", "--out", str(png)]) == 2
    err = capsys.readouterr().err
    assert f"rrl plot: {b / 'config.yaml'}:1:5: not valid YAML" in err
    assert "Traceback" not in err

    assert rrl(["summary", "--runs", str(b), "--results", str(tmp_path), "--out", str(png)]) == 2
    assert f"rrl summary: {b / 'config.yaml'}:1:5: not valid YAML" in capsys.readouterr().err


def test_empty_metrics_file_is_named_and_other_runs_still_drawn(tmp_path, capsys):
    a = make_run(tmp_path / "a", lr=1e-4, accuracies=[0.1, 0.3])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    png = tmp_path / "p.png"
    assert rrl(["plot", "--runs", str(a), str(empty), "--out", str(png)]) == 0
    assert f"{empty / 'metrics.jsonl'} holds no records" in capsys.readouterr().err
    assert_png(png)
    assert rrl(["plot", "--runs", str(empty), "--out", str(tmp_path / "q.png")]) == 1
    assert "none of ['eval/accuracy'] is logged" in capsys.readouterr().err


def test_metrics_reader_leaves_out_a_partial_last_line_and_names_damage(tmp_path):
    from reasoning_core.runtime.run.metrics import MetricsWriter
    from reasoning_core.runtime.run.metrics import read_metrics as read_complete

    with MetricsWriter(tmp_path) as w:
        w.log({"loss": 1.0}, step=1, split="train")
        w.log({"accuracy": 0.5}, step=1, split="eval")
    path = tmp_path / "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step": 2, "spl')  # killed mid-write
    assert [r["split"] for r in read_complete(tmp_path)] == ["train", "eval"]
    path.write_text(path.read_text().replace('"eval"', '"ev'))
    with pytest.raises(ValueError, match=rf"^{path}:2: not valid JSON"):
        read_complete(path)
    path.write_bytes(b'{"step": 1, "split": "train"}\n[1, 2]\n')
    with pytest.raises(ValueError, match=rf"^{path}:2: not a JSON object"):
        read_complete(path)
    path.write_bytes(b'{"step": 1, "split": "train"}\n{"note": "\xff"}\n')
    with pytest.raises(ValueError, match=rf"^{path}:2: not UTF-8 text"):
        read_complete(path)
    with pytest.raises(ValueError, match="damaged must be"):
        read_complete(path, damaged="ignore")


def test_plot_and_summary_read_metrics_as_the_trainers_do(tmp_path, capsys):
    """One reader serves both: the figures' reader skips what the strict one names, with the
    same FILE:LINE, and leaves out a last line without its newline even when it is whole."""
    from reasoning_core.runtime.report import read_metrics as read_for_figures
    from reasoning_core.runtime.run.metrics import read_metrics as read_complete

    path = tmp_path / "metrics.jsonl"
    good = b'{"step": 1, "split": "train", "loss": 1.0}\n'
    path.write_bytes(good + b'{"note": "\xff"}\n' + good + b'{"step": 2, "split": "eval"}')
    assert read_for_figures(tmp_path) == [json.loads(good)] * 2
    assert f"warning: {path}:2: skipped (not UTF-8 text)" in capsys.readouterr().err
    assert read_for_figures(tmp_path, warn=False) == [json.loads(good)] * 2
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match=rf"^{path}:2: not UTF-8 text"):
        read_complete(tmp_path)
    assert read_for_figures(tmp_path / "absent") == []


def test_metrics_lines_are_strict_json_with_null_for_non_finite_values(tmp_path):
    """A NaN loss or an infinite gradient norm is written as null: Python's json would
    otherwise write the bare tokens NaN and Infinity, which strict JSON readers refuse."""
    import torch

    from reasoning_core.runtime.run.metrics import MetricsWriter

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    with MetricsWriter(tmp_path) as w:
        w.log(
            {"loss": float("nan"), "grad_norm": torch.tensor(float("inf")), "lr": 0.5},
            step=1,
            split="train",
        )
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    record = json.loads(line, parse_constant=refuse)
    assert record == {"step": 1, "split": "train", "loss": None, "grad_norm": None, "lr": 0.5}


def test_beside_the_default_run_each_run_is_labelled_by_what_it_changes(tmp_path):
    """A family whose table has many columns: each run names only the settings it changes from
    the default run, and the default run, with more than three varied settings, is 'default'."""
    keys = ["a", "b", "c", "d"]
    base = {"a": 1, "b": 1, "c": 1, "d": 1}
    runs = []
    for name, changes in [("default", {}), ("a~2", {"a": 2}), ("b~2/c~2", {"b": 2, "c": 2}),
                          ("d~2", {"d": 2})]:  # fmt: skip
        folder = tmp_path / "grpo" / name
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text(yaml.safe_dump({**base, **changes}))
        runs.append(folder)
    assert report.run_labels(runs, keys) == ["default", "a=2", "b=2, c=2", "d=2"]
    # with three varied settings or fewer the default still names its values
    assert report.run_labels(runs[:3], keys) == ["a=1, b=1, c=1 (default)", "a=2", "b=2, c=2"]


@pytest.mark.parametrize("command", ["seeds", "ablations"])
def test_help_says_95_percent_once(command, capsys):
    with pytest.raises(SystemExit) as done:
        rrl([command, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert "95% " in text and "%%" not in text


def test_the_file_reading_commands_import_no_torch(tmp_path):
    """``rrl summary``, ``plot`` and ``ablations`` read metrics files and write tables and
    figures: in a fresh interpreter they run without importing torch (1.5-2 s of each such
    job's start in a study), on the committed study's GRPO runs."""
    shutil.copytree(ROOT / "results/default/grpo", tmp_path / "grpo")
    runs = [str(p.parent) for p in sorted((tmp_path / "grpo").glob("*/seeds.json"))]
    assert len(runs) >= 3
    code = (
        "import sys\n"
        "from reasoning_core.runtime.cli import main\n"
        f"runs = {runs!r}\n"
        f"out = {str(tmp_path)!r}\n"
        "codes = [\n"
        "    main(['summary', '--runs', *runs, '--seeds', '0', '1', '2', '--out', out + '/s.tsv']),\n"
        "    main(['ablations', '--summary', out + '/s.tsv', '--out', out + '/a.tsv']),\n"
        "    main(['plot', '--runs', *runs, '--metric', 'eval/accuracy', '--x', 'step',\n"
        "          '--out', out + '/p.png']),\n"
        "]\n"
        "print(codes, 'torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[0, 0, 0] False", result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "s.tsv").open(), delimiter="\t"))
    assert {row["run"] for row in rows} >= {"grpo/default", "grpo/lr~3e-5"}
    assert (tmp_path / "a.tsv").stat().st_size > 0
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_SIGNATURE
