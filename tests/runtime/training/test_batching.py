"""CUDA out-of-memory back-off (reasoning_core.runtime.training.batching), simulated: the forward raises
torch.OutOfMemoryError for micro batches above a size, as a GPU would for a micro batch that
does not fit."""

from __future__ import annotations

import pytest
from micro_world import (
    GRPO,
    SFT,
    fake_grade,
    run_trainer,
    train_lines,
)

from reasoning_core.runtime.trainers import grpo, sft
from reasoning_core.runtime.training import rollouts as sampling


def test_smaller_micro_batch_keeps_dividing_the_batch():
    from reasoning_core.runtime.training.batching import smaller_micro_batch

    assert [smaller_micro_batch(s) for s in (2, 3, 4, 6, 8, 9, 12, 25, 7)] == [
        1,
        1,
        2,
        3,
        4,
        3,
        6,
        5,
        1,
    ]
    for size in range(2, 200):
        smaller = smaller_micro_batch(size)
        assert size % smaller == 0 and smaller < size
    with pytest.raises(ValueError):
        smaller_micro_batch(1)


def test_micro_batch_size_backs_off_until_the_pass_fits(capsys):
    import torch

    from reasoning_core.runtime.training.batching import MicroBatchSize

    tried, resets = [], []

    def step(size: int) -> str:
        tried.append(size)
        if size > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return f"done at {size}"

    micro = MicroBatchSize(8, name="grpo")
    assert micro.call(step, reset=lambda: resets.append(1)) == "done at 2"
    assert tried == [8, 4, 2] and len(resets) == 2
    assert micro.size == 2 and micro.changed
    err = capsys.readouterr().err
    assert "[grpo] CUDA out of memory at micro batch 8" in err and "micro batch 4" in err
    # The smaller size is kept: the next pass starts there.
    tried.clear()
    micro.call(step)
    assert tried == [2]

    # Nothing fits: the error propagates at micro batch 1, with advice.
    with pytest.raises(torch.OutOfMemoryError) as info:
        MicroBatchSize(4).call(lambda size: step(size * 8))
    assert "gradient_checkpointing" in "".join(info.value.__notes__)
    # Back-off off: the first error propagates and the size stays.
    off = MicroBatchSize(8, backoff=False)
    with pytest.raises(torch.OutOfMemoryError) as info:
        off.call(step)
    assert off.size == 8 and "'oom_backoff' is off" in "".join(info.value.__notes__)


def _oom_above(monkeypatch, max_train_rows: int, max_scoring_rows: int) -> None:
    """Make the policy forward raise a CUDA out-of-memory error above a micro-batch size: in
    training passes on every second such micro batch, so the first one's gradient has been
    accumulated when the error comes (the back-off must drop it); in no-gradient passes always.
    """
    import torch

    from reasoning_core.runtime.training import updates

    real = updates.policy_log_probs
    over_limit = [0]

    def forward(model, micro, device, **kw):
        rows = len(micro.rows)
        if torch.is_grad_enabled() and rows > max_train_rows:
            over_limit[0] += 1
            if over_limit[0] % 2 == 0:
                raise torch.OutOfMemoryError(f"simulated: {rows} rows > {max_train_rows}")
        if not torch.is_grad_enabled() and rows > max_scoring_rows:
            raise torch.OutOfMemoryError(f"simulated: {rows} rows > {max_scoring_rows}")
        return real(model, micro, device, **kw)

    monkeypatch.setattr(updates, "policy_log_probs", forward)


def test_sft_backs_off_on_out_of_memory_to_the_same_updates(world, tmp_path, monkeypatch):
    # Reference: micro batch 1 from the start (batch 4, accumulation 4).
    cfg = {**SFT, "eval_at_start": False, "eval_every": 0, "save_every": 0}
    reference = run_trainer(sft, {**cfg, "gradient_accumulation_steps": 4}, world, tmp_path / "ref")
    _oom_above(monkeypatch, max_train_rows=1, max_scoring_rows=64)
    # Micro batch 2: the first micro batch of step 1 runs, the second "does not fit"; the step
    # is redone with micro batch 1, kept from then on.
    backed = run_trainer(sft, {**cfg, "gradient_accumulation_steps": 2}, world, tmp_path / "oom")
    ref_train, oom_train = train_lines(reference), train_lines(backed)
    assert len(oom_train) == len(ref_train) > 2
    assert all(r["micro_batch_size"] == 1 for r in oom_train)
    assert all("micro_batch_size" not in r for r in ref_train)
    for a, b in zip(ref_train, oom_train, strict=True):
        for key in ("loss", "grad_norm", "entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)


def test_grpo_backs_off_on_out_of_memory_to_the_same_first_update(world, tmp_path, monkeypatch):
    # Reference: micro batch 2 from the start (train batch 8, accumulation 4); grpo_clip, so
    # the no-gradient old-log-prob pass (micro batch 4) backs off too, to 2.
    cfg = {**GRPO, "n_grpo_steps": 2, "eval_at_start": False, "eval_every": 0, "save_every": 0}
    # Stand-in rewards (see fake_grade): with the real grader these two steps had reward 0,
    # hence zero advantages and zero gradients, and the comparison below held for any update.
    monkeypatch.setattr(sampling, "grade", fake_grade)
    reference = run_trainer(grpo, {**cfg, "gradient_accumulation_steps": 4}, world, tmp_path / "r")
    _oom_above(monkeypatch, max_train_rows=2, max_scoring_rows=2)
    backed = run_trainer(grpo, {**cfg, "gradient_accumulation_steps": 2}, world, tmp_path / "oom")
    ref_train, oom_train = train_lines(reference), train_lines(backed)
    assert len(oom_train) == len(ref_train) == 4
    assert [r["micro_batch_size"] for r in oom_train] == [2, 2, 2, 2]
    # The first update comes from the same rollouts and weights: the same loss and gradient.
    # (Later rollouts may differ in the last bits, so only the first is compared.)
    first_ref, first_oom = ref_train[0], oom_train[0]
    assert first_ref["grad_norm"] > 0
    for key in ("loss", "grad_norm", "entropy", "clip_fraction", "reward"):
        assert first_oom[key] == pytest.approx(first_ref[key], rel=1e-4, abs=1e-6), key
