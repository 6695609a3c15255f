"""benchmarks/async_speedup.py in its --tiny mode: both ways run for every seed and it prints
the speed-up ratios, the accuracy intervals and the machine's load (a plumbing check: the
times of toy runs on a shared machine are not a measurement)."""

from __future__ import annotations

import re

import pytest
from micro_world import build_world
from project_root import load_script


@pytest.mark.slow
def test_tiny_mode_runs_both_ways_and_prints_ratios_and_bands(tmp_path, capsys):
    world = build_world(tmp_path / "world")
    script = load_script("benchmarks/async_speedup.py")
    assert script.main(["--tiny", "--model", str(world), "--seeds", "0", "1"]) == 0
    out = capsys.readouterr().out
    for seed in (0, 1):
        for way in ("sync", "worker"):
            assert re.search(rf"^seed {seed} {way} +launch \d+\.\d s, run \d+\.\d s", out, re.M)
    speedups = re.findall(r"^speed-up \((launch|run) time.*median (\d+\.\d+)", out, re.M)
    assert [k for k, _ in speedups] == ["launch", "run"]
    assert all(float(v) > 0 for _, v in speedups)
    assert re.search(r"^accuracy sync \d\.\d{4} \[", out, re.M)
    assert re.search(r"^accuracy worker \d\.\d{4} \[", out, re.M)
    assert "load average before" in out and "load average after" in out


@pytest.mark.slow
def test_tiny_mode_compares_the_free_running_worker(tmp_path, capsys):
    world = build_world(tmp_path / "world")
    script = load_script("benchmarks/async_speedup.py")
    argv = ["--tiny", "--model", str(world), "--seeds", "0", "1", "--ways", "sync", "free"]
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    for seed in (0, 1):
        assert re.search(rf"^seed {seed} free +launch \d+\.\d s", out, re.M)
    assert re.findall(r"^speed-up \((launch|run) time, sync / free\)", out, re.M) == [
        "launch",
        "run",
    ]
    assert re.search(r"^accuracy free \d\.\d{4} \[", out, re.M)
    assert "seed 0 worker" not in out
