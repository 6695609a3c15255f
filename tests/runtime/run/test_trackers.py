"""Metric trackers: every metrics line reaches TensorBoard (real package, when installed) and
W&B (a stand-in module recording the calls; the real one is not installed here), a resumed
run rewinds TensorBoard, and a tracker whose package is missing is refused naming the setting;
an SFT run on the micro world with ``trackers: [tensorboard]`` feeds TensorBoard its lines.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
from micro_world import QUIET, SFT, run_trainer

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.metrics import MetricsWriter, read_metrics
from reasoning_core.runtime.run.trackers import (
    TensorBoardTracker,
    WandbTracker,
    open_trackers,
    scalars,
)
from reasoning_core.runtime.trainers import sft
from reasoning_core.runtime.training import settings

LINES = [
    ({"loss": 2.5, "lr": 1e-3, "note": "text", "flag": True, "gone": None}, 1, "train"),
    ({"loss": 2.0, "lr": 1e-3, "time/train": 0.5}, 2, "train"),
    ({"accuracy": 0.25, "num_examples": 8}, 2, "eval"),
]


def test_scalars_keeps_finite_numbers_under_split_slash_key():
    record = {"step": 3, "split": "eval", "accuracy": 0.5, "n": 8, "ok": True, "s": "x"}
    record |= {"nan": float("nan"), "none": None}
    assert scalars(record) == {"eval/accuracy": 0.5, "eval/n": 8.0}


def read_tensorboard(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {
        tag: [(e.step, pytest.approx(e.value)) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def test_tensorboard_gets_every_line_and_a_resume_rewinds_it(tmp_path):
    pytest.importorskip("tensorboard")
    with MetricsWriter(tmp_path, trackers=[TensorBoardTracker(tmp_path)]) as writer:
        for values, step, split in LINES:
            writer.log(values, step=step, split=split)
        offset = writer.offset
        writer.log({"loss": 9.0}, step=3, split="train")  # lost: the run dies after it
    assert read_tensorboard(tmp_path / "tensorboard")["train/loss"][-1] == (3, 9.0)
    # The resumed run: back to the saved offset (step 2), step 3 redone with its own value.
    with MetricsWriter(tmp_path, trackers=[TensorBoardTracker(tmp_path)]) as writer:
        writer.truncate(offset)
        writer.log({"loss": 1.5}, step=3, split="train")
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 2, 3]
    events = read_tensorboard(tmp_path / "tensorboard")
    assert events["train/loss"] == [(1, 2.5), (2, 2.0), (3, 1.5)]
    assert events["eval/accuracy"] == [(2, 0.25)]
    assert events["train/time/train"] == [(2, 0.5)]
    assert "train/note" not in events and "train/flag" not in events


class FakeRun:
    def __init__(self, calls: list):
        self.calls = calls

    def define_metric(self, name, **kwargs):
        self.calls.append(("define_metric", name, kwargs))

    def log(self, data):
        self.calls.append(("log", data))

    def finish(self):
        self.calls.append(("finish",))


@pytest.fixture
def fake_wandb(monkeypatch):
    calls: list = []
    module = types.ModuleType("wandb")
    module.util = types.SimpleNamespace(generate_id=lambda: "abc123")

    def init(**kwargs):
        calls.append(("init", kwargs))
        return FakeRun(calls)

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    return calls


def test_wandb_runs_offline_plots_against_step_and_resumes_the_same_run(
    tmp_path, fake_wandb, monkeypatch
):
    config = {"lr": 1e-3, "trackers": ["wandb"]}
    (tracker,) = open_trackers(["wandb"], tmp_path, config, "sft")
    assert isinstance(tracker, WandbTracker)
    with MetricsWriter(tmp_path, trackers=[tracker]) as writer:
        for values, step, split in LINES:
            writer.log(values, step=step, split=split)
    (_, init), *rest = fake_wandb
    assert init["mode"] == "offline" and init["config"] == config
    assert init["id"] == "abc123" and init["resume"] == "allow"
    assert init["project"] == "reasoning-rl" and init["dir"] == str(tmp_path)
    assert rest[:2] == [
        ("define_metric", "step", {}),
        ("define_metric", "*", {"step_metric": "step"}),
    ]
    logged = [c[1] for c in rest if c[0] == "log"]
    assert logged == [
        {"step": 1, "train/loss": 2.5, "train/lr": 1e-3},
        {"step": 2, "train/loss": 2.0, "train/lr": 1e-3, "train/time/train": 0.5},
        {"step": 2, "eval/accuracy": 0.25, "eval/num_examples": 8.0},
    ]
    assert rest[-1] == ("finish",)
    # A resumed run continues the same W&B run; the user's environment picks the mode.
    fake_wandb.clear()
    monkeypatch.setenv("WANDB_MODE", "online")
    sys.modules["wandb"].util.generate_id = lambda: "other"
    WandbTracker(tmp_path, config, "sft")
    assert fake_wandb[0][1]["id"] == "abc123" and fake_wandb[0][1]["mode"] == "online"


def test_a_missing_tracker_package_is_refused_naming_the_setting(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"'trackers'.*'wandb'.*reasoning-rl\[wandb\]"):
        settings.check_trackers(["wandb"])
    with pytest.raises(ConfigError, match="'trackers'.*twice"):
        settings.check_trackers(["tensorboard", "tensorboard"])
    with pytest.raises(ConfigError, match="'trackers'"):
        settings.check_trackers(["mlflow"])
    settings.check_trackers([])


def test_tensorboard_tracker_gets_the_runs_metrics_lines(world, tmp_path):
    """trackers: [tensorboard] sends every train and eval line of a run to TensorBoard too,
    at the same steps and values as metrics.jsonl (which is still written)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = {**SFT, **QUIET, "sft_pool_size": 8, "eval_at_start": True, "trackers": ["tensorboard"]}
    records = run_trainer(sft, cfg, world, tmp_path / "run")
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    for split, key in (("train", "loss"), ("train", "grad_norm"), ("eval", "accuracy")):
        want = [(r["step"], r[key]) for r in records if r["split"] == split]
        got = [(e.step, e.value) for e in events.Scalars(f"{split}/{key}")]
        assert len(want) >= 2 and [s for s, _ in got] == [s for s, _ in want], key
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6), key
