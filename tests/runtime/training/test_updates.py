"""What an optimizer step does to the weights (reasoning_core.runtime.training.updates): it moves them
by the clipped gradient, and each update starts from a zero gradient."""

from __future__ import annotations

import pytest
from micro_world import (
    GRPO,
    QUIET,
    SFT,
    fake_grade,
    run_trainer,
    train_lines,
)

from reasoning_core.runtime.trainers import grpo, sft
from reasoning_core.runtime.training import rollouts as sampling


@pytest.mark.parametrize("module", ["sft", "grpo"])
def test_an_update_moves_the_weights_by_the_clipped_gradient(world, tmp_path, monkeypatch, module):
    """With AdamW's epsilon far above every gradient entry its first step is plain gradient
    descent, ``lr / eps * g``; with ``lr == eps`` the weights move by the gradient after
    clipping to ``max_grad_norm``."""
    import torch
    from safetensors.torch import load_file

    optim = {"lr": 1e4, "adam_eps": 1e4, "max_grad_norm": 0.01}
    if module == "sft":
        cfg = {**SFT, **QUIET, "sft_pool_size": 4, **optim}
    else:
        monkeypatch.setattr(sampling, "grade", fake_grade)
        cfg = {**GRPO, **QUIET, "n_grpo_steps": 1, "rollout_batch_size": 8, **optim}
    mod = {"sft": sft, "grpo": grpo}[module]
    (line,) = train_lines(run_trainer(mod, cfg, world, tmp_path / "run"))
    assert line["grad_norm"] > 10 * optim["max_grad_norm"]  # so the clipping shows
    before = load_file(world / "model.safetensors")
    after = load_file(tmp_path / "run" / "checkpoint" / "model.safetensors")
    moved = torch.sqrt(sum(((after[k] - before[k]).double() ** 2).sum() for k in before))
    assert float(moved) == pytest.approx(optim["max_grad_norm"], rel=0.01)


@pytest.mark.parametrize("module", ["sft", "grpo"])
def test_each_update_starts_from_a_zero_gradient(world, tmp_path, monkeypatch, module):
    """Two epochs over one batch with a negligible learning rate: the second update sees the
    same gradient as the first (none left over from the first step)."""
    optim = {"lr": 1e-12, "max_grad_norm": 1e9}
    if module == "sft":
        cfg = {**SFT, **QUIET, "sft_pool_size": 4, "epochs": 2, **optim}
    else:
        monkeypatch.setattr(sampling, "grade", fake_grade)
        cfg = {**GRPO, **QUIET, "n_grpo_steps": 1, "rollout_batch_size": 8}
        cfg |= {"epochs_per_rollout_batch": 2, "loss_type": "reinforce_with_baseline", **optim}
    mod = {"sft": sft, "grpo": grpo}[module]
    first, second = train_lines(run_trainer(mod, cfg, world, tmp_path / "run"))
    assert first["grad_norm"] > 0
    assert second["grad_norm"] == pytest.approx(first["grad_norm"], rel=1e-4)


# The modules a GRPO optimizer step runs through, from grpo.train to the core's losses.
UPDATE_PATH = (
    "reasoning_core/runtime/trainers/grpo.py",
    "reasoning_core/runtime/training/updates.py",
    "reasoning_core/runtime/training/batching.py",
    "reasoning_core/runtime/training/engine_check.py",
    "reasoning_core/losses.py",
    "reasoning_core/correction.py",
    "reasoning_core/logprobs.py",
    "reasoning_core/masked.py",
    "reasoning_core/advantages.py",
)


@pytest.mark.parametrize("path", UPDATE_PATH)
def test_no_function_on_the_update_path_is_defined_inside_another(path):
    """Every step of an update is a module-level function a reader can find by name (the
    out-of-memory retry takes the accumulation function and its arguments, no closure)."""
    import ast

    from project_root import ROOT

    tree = ast.parse((ROOT / path).read_text())
    nested = [
        f"{outer.name} defines {getattr(inner, 'name', 'a lambda')} (line {inner.lineno})"
        for outer in ast.walk(tree)
        if isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(outer)
        if inner is not outer
        and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    ]
    assert not nested, nested
