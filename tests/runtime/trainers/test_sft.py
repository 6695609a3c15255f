"""The SFT trainer on the micro world: the examples it trains on, its epochs, and its first
step against a from-scratch computation."""

from __future__ import annotations

import json

import pytest
from micro_world import (
    QUIET,
    SFT,
    expected_lrs,
    record_calls,
    run_trainer,
    train_lines,
)

from reasoning_core.runtime.trainers import sft


def test_sft_filter_correct_trains_on_the_correct_examples_only(world, tmp_path, monkeypatch):
    """filter_correct keeps exactly the pool's examples that the task's reward scores 1 (the
    arithmetic pool has wrong traces on purpose), and SFT trains on those."""
    import envs

    pool = envs.get_task("arithmetic").sft_pool(24, template="r1_zero")
    correct = [
        e for e in pool if envs.r1_zero_reward_fn(e["response"], e["ground_truth"])["reward"] == 1.0
    ]
    assert 0 < len(correct) < len(pool)
    tokenized = record_calls(monkeypatch, sft, "tokenize_pairs")
    cfg = {**SFT, **QUIET, "sft_pool_size": 24, "filter_correct": True}
    run_trainer(sft, cfg, world, tmp_path / "run")
    done = json.loads((tmp_path / "run" / "done.json").read_text())
    assert (done["pool_examples"], done["train_examples"]) == (24, len(correct))
    assert tokenized[0][1] == [e["response"] for e in correct]


def test_sft_epochs_visit_every_example_once_in_a_new_order(world, tmp_path, monkeypatch):
    """Each epoch trains on every example once, in an order drawn anew per epoch; the learning
    rate follows the warm-up and cosine schedule."""
    cfg = {
        **SFT,
        **QUIET,
        "sft_pool_size": 8,
        "batch_size": 4,
        "epochs": 2,
        "lr_scheduler": "cosine",
        "warmup_steps": 1,
    }
    calls = record_calls(monkeypatch, sft, "sft_update")
    train = train_lines(run_trainer(sft, cfg, world, tmp_path / "run"))
    rows = [list(args[4]) for args in calls]
    assert [r["epoch"] for r in train] == [0.5, 1.0, 1.5, 2.0]
    epochs = [rows[0] + rows[1], rows[2] + rows[3]]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(8))
    assert epochs[0] != epochs[1]  # reshuffled per epoch
    assert [r["lr"] for r in train] == pytest.approx(expected_lrs(cfg, 4))


def test_sft_step_matches_a_reference_computation(world, tmp_path, monkeypatch):
    """The first SFT update's loss and gradient norm equal a from-scratch computation:
    per-example summed response NLL over ``normalize_constant``, averaged over the batch (the
    micro-batch losses weighted by their share, not summed)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasoning_core import tokenize_prompt_and_output

    cfg = {**SFT, **QUIET, "sft_pool_size": 4, "normalize_constant": 3.0}
    selected: list[list[dict]] = []
    real = sft.select_examples

    def select(*args):
        examples, info = real(*args)
        selected.append(examples)
        return examples, info

    monkeypatch.setattr(sft, "select_examples", select)
    (line,) = train_lines(run_trainer(sft, cfg, world, tmp_path / "run"))
    (examples,) = selected
    model = AutoModelForCausalLM.from_pretrained(world, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(world)
    batch = tokenize_prompt_and_output(
        [e["prompt"] for e in examples], [e["response"] for e in examples], tokenizer
    )
    logits = model(batch["input_ids"]).logits
    log_probs = torch.log_softmax(logits, -1).gather(-1, batch["labels"][..., None])[..., 0]
    nll = -(log_probs * batch["response_mask"]).sum(1) / cfg["normalize_constant"]
    loss = nll.mean()
    loss.backward()
    grad_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
    assert line["loss"] == pytest.approx(float(loss.detach()), rel=1e-4)
    assert line["grad_norm"] == pytest.approx(float(grad_norm), rel=1e-4)


def test_max_examples_is_a_seeded_subset_of_the_pool():
    """The data-size ablation trains each seed on its own random subset (stream SFT_SUBSET),
    in pool order: not the pool's first examples for every seed."""
    pool = [{"prompt": f"p{i}", "response": f"r{i}", "ground_truth": str(i)} for i in range(32)]

    def picked(seed: int) -> list[str]:
        cfg = sft.SFTConfig(seed=seed, max_examples=8)
        examples, info = sft.select_examples(cfg, task=None, examples=pool)
        assert (info["pool_examples"], info["train_examples"]) == (32, 8)
        return [e["prompt"] for e in examples]

    subsets = {seed: picked(seed) for seed in (0, 1, 2)}
    for names in subsets.values():
        assert len(set(names)) == 8 and names == sorted(names, key=lambda n: int(n[1:]))
    assert len({tuple(names) for names in subsets.values()}) == 3
    assert picked(1) == subsets[1]  # the same seed, the same subset
