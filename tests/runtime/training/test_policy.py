"""The policy, its optimizer and schedule (reasoning_core.runtime.training.policy): every optimizer
setting reaches AdamW, the schedule's shape, no KV cache in training forwards, and the compiled
training forward."""

from __future__ import annotations

import shutil

import pytest
from micro_world import (
    SFT,
    run_trainer,
    train_lines,
)

from reasoning_core.runtime.trainers import sft


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    from reasoning_core.runtime.training.policy import lr_factor

    kw = {"total_steps": 100, "warmup_steps": 5, "min_ratio": 0.1}
    assert [lr_factor(s, kind="constant", **kw) for s in range(6)] == [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]
    assert lr_factor(5, kind="cosine", **kw) == pytest.approx(1.0)
    assert lr_factor(100, kind="cosine", **kw) == pytest.approx(0.1)
    # 95 decay steps after the warm-up, 47 of them done at step 52.
    assert lr_factor(52, kind="linear", **kw) == pytest.approx(0.1 + 0.9 * (1 - 47 / 95))
    assert lr_factor(500, kind="linear", **kw) == pytest.approx(0.1)


def test_optimizer_takes_every_setting():
    """AdamW gets the configured rate, betas, epsilon and weight decay, and the schedule's
    warm-up starts from lr / warmup_steps."""
    import torch

    from reasoning_core.runtime.training.policy import make_optimizer, make_scheduler
    from reasoning_core.runtime.training.settings import CommonConfig

    model = torch.nn.Linear(3, 2)
    cfg = CommonConfig(lr=0.3, betas=[0.5, 0.7], adam_eps=1e-3, weight_decay=0.25, warmup_steps=3)
    optimizer = make_optimizer(model, cfg)
    make_scheduler(optimizer, cfg, total_steps=10)
    (group,) = optimizer.param_groups
    assert group["betas"] == (0.5, 0.7)
    assert (group["eps"], group["weight_decay"], group["initial_lr"]) == (1e-3, 0.25, 0.3)
    assert group["lr"] == pytest.approx(0.1)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_policy_forward_keeps_no_kv_cache(world, checkpointing):
    """Training forwards build no KV cache (with or without gradient checkpointing)."""
    import torch

    from reasoning_core.runtime.training.policy import load_policy
    from reasoning_core.runtime.training.settings import CommonConfig

    cfg = CommonConfig(model_path=str(world), gradient_checkpointing=checkpointing)
    model, _ = load_policy(cfg)
    out = model(torch.tensor([[1, 2, 3, 4]]))
    assert out.past_key_values is None
    assert model.is_gradient_checkpointing is checkpointing
    out.logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("cc", "gcc", "clang")),
    reason="torch.compile's CPU backend needs a C compiler",
)
def test_compiled_training_forward_gives_the_eager_updates(world, tmp_path, monkeypatch):
    """compile: true sends the training forwards (and only those) through torch.compile; the
    updates match the eager run's up to compiled float rounding."""
    from reasoning_core.runtime.training import batching

    calls: list[str] = []
    real_forward = batching.training_forward

    def forward(model):
        wrapped = real_forward(model)
        calls.append(type(wrapped).__name__)
        return wrapped

    monkeypatch.setattr(batching, "training_forward", forward)
    cfg = {**SFT, "eval_at_start": False, "eval_every": 0, "save_every": 0}
    eager = train_lines(run_trainer(sft, cfg, world, tmp_path / "eager"))
    assert set(calls) == {"Qwen2ForCausalLM"}
    calls.clear()
    compiled = train_lines(run_trainer(sft, {**cfg, "compile": True}, world, tmp_path / "compiled"))
    assert set(calls) == {"OptimizedModule"}
    assert len(compiled) == len(eager) > 2
    for a, b in zip(eager, compiled, strict=True):
        for key in ("loss", "grad_norm", "entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-3), key
