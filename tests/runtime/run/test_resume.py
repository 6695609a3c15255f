"""Reproducible and resumable trainer runs on the micro world.

* the same config and seed give the same ``metrics.jsonl`` apart from ``time/`` keys;
* a run of any of the three trainers killed after a few optimizer steps and started again with
  the same ``--out`` finishes with exactly the metrics and final weights of an uninterrupted
  run: it resumes from its last saved state (model, optimizer, scheduler, RNG, data position)
  and redoes the steps after it, so nothing is lost beyond the recomputation of those steps;
* the saved state is swapped in atomically and restores everything.

Runs that need rewards get them by construction: their rollouts hold one scripted correct
answer per question (``scripted_rollouts.py``), since the micro world earns none but by luck.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import scripted_rollouts
from micro_world import (
    EI,
    GRPO,
    SFT,
    run_trainer,
    sets,
)
from project_root import ROOT

from reasoning_core.runtime.run.metrics import read_metrics, without_time
from reasoning_core.runtime.trainers import ei, grpo, sft


def test_sft_and_ei_are_reproducible(world, tmp_path, monkeypatch):
    scripted_rollouts.install(monkeypatch)  # EI keeps at least one rollout per question
    for module, cfg, name in ((sft, {**SFT, "filter_correct": True}, "sft"), (ei, EI, "ei")):
        a = run_trainer(module, cfg, world, tmp_path / f"{name}_a")
        b = run_trainer(module, cfg, world, tmp_path / f"{name}_b")
        assert without_time(a) == without_time(b), name
        assert [r for r in a if r["split"] == "train" and "loss" in r], name
        assert (tmp_path / f"{name}_a" / "done.json").is_file()
        if module is ei:
            kept = [r["kept"] for r in a if "kept" in r]
            assert len(kept) == EI["n_ei_steps"] and min(kept) >= EI["ei_batch_size"], kept


def _subprocess_run(module: str, cfg: dict, world: Path, out: Path, exit_after: int | None):
    """``rrl <module>`` in a fresh process: with scripted rollouts for the methods that sample
    (as the in-process reference run), the plain command line for SFT."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if exit_after is not None:
        env["RRL_EXIT_AFTER_STEP"] = str(exit_after)
    if module == "sft":
        entry = ["-m", "reasoning_core.runtime.cli"]
    else:
        entry = [str(ROOT / "tests" / "helpers" / "scripted_rollouts.py")]
    cmd = [
        sys.executable,
        *entry,
        module,
        *sets({**cfg, "model_path": str(world)}),
        "--out",
        str(out),
    ]
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run / "checkpoint" / "model.safetensors")


# Kill points: GRPO after optimizer step 5 of 8 (third GRPO step, resumed from the state saved
# after the second); SFT after step 4 of 6; EI after step 6, in the second iteration (at least
# 16 kept rollouts, 4 steps, per iteration), resumed from the state saved after the first.
# GRPO with rollout_lag 2: the resumed steps sample with versions 0 and 1, kept in the state.
LAGGED = {**GRPO, "rollout_lag": 2, "offpolicy_correction": "decoupled"}
# With the worker evaluating every GRPO step from the first (none at step 0): the state saved
# after the first step records its evaluation (at optimizer step 2, asked for just before the
# save, the first line ever to wait) as not yet logged; killed after optimizer step 3, the
# resumed run asks for it again, and its line lands in its place.
WORKER = {**LAGGED, "rollout_worker": True, "eval_at_start": False, "eval_every": 1}


@pytest.mark.parametrize(
    ("module", "cfg", "kill_at"),
    [
        ("grpo", GRPO, 5),
        ("sft", SFT, 4),
        ("ei", EI, 6),
        ("grpo", LAGGED, 5),
        ("grpo", WORKER, 3),
    ],
)
def test_killed_run_resumes_to_the_same_metrics_and_weights(
    world, tmp_path, monkeypatch, module, cfg, kill_at
):
    """A run killed (os._exit, no clean-up) right after optimizer step ``kill_at`` and started
    again with the same ``--out`` ends with the metrics (apart from time/ keys) and the final
    weights of an uninterrupted run, which itself moved the weights."""
    import torch
    from safetensors.torch import load_file

    mod = {"grpo": grpo, "sft": sft, "ei": ei}[module]
    scripted_rollouts.install(monkeypatch)
    reference = run_trainer(mod, cfg, world, tmp_path / "ref")
    assert any(r.get("grad_norm", 0) > 0 for r in reference)
    out = tmp_path / "killed"
    first = _subprocess_run(module, cfg, world, out, exit_after=kill_at)
    assert first.returncode == 3, first.stderr[-2000:]
    assert (out / "state").is_dir() and not (out / "done.json").exists()
    last = max(r["step"] for r in read_metrics(out))
    # With the worker evaluating, lines after an evaluation not yet back died unwritten.
    assert last == kill_at or (cfg.get("rollout_worker") and last < kill_at)
    if cfg.get("rollout_worker"):
        saved = torch.load(out / "state" / "trainer_state.pt", weights_only=False)
        assert saved["extra"]["pending_evals"] == [2]
    second = _subprocess_run(module, cfg, world, out, exit_after=None)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resumed from" in second.stderr
    assert without_time(read_metrics(out)) == without_time(reference)
    assert (out / "done.json").is_file()
    want, got = _weights(tmp_path / "ref"), _weights(out)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    start = load_file(world / "model.safetensors")
    assert any(not torch.equal(start[k], want[k]) for k in start)


def test_state_is_swapped_in_atomically_and_restores_everything(tmp_path):
    import random

    import numpy as np
    import torch

    from reasoning_core.runtime.run.resume import find_state, load_state, save_state

    def make():
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
        return model, opt, sched

    model, opt, sched = make()
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    save_state(
        tmp_path / "state", model=model, optimizer=opt, scheduler=sched, counters={"step": 1}
    )
    save_state(
        tmp_path / "state", model=model, optimizer=opt, scheduler=sched, counters={"step": 2}
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # no temp or old folders left
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    # A process that died between the two renames leaves only state.old: it is still found.
    (tmp_path / "state").rename(tmp_path / "state.old")
    assert find_state(tmp_path / "state") == tmp_path / "state.old"
    fresh, fresh_opt, fresh_sched = make()
    counters = load_state(
        tmp_path / "state", model=fresh, optimizer=fresh_opt, scheduler=fresh_sched
    )
    assert counters == {"step": 2}
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True)
    )
    assert fresh_sched.state_dict()["last_epoch"] == 1
    assert torch.equal(
        fresh_opt.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
    )
    # RNG streams continue from where they were at save time.
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected


def test_killed_free_running_run_resumes_from_its_state(world, tmp_path):
    """A free-running worker's run (max_staleness 1), killed after optimizer step 5 (third
    GRPO step), resumes from the state saved after the second: its worker starts again at
    batch 3, the one after the last batch trained into that state (the batches in flight died
    with the killed run), and the run ends with every step trained once, each within the
    bound. (Which version sampled which batch is timing's: no comparison of metrics.)"""
    cfg = {**GRPO, "rollout_worker": True, "max_staleness": 1}
    out = tmp_path / "killed"
    first = _subprocess_run("grpo", cfg, world, out, exit_after=5)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "(from batch 1)" in first.stderr
    second = _subprocess_run("grpo", cfg, world, out, exit_after=None)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resumed from" in second.stderr and "(from batch 3)" in second.stderr
    lines = [r for r in read_metrics(out) if r["split"] == "train"]
    assert [r["step"] for r in lines] == list(range(1, 9))
    assert [r["grpo_step"] for r in lines] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert all(r["async/staleness_max"] <= 1 for r in lines)
    assert all(r["async/dropped_batches"] == 0 for r in lines)
    assert (out / "done.json").is_file()
