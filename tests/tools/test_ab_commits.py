"""tools/ab_commits.py on the micro world: one SFT run at the same commit twice gives the
same metrics (what the script reports for a refactor) and a wall ratio."""

from __future__ import annotations

import re
import subprocess

import pytest
from micro_world import QUIET, SFT, build_world, run_trainer
from project_root import ROOT, load_script

from reasoning_core.runtime.trainers import sft


@pytest.mark.slow
def test_the_same_commit_twice_has_identical_metrics(tmp_path, capsys):
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    world = build_world(tmp_path / "world")
    run_trainer(sft, {**SFT, **QUIET}, world, tmp_path / "saved")
    script = load_script("tools/ab_commits.py")
    argv = ["--old", "HEAD", "--new", "HEAD", "--command", "sft", "--rounds", "1"]
    argv += ["--config", str(tmp_path / "saved" / "config.yaml"), "--out", str(tmp_path / "ab")]
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"^round 0 old wall +\d+\.\d s", out, re.M), out
    assert re.search(r"wall ratio old / new: \d+\.\d\d", out), out
    assert "metrics identical across every run apart from time/: True" in out
    assert (tmp_path / "ab" / "tree_old" / "reasoning_core").is_dir()
