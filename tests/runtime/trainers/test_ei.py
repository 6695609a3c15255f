"""The expert-iteration trainer on the micro world: what it keeps of its rollouts and how it
trains on them."""

from __future__ import annotations

import dataclasses

import pytest
import scripted_rollouts
from micro_world import (
    EI,
    QUIET,
    fake_grade,
    record_calls,
    run_trainer,
    train_lines,
)
from transformers import AutoTokenizer

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation import generations
from reasoning_core.runtime.trainers import ei
from reasoning_core.runtime.training import rollouts as sampling
from reasoning_core.runtime.training import updates


def test_ei_loss_is_divided_by_its_normalize_constant(world, tmp_path, monkeypatch):
    """The same EI iteration (same rollouts, same weights) with normalize_constant 4 logs a
    first loss and gradient norm a quarter of those with 1 (sum NLL / constant)."""
    cfg = {**EI, **QUIET, "n_ei_steps": 1, "ei_batch_size": 4, "sampling_max_tokens": 8}
    scripted_rollouts.install(monkeypatch)  # at least one kept rollout per question
    lines = {}
    for c in (1.0, 4.0):
        train = run_trainer(ei, {**cfg, "normalize_constant": c}, world, tmp_path / f"c{c}")
        lines[c] = next(r for r in train if r["split"] == "train" and "loss" in r)
    assert lines[1.0]["loss"] > 0
    assert lines[4.0]["loss"] == pytest.approx(lines[1.0]["loss"] / 4, rel=1e-5)
    assert lines[4.0]["grad_norm"] == pytest.approx(lines[1.0]["grad_norm"] / 4, rel=1e-4)


def test_ei_trains_on_the_correct_rollouts_for_every_sft_epoch(world, tmp_path, monkeypatch):
    """EI keeps exactly the rollouts with reward 1 (not merely well formatted ones) and runs
    ``sft_epochs`` epochs of SFT over them."""
    cfg = {**EI, **QUIET, "n_ei_steps": 1, "ei_batch_size": 8, "sft_epochs": 2}
    graded: list[tuple[list[str], list[dict]]] = []

    def grade(reward_fn, responses, ground_truths):
        scores = fake_grade(reward_fn, responses, ground_truths)
        graded.append((list(responses), scores))
        return scores

    monkeypatch.setattr(sampling, "grade", grade)
    tokenized = record_calls(monkeypatch, ei, "tokenize_pairs")
    updates = record_calls(monkeypatch, ei, "sft_update")
    train = train_lines(run_trainer(ei, cfg, world, tmp_path / "run"))
    ((responses, scores),) = graded
    correct = [r for r, s in zip(responses, scores, strict=True) if s["reward"] >= 1.0]
    formatted_only = [s for s in scores if s["format_reward"] >= 1.0 and s["reward"] < 1.0]
    assert correct and formatted_only  # the stand-in grader tells the two apart here
    assert train[0]["kept"] == len(correct)
    assert tokenized[-1][1] == correct  # the SFT batch: the correct responses, in order
    steps_per_epoch = -(-len(correct) // cfg["batch_size"])
    assert len(updates) == len([r for r in train if "loss" in r]) == 2 * steps_per_epoch
    for epoch in range(2):
        rows = [
            i
            for args in updates[epoch * steps_per_epoch : (epoch + 1) * steps_per_epoch]
            for i in args[4]
        ]
        assert sorted(rows) == list(range(len(correct))), epoch


def test_ei_rollout_entropy_comes_from_the_engine_or_else_a_forward(world, tmp_path, monkeypatch):
    """``rollout/entropy`` is the token-weighted mean of the engine's per-token entropies over
    each response's tokens (the rollouts' no-gradient forward, run for the engine check's
    log-probs, computes no entropy) when the engine returns them; for an engine that returns
    none (vLLM) that forward over the re-tokenized rollouts gives the entropy too."""
    cfg = {**EI, **QUIET, "n_ei_steps": 1, "ei_batch_size": 4, "sampling_max_tokens": 8}
    batches: list[sampling.RolloutBatch] = []

    def keep(*args, **kwargs):
        ro = sampling.sample_and_grade(*args, **kwargs)
        batches.append(ro)
        return ro

    monkeypatch.setattr(ei, "sample_and_grade", keep)
    forwards: list[tuple[bool, float | None]] = []

    def forward(*args, **kwargs):
        log_probs, entropy = updates.score_rollouts(*args, **kwargs)
        forwards.append((args[4], entropy))  # (with_entropy, the entropy)
        return log_probs, entropy

    monkeypatch.setattr(ei, "score_rollouts", forward)
    line = train_lines(run_trainer(ei, cfg, world, tmp_path / "engine"))[0]
    (ro,) = batches
    assert forwards == [(False, None)]  # the log-probs only
    assert len(ro.completions) == len(ro.responses) == 16
    assert all(c.entropies is not None for c in ro.completions)
    tokenizer = AutoTokenizer.from_pretrained(world)
    sums = counts = 0.0
    for c, text in zip(ro.completions, ro.responses, strict=True):
        assert c.text == text
        k = generations.response_token_count(tokenizer, c)
        sums, counts = sums + sum(c.entropies[:k]), counts + k
    assert counts > 0
    assert line["rollout/entropy"] == pytest.approx(sums / counts, rel=1e-9)

    def without_entropies(*args, **kwargs):
        ro = sampling.sample_and_grade(*args, **kwargs)
        ro.completions = [dataclasses.replace(c, entropies=None) for c in ro.completions]
        return ro

    monkeypatch.setattr(ei, "sample_and_grade", without_entropies)
    line = train_lines(run_trainer(ei, cfg, world, tmp_path / "forward"))[0]
    assert len(forwards) == 2 and forwards[1][0]  # the entropy from the policy's forward
    assert line["rollout/entropy"] == forwards[1][1] > 0


def test_ei_rollout_lines_carry_the_truncated_share(world, tmp_path, monkeypatch):
    """The iteration line's `rollout/truncated` is its rollouts' share of finish reason
    `length` (4 tokens: the micro world's answers are cut off, a stop-string end is not)."""
    batches = []
    real = ei.sample_and_grade

    def recording(*args, **kwargs):
        batches.append(real(*args, **kwargs))
        return batches[-1]

    monkeypatch.setattr(ei, "sample_and_grade", recording)
    cfg = {**EI, **QUIET, "n_ei_steps": 1, "ei_batch_size": 4, "sampling_max_tokens": 4}
    line = next(
        r for r in train_lines(run_trainer(ei, cfg, world, tmp_path / "run")) if "kept" in r
    )
    reasons = [c.finish_reason for c in batches[0].completions]
    assert reasons and line["rollout/truncated"] == reasons.count("length") / len(reasons)


def test_every_ei_train_line_carries_the_same_time_keys(world, tmp_path, monkeypatch):
    """An iteration's line and its optimizer steps' lines have the same time/ keys (as
    GRPO's): the rollout's timings on the iteration's line and 0 on the steps', time/train
    the other way round."""
    cfg = {**EI, **QUIET, "ei_batch_size": 4, "sampling_max_tokens": 8}
    scripted_rollouts.install(monkeypatch)  # kept rollouts, so optimizer steps, every round
    timed = [r for r in run_trainer(ei, cfg, world, tmp_path / "run") if r["split"] == "train"]
    rounds = [r for r in timed if "kept" in r]
    steps = [r for r in timed if "loss" in r]
    assert len(rounds) == 2 and steps and len(rounds) + len(steps) == len(timed)
    rollout_keys = ("time/grade", "time/rollout", "time/score", "time/sync")
    assert {tuple(sorted(k for k in r if k.startswith("time/"))) for r in timed} == {
        ("time/elapsed", *rollout_keys, "time/train")
    }
    assert all(r["time/train"] == 0.0 and r["time/rollout"] > 0.0 for r in rounds)
    assert all(r[k] == 0.0 and r["time/train"] > 0.0 for r in steps for k in rollout_keys)


def test_ei_checks_the_first_logprob_check_rows_rollouts_and_trains_the_same(
    world, tmp_path, monkeypatch
):
    """With ``logprob_check_rows`` 4 the check's forward scores the round's first 4 rollouts
    only (the engine's own entropies serve ``rollout/entropy``), every update and loss is the
    unsampled run's, and engine log-probs off by one nat show in the check exactly when they
    are in those rows; with an engine that gives no entropies the forward scores every
    rollout, for the entropy."""
    cfg = {**EI, **QUIET, "n_ei_steps": 1, "ei_batch_size": 4, "sampling_max_tokens": 8}
    scripted_rollouts.install(monkeypatch)  # kept rollouts, so optimizer steps

    def with_entropies(*args, **kwargs):  # the scripted answers carry none of their own
        ro = sampling.sample_and_grade(*args, **kwargs)
        ro.completions = [
            c if c.entropies else dataclasses.replace(c, entropies=[0.0] * len(c.token_ids))
            for c in ro.completions
        ]
        return ro

    monkeypatch.setattr(ei, "sample_and_grade", with_entropies)
    scored: list[int] = []

    def forward(*args, **kwargs):
        scored.append(args[1].rows)
        return updates.score_rollouts(*args, **kwargs)

    monkeypatch.setattr(ei, "score_rollouts", forward)
    every = run_trainer(ei, cfg, world, tmp_path / "all")
    sample = run_trainer(ei, {**cfg, "logprob_check_rows": 4}, world, tmp_path / "four")
    assert scored == [16, 4]

    def without(line: dict) -> dict:
        return {k: v for k, v in line.items() if not k.startswith(("time/", "rollout/logprob"))}

    assert [without(r) for r in sample] == [without(r) for r in every]
    assert any("loss" in r for r in sample)
    assert train_lines(sample)[0]["rollout/logprob_diff_mean"] < 1e-3

    def shifted_from(first: int):  # engine log-probs 1 nat off from rollout `first` on
        def sample(*args, **kwargs):
            ro = with_entropies(*args, **kwargs)
            ro.completions = [
                c if i < first else dataclasses.replace(c, logprobs=[x - 1 for x in c.logprobs])
                for i, c in enumerate(ro.completions)
            ]
            return ro

        return sample

    def first_diff(first: int, rows: int | None) -> float:
        monkeypatch.setattr(ei, "sample_and_grade", shifted_from(first))
        out = tmp_path / f"shift{first}-{rows}"
        line = train_lines(run_trainer(ei, {**cfg, "logprob_check_rows": rows}, world, out))[0]
        assert line["rollout/logprob_aligned"] > 0  # some re-tokenized tokens are compared
        return line["rollout/logprob_diff_mean"]

    assert first_diff(4, 4) < 1e-3  # rollouts 4 on are not checked
    assert first_diff(4, None) > 0.1
    assert first_diff(0, 4) == pytest.approx(1.0, abs=1e-3)

    def without_entropies(*args, **kwargs):
        ro = sampling.sample_and_grade(*args, **kwargs)
        ro.completions = [dataclasses.replace(c, entropies=None) for c in ro.completions]
        return ro

    monkeypatch.setattr(ei, "sample_and_grade", without_entropies)
    run_trainer(ei, {**cfg, "logprob_check_rows": 4}, world, tmp_path / "vllm-like")
    assert scored[-1] == 16


def test_ei_logprob_check_rows_must_be_positive():
    with pytest.raises(ConfigError, match="logprob_check_rows"):
        ei.EIConfig(logprob_check_rows=0).validate()
