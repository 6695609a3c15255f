"""benchmarks/async_speedup.py in its --tiny mode: both ways run for every seed and it prints
the speed-up ratios, the accuracy intervals and the machine's load (a plumbing check: the
times of toy runs on a shared machine are not a measurement)."""

from __future__ import annotations

import re

import pytest
from micro_world import build_world
from project_root import load_script


@pytest.mark.slow
def test_tiny_mode_runs_two_ways_and_prints_ratios_and_bands(tmp_path, capsys, served):
    """The synchronous run and the lagged worker with the correction (the measured way), each
    seed, in one call: ratios and bands printed for the way against sync."""
    world = build_world(tmp_path / "world")
    script = load_script("benchmarks/async_speedup.py")
    argv = ["--tiny", "--model", str(world), "--seeds", "0", "1"]
    assert script.main([*argv, "--ways", "sync", "worker_decoupled"]) == 0
    out = capsys.readouterr().out
    for seed in (0, 1):
        for way in ("sync", "worker_decoupled"):
            assert re.search(rf"^seed {seed} {way} +launch \d+\.\d s, run \d+\.\d s", out, re.M)
    speedups = re.findall(
        r"^speed-up \((launch|run) time, sync / (\w+)\).*median (\d+\.\d+)", out, re.M
    )
    assert [(k, w) for k, w, _ in speedups] == [
        ("launch", "worker_decoupled"),
        ("run", "worker_decoupled"),
    ]
    assert all(float(v) > 0 for _, _, v in speedups)
    for way in ("sync", "worker_decoupled"):
        assert re.search(rf"^accuracy {way} \d\.\d{{4}} \[", out, re.M)
    assert "load average before" in out and "load average after" in out
    assert served() == 4  # two seeds, two ways


def test_every_way_is_a_valid_run(tmp_path):
    """Each way's settings (the ones not run above too) make a valid GRPO configuration, in
    the short run and in --tiny: the worker ways with their lag or staleness bound."""
    from reasoning_core.runtime.trainers.grpo import GRPOConfig

    world = build_world(tmp_path / "world")
    script = load_script("benchmarks/async_speedup.py")
    for size in ({}, script.TINY):
        for way, settings in script.WAYS.items():
            cfg = GRPOConfig(model_path=str(world), **{**script.SETTINGS, **size, **settings})
            cfg.validate()
            assert cfg.rollout_worker == (way != "sync"), way
