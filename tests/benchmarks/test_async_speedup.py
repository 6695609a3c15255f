"""benchmarks/async_speedup.py in its --tiny mode: both ways run for every seed and it prints
the speed-up ratios, the accuracy intervals and the machine's load (a plumbing check: the
times of toy runs on a shared machine are not a measurement)."""

from __future__ import annotations

import re

import pytest
from micro_world import build_world
from project_root import load_script


@pytest.mark.slow
def test_tiny_mode_runs_every_way_and_prints_ratios_and_bands(tmp_path, capsys):
    """The synchronous run, the lagged worker and the free-running worker, each seed, in one
    call: each way against sync."""
    world = build_world(tmp_path / "world")
    script = load_script("benchmarks/async_speedup.py")
    argv = [
        "--tiny",
        "--model",
        str(world),
        "--seeds",
        "0",
        "1",
        "--ways",
        "sync",
        "worker",
        "free",
    ]
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    for seed in (0, 1):
        for way in ("sync", "worker", "free"):
            assert re.search(rf"^seed {seed} {way} +launch \d+\.\d s, run \d+\.\d s", out, re.M)
    speedups = re.findall(
        r"^speed-up \((launch|run) time, sync / (\w+)\).*median (\d+\.\d+)", out, re.M
    )
    assert [(k, w) for k, w, _ in speedups] == [
        ("launch", "worker"),
        ("run", "worker"),
        ("launch", "free"),
        ("run", "free"),
    ]
    assert all(float(v) > 0 for _, _, v in speedups)
    for way in ("sync", "worker", "free"):
        assert re.search(rf"^accuracy {way} \d\.\d{{4}} \[", out, re.M)
    assert "load average before" in out and "load average after" in out
