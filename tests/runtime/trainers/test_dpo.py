"""The DPO trainer on the micro world: verified pairs in rounds, validation and the best
checkpoint, pairs from a JSONL file, resume after a kill, and its settings checks.

The micro world earns rewards only by luck, so runs with verified pairs use scripted rollouts
(one correct response per question, ``scripted_rollouts.py``): every question with a wrong
sample then gives a pair."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import scripted_rollouts
import torch
from micro_world import COMMON, run_trainer, sets, write_addition_pairs
from project_root import ROOT

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.metrics import read_metrics, without_time
from reasoning_core.runtime.trainers import dpo, dpo_pairs

DPO = {
    **COMMON,
    "pairs": "verified",
    "n_dpo_rounds": 2,
    "dpo_questions": 16,
    "group_size": 4,
    "pairs_per_question": 1,
    "train_examples": 32,
    "sampling_max_tokens": 24,
    "batch_size": 4,
    "gradient_accumulation_steps": 2,
    "lr": 1e-4,
    "beta": 0.5,
    "val_pairs": 4,
    "val_every": 1,
    "eval_every": 1,
    "eval_examples": 4,
    "eval_max_tokens": 24,
    "save_every": 1,
}


def _train(records):
    return [r for r in records if r["split"] == "train"]


def test_verified_rounds_log_pairs_steps_and_validation(world, tmp_path, monkeypatch):
    scripted_rollouts.install(monkeypatch)
    batches = []
    real = dpo_pairs.sample_and_grade

    def recording(*args, **kwargs):
        batches.append(real(*args, **kwargs))
        return batches[-1]

    monkeypatch.setattr(dpo_pairs, "sample_and_grade", recording)
    records = run_trainer(dpo, DPO, world, tmp_path / "run")
    rounds = [r for r in _train(records) if "pairs" in r]
    assert [r["dpo_round"] for r in rounds] == [1, 2]
    for line, batch in zip(rounds, batches, strict=True):  # the share cut off at max_tokens
        reasons = [c.finish_reason for c in batch.completions]
        assert line["rollout/truncated"] == reasons.count("length") / len(reasons)
    assert all(r["sampled_responses"] == 16 * 4 for r in rounds)
    assert rounds[-1]["sampled_total"] == 2 * 16 * 4
    assert rounds[0]["train_pairs"] == rounds[0]["pairs"] - 4  # the validation pairs held out
    steps = [r for r in _train(records) if "grad_norm" in r]
    assert len(steps) >= 2 and any(r["grad_norm"] > 0 for r in steps)
    # The first step's loss is taken at policy == reference: log 2, margin 0.
    assert math.isclose(steps[0]["dpo_loss"], math.log(2.0), abs_tol=1e-4)
    assert abs(steps[0]["margin"]) < 1e-4
    assert all("val/preference_accuracy" in r for r in steps)  # val_every 1
    done = json.loads((tmp_path / "run" / "done.json").read_text())
    assert done["sampled_responses"] == 2 * 16 * 4 and done["val_pairs"] == 4
    assert (tmp_path / "run" / "checkpoint").is_dir()
    assert (tmp_path / "run" / "best_checkpoint").is_dir()
    assert [r["split"] for r in records].count("eval") == 3  # start, after round 1, the end


def test_best_checkpoint_is_the_policy_with_the_best_validation_accuracy(
    world, tmp_path, monkeypatch
):
    """The best validation preference accuracy is the first maximum over the validation
    lines, and the policy in best_checkpoint/ scores exactly it on the held-out pairs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    scripted_rollouts.install(monkeypatch)
    out = tmp_path / "run"
    records = run_trainer(dpo, {**DPO, "lr": 3e-3}, world, out)
    vals = [(r["step"], r["val/preference_accuracy"]) for r in _train(records) if "val/loss" in r]
    best = max(acc for _, acc in vals)
    first = next(step for step, acc in vals if acc == best)
    done = json.loads((out / "done.json").read_text())
    assert done["best_val_preference_accuracy"] == best and done["best_step"] == first
    cfg = dpo.DPOConfig(**{**DPO, "model_path": str(world)})
    tokenizer = AutoTokenizer.from_pretrained(world)
    reference = AutoModelForCausalLM.from_pretrained(world).eval()
    held = [json.loads(x) for x in (out / "pairs" / "validation.jsonl").read_text().splitlines()]
    pairs = dpo.PairTokens(held, tokenizer, reference, cfg)

    class T:  # what validate_pairs reads of a Training
        model = AutoModelForCausalLM.from_pretrained(out / "best_checkpoint")

    assert dpo.validate_pairs(T, pairs, cfg)["val/preference_accuracy"] == best
    T.model = AutoModelForCausalLM.from_pretrained(out / "checkpoint")
    last = dpo.validate_pairs(T, pairs, cfg)
    assert last["val/preference_accuracy"] == vals[-1][1]


def test_jsonl_pairs_with_the_alpaca_template_and_eos(world, tmp_path):
    path = write_addition_pairs(tmp_path / "pairs.jsonl", 10)
    cfg = {**DPO, "pairs": "jsonl", "train_pairs": str(path), "n_dpo_rounds": 1}
    cfg.update(pair_template="alpaca", append_eos=True, val_pairs=2, epochs=2, eval_at_start=False)
    records = run_trainer(dpo, cfg, world, tmp_path / "run")
    first = _train(records)[0]
    assert first["pairs"] == 10 and first["train_pairs"] == 8
    assert len([r for r in _train(records) if "grad_norm" in r]) == 2 * 2  # 8 pairs / 4, 2 epochs
    saved = (tmp_path / "run" / "pairs" / "round_0.jsonl").read_text().splitlines()
    assert json.loads(saved[0])["prompt"].startswith("Below is an instruction")


def _subprocess(world, out, exit_after):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if exit_after is not None:
        env["RRL_EXIT_AFTER_STEP"] = str(exit_after)
    cmd = [sys.executable, str(ROOT / "tests" / "helpers" / "scripted_rollouts.py"), "dpo"]
    cmd += [*sets({**DPO, "model_path": str(world)}), "--out", str(out)]
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_pairs_sampled_apart_train_the_run_the_trainer_would_sample(world, tmp_path, monkeypatch):
    """sample_only saves round 1's pairs; a run reading them (first_round_pairs) logs what a
    run sampling them itself logs, and samples round 2 itself. Pairs sampled under other
    settings that change them (the seed, the group size) are refused, naming the setting;
    a training setting (beta) may differ."""
    scripted_rollouts.install(monkeypatch)
    inline = run_trainer(dpo, DPO, world, tmp_path / "inline")
    folder = tmp_path / "pairs"
    assert dpo.main([*sets({**DPO, "sample_only": True, "model_path": str(world)}),
                     "--out", str(folder)]) == 0  # fmt: skip
    done = json.loads((folder / "done.json").read_text())
    assert done["method"] == "dpo_pairs" and done["sampled_responses"] == 16 * 4
    assert not (folder / "checkpoint").exists()  # nothing trained
    records = run_trainer(
        dpo, {**DPO, "first_round_pairs": str(folder)}, world, tmp_path / "shared"
    )
    assert without_time(records) == without_time(inline)
    assert (tmp_path / "shared" / "pairs" / "round_0.jsonl").read_text() == (
        tmp_path / "inline" / "pairs" / "round_0.jsonl"
    ).read_text()
    assert json.loads((tmp_path / "shared" / "done.json").read_text())["sampled_responses"] == (
        2 * 16 * 4
    )
    beta = run_trainer(
        dpo, {**DPO, "beta": 0.1, "first_round_pairs": str(folder)}, world, tmp_path / "beta"
    )
    assert [r for r in _train(beta) if "pairs" in r][0]["pairs"] == done["pairs"]
    for change in ({"seed": 1}, {"group_size": 8}):
        cfg = dpo.DPOConfig(**{**DPO, **change, "model_path": str(world),
                               "first_round_pairs": str(folder)})  # fmt: skip
        with pytest.raises(ConfigError, match=f"sampled with other settings: {next(iter(change))}"):
            dpo_pairs.read_first_round(cfg)
    with pytest.raises(ConfigError, match="no finished sample_only run"):
        dpo_pairs.read_first_round(
            dpo.DPOConfig(**{**DPO, "model_path": str(world), "first_round_pairs": str(tmp_path)})
        )


def test_killed_run_resumes_to_the_same_metrics_and_weights(world, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    scripted_rollouts.install(monkeypatch)
    reference = run_trainer(dpo, DPO, world, tmp_path / "ref")
    steps = [r["step"] for r in _train(reference) if "grad_norm" in r]
    first_round = [r for r in _train(reference) if r.get("dpo_round") == 2 and "pairs" in r]
    kill_at = first_round[0]["step"] + 1  # in the second round, after its first step
    assert kill_at < max(steps)
    out = tmp_path / "killed"
    run = _subprocess(world, out, exit_after=kill_at)
    assert run.returncode == 3, run.stderr[-2000:]
    run = _subprocess(world, out, exit_after=None)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "resumed from" in run.stderr
    assert without_time(read_metrics(out)) == without_time(reference)
    want, got = (
        load_file(tmp_path / "ref" / "checkpoint" / "model.safetensors"),
        load_file(out / "checkpoint" / "model.safetensors"),
    )
    assert all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pairs": "jsonl"}, "train_pairs"),
        ({"pairs": "hh"}, "hh_dir"),
        ({"pairs": "jsonl", "train_pairs": "x.jsonl", "n_dpo_rounds": 2}, "n_dpo_rounds"),
        ({"beta": 0.0}, "beta"),
        ({"nll_weight": -1.0}, "nll_weight"),
        (
            {"pairs": "jsonl", "train_pairs": "x", "n_dpo_rounds": 1, "sample_only": True},
            "sample_only",
        ),
        ({"batch_size": 6, "gradient_accumulation_steps": 4}, "batch_size"),
        ({"pair_template": "alpaca", "append_eos": True}, "verified pairs are already prompted"),
        (
            {"pairs": "jsonl", "train_pairs": "x", "n_dpo_rounds": 1, "pair_template": "alpaca"},
            "append_eos: true",
        ),
    ],
)
def test_bad_settings_are_named(world, change, message):
    with pytest.raises(ConfigError, match=message):
        dpo.DPOConfig(**{**DPO, "model_path": str(world), **change}).validate()


def test_too_few_pairs_for_validation_is_named(world, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "q", "chosen": "a", "rejected": "b"}) + "\n")
    cfg = {**DPO, "pairs": "jsonl", "train_pairs": str(path), "n_dpo_rounds": 1}
    argv = [*sets({**cfg, "model_path": str(world)}), "--out", str(tmp_path / "run")]
    assert dpo.main(argv) == 2


@pytest.mark.parametrize("name", ["tiny", "gpu_math", "gpu_hh_dpo"])
def test_the_shipped_dpo_sections_are_valid_settings(name):
    """The dpo sections of the methods files name only DPO settings with the right types; the
    HH recipe is the supplement's (RMSprop, lr 1e-6, beta 0.1, batch 64 one pair at a time)."""
    from reasoning_core.runtime.settings.config import build_config, load_yaml

    path = ROOT / "workflow" / "config" / "methods" / f"{name}.yaml"
    section = load_yaml(path, "dpo")
    # Validated on this machine: the shipped base, the CPU (the GPU sections name cuda).
    here = {"model_path": str(ROOT / "workflow/resources/tiny_world"), "device": "cpu"}
    here.update(reference_device="", hh_dir="HH" if section.get("pairs") == "hh" else "")
    build_config(dpo.DPOConfig, {**section, **here}, str(path))
    cfg = dpo.DPOConfig(**section)
    if name == "gpu_hh_dpo":
        assert (cfg.pairs, cfg.pair_template, cfg.append_eos) == ("hh", "alpaca", True)
        assert (cfg.optimizer, cfg.lr, cfg.beta) == ("rmsprop", 1e-6, 0.1)
        assert (cfg.batch_size, cfg.micro_batch_size, cfg.val_pairs) == (64, 1, 200)
        assert cfg.reference_device != cfg.device
