"""The micro world the trainer tests train from, and the settings and helpers they share.

A micro base model is a few pretraining steps of the tiny world (:func:`build_world`, seconds):
its outputs are near-random, so the real grader scores them 0 but for luck. Tests that need
rewards script them (``scripted_rollouts``) or grade with :func:`fake_grade`. The ``world``
fixture of tests/runtime/conftest.py builds one per test session.

The settings below give runs of a few seconds: few eval problems, short generations, small
batches. ``run_trainer`` runs one trainer in-process and returns its metrics lines.
"""

from __future__ import annotations

import json
from pathlib import Path

from reasoning_core.runtime.run.metrics import read_metrics, without_time
from reasoning_core.runtime.tinyworld import main as tiny_world_main
from reasoning_core.runtime.training.policy import lr_factor

WORLD = ["steps=6", "batch_size=8", "tokenizer_docs=2000", "log_every=2"]

# Settings for runs of a few seconds: few eval problems, short generations, small batches.
COMMON = {
    "task": "arithmetic",
    "eval_examples": 8,
    "eval_max_tokens": 40,
    "progress": False,
    "save_every": 1,
    "seed": 3,
}
GRPO = {
    **COMMON,
    "n_grpo_steps": 4,
    "lr": 1e-3,
    "rollout_batch_size": 16,
    "group_size": 4,
    "train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "sampling_max_tokens": 40,
    "loss_type": "grpo_clip",
    "eval_every": 2,
    "train_examples": 64,
}
SFT = {
    **COMMON,
    "sft_pool_size": 24,
    "epochs": 1,
    "batch_size": 4,
    "gradient_accumulation_steps": 2,
    "lr": 1e-3,
    "eval_every": 3,
}
EI = {
    **COMMON,
    "n_ei_steps": 2,
    "ei_batch_size": 16,
    "group_size": 4,
    "batch_size": 4,
    "gradient_accumulation_steps": 1,
    "sampling_max_tokens": 40,
    "train_examples": 32,
    "lr": 1e-3,
}
# No evaluation or saving between steps, two eval problems: for tests of what a step computes.
QUIET = {"eval_at_start": False, "eval_every": 0, "save_every": 0, "eval_examples": 2}


def build_world(out: Path) -> Path:
    """Pretrain the micro base model (WORLD settings) into ``out``; return ``out``."""
    assert tiny_world_main([a for p in WORLD for a in ("--set", p)] + ["--out", str(out)]) == 0
    return out


def sets(values: dict) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def run_trainer(module, cfg: dict, world: Path, out: Path) -> list[dict]:
    """``module.main`` (sft, ei or grpo) with ``cfg`` on ``world`` into ``out``, which must
    succeed; its metrics lines."""
    assert module.main([*sets({**cfg, "model_path": str(world)}), "--out", str(out)]) == 0
    return read_metrics(out)


def train_lines(records: list[dict]) -> list[dict]:
    return [r for r in without_time(records) if r["split"] == "train"]


def fake_grade(reward_fn, responses, ground_truths):
    """A stand-in grader (a function of the response text), so that every run, even from the
    barely trained micro world, has groups with different rewards and non-binary rewards:
    reward = answer_reward in {0, 1/3, 2/3, 1} by response length; format_reward 1 also on
    a share of the zero-reward responses (so 'well formatted' is not 'correct')."""
    out = []
    for text in responses:
        answer = (len(text) % 4) / 3
        fmt = 1.0 if answer > 0 or len(text) % 8 == 0 else 0.0
        out.append({"reward": answer, "format_reward": fmt, "answer_reward": answer})
    return out


def record_calls(monkeypatch, module, name: str) -> list[tuple]:
    """Wrap ``module.<name>``; return the list of the positional arguments of each call."""
    calls: list[tuple] = []
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def expected_lrs(cfg: dict, total_steps: int) -> list[float]:
    """The learning rate of each of ``total_steps`` optimizer steps under ``cfg``'s schedule."""
    kw = {"total_steps": total_steps, "warmup_steps": cfg["warmup_steps"], "min_ratio": 0.0}
    return [cfg["lr"] * lr_factor(s, kind=cfg["lr_scheduler"], **kw) for s in range(total_steps)]


def write_addition_pairs(path: Path, count: int, lead: str = "") -> Path:
    """A JSONL file of ``count`` preference pairs "What is i + i?": chosen the right sum,
    rejected one more, each after ``lead`` (a leading space or nothing)."""
    rows = [
        {
            "prompt": f"What is {i} + {i}?",
            "chosen": f"{lead}{2 * i}",
            "rejected": f"{lead}{2 * i + 1}",
        }
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
