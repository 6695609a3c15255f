"""The rollout engine checked against the policy on the trainers' train lines: the logged
difference in sync and with a stale engine (``sync_every``), the warning, and TIS
(``rollout_correction``) in the GRPO update.

Rollouts are graded by the stand-in ``fake_grade`` so that every group has different rewards:
each update then moves the weights, and an engine that skipped a sync is really stale."""

from __future__ import annotations

import pytest
from micro_world import EI, GRPO, QUIET, fake_grade, record_calls, run_trainer

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.metrics import without_time
from reasoning_core.runtime.trainers import ei, grpo
from reasoning_core.runtime.training import engine_check
from reasoning_core.runtime.training import rollouts as sampling
from reasoning_core.runtime.training.engine_check import MISMATCH_KEYS, TIS_KEYS

WARNING = "warning: the rollout engine's log-probs differ"
# One update per rollout batch, so an engine one sync behind is one optimizer step behind.
ON_POLICY = {"loss_type": "reinforce_with_baseline"}
ONE_UPDATE = {**ON_POLICY, "train_batch_size": 16}


def train_records(cfg, world, out, monkeypatch, module=grpo) -> list[dict]:
    monkeypatch.setattr(sampling, "grade", fake_grade)
    return [r for r in run_trainer(module, cfg, world, out) if r["split"] == "train"]


def by_step(train: list[dict], key: str = "grpo_step") -> dict[int, dict]:
    """The first train line of each rollout batch."""
    out: dict[int, dict] = {}
    for r in train:
        out.setdefault(r[key], r)
    return out


@pytest.mark.parametrize(
    "variant",
    [{"loss_type": "reinforce_with_baseline"}, {"loss_type": "grpo_clip"}],
    ids=["first-update-forward", "old-log-probs"],
)
def test_every_grpo_train_line_carries_the_check_in_sync(world, tmp_path, monkeypatch, variant):
    """Two optimizer steps per rollout batch: every train line has the same keys, the check's
    among them, the same values on both lines of a rollout batch; measured on the first
    update's forward (on-policy) or on the old log-probs (grpo_clip), an engine in sync differs
    from the policy by float rounding only."""
    cfg = {**GRPO, **QUIET, "n_grpo_steps": 2, **variant}
    old = record_calls(monkeypatch, grpo, "fixed_log_probs")
    train = train_records(cfg, world, tmp_path / "run", monkeypatch)
    assert len(old) == (2 if variant["loss_type"] == "grpo_clip" else 0)  # no extra pass
    assert len(train) == 4 and len({frozenset(r) for r in train}) == 1
    assert set(MISMATCH_KEYS) <= set(train[0]) and not set(TIS_KEYS) & set(train[0])
    for first, second in (train[:2], train[2:]):
        assert {k: first[k] for k in MISMATCH_KEYS} == {k: second[k] for k in MISMATCH_KEYS}
    for r in train:
        assert r["rollout/logprob_aligned"] > 0.0  # the micro world's samples re-tokenize rarely
        assert r["rollout/logprob_diff_mean"] < 2e-6  # measured 0.9-1.6e-7
        assert r["rollout/logprob_diff_max"] < 2e-5
        assert r["rollout/ratio_outside"] == 0.0


def test_a_stale_engine_shows_in_the_logged_difference_and_warns_once(
    world, tmp_path, monkeypatch, capfd
):
    """sync_every 2: the engine (a copy of the policy of its own) is synced before rollout
    batches 1 and 3 and one optimizer step behind on 2 and 4. The logged difference rises from
    float rounding to the size of one step at lr 1e-3, and the warning comes once."""
    cfg = {**GRPO, **QUIET, **ONE_UPDATE, "n_grpo_steps": 4, "sync_every": 2}
    cfg["logprob_diff_warn"] = 1e-3
    steps = by_step(train_records(cfg, world, tmp_path / "run", monkeypatch))
    diff = {s: r["rollout/logprob_diff_mean"] for s, r in steps.items()}
    assert diff[1] < 2e-6 and diff[3] < 2e-6, diff  # in sync
    assert diff[2] > 1e-3 and diff[4] > 1e-3, diff  # one step stale: measured 0.25, 0.11
    assert capfd.readouterr().err.count(WARNING) == 1
    # In sync at every step (the default), nothing rises and nothing is said.
    cfg["sync_every"] = 1
    steps = by_step(train_records(cfg, world, tmp_path / "synced", monkeypatch))
    assert max(r["rollout/logprob_diff_mean"] for r in steps.values()) < 2e-6
    assert WARNING not in capfd.readouterr().err


def test_tis_weights_the_loss_by_the_truncated_ratio(world, tmp_path, monkeypatch):
    """rollout_correction: tis on a stale engine: the lines log the mean weight and the clipped
    share (weights 1 up to rounding in sync; off 1, and clipped at cap 1.01, one step stale),
    and the stale steps' loss differs from the same run without TIS."""
    cfg = {**GRPO, **QUIET, **ONE_UPDATE, "n_grpo_steps": 2, "sync_every": 2}
    plain = by_step(train_records(cfg, world, tmp_path / "plain", monkeypatch))
    tis = {**cfg, "rollout_correction": "tis", "tis_cap": 1.01}
    steps = by_step(train_records(tis, world, tmp_path / "tis", monkeypatch))
    assert set(TIS_KEYS) <= set(steps[1]) and set(TIS_KEYS) <= set(steps[2])
    assert steps[1]["rollout/tis_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert steps[1]["rollout/tis_clipped"] == 0.0
    assert steps[1]["loss"] == pytest.approx(plain[1]["loss"], rel=1e-4, abs=1e-7)
    assert steps[2]["rollout/tis_weight_mean"] <= 1.01
    assert abs(steps[2]["rollout/tis_weight_mean"] - 1.0) > 1e-4
    assert steps[2]["rollout/tis_clipped"] > 0.0
    assert steps[2]["loss"] != pytest.approx(plain[2]["loss"], rel=1e-4)
    for key in MISMATCH_KEYS:  # the check itself does not depend on the correction
        assert steps[2][key] == pytest.approx(plain[2][key], rel=1e-6, abs=1e-9), key


def test_tis_over_several_steps_scores_the_sampling_policy_once(world, tmp_path, monkeypatch):
    """An on-policy loss with two optimizer steps per rollout batch: the second step's forward
    is no longer the sampling policy's, so TIS scores it once per rollout batch (the old
    log-probs' no-gradient pass), and both lines carry that batch's weights."""
    cfg = {**GRPO, **QUIET, "n_grpo_steps": 1, "loss_type": "reinforce_with_baseline"}
    calls = record_calls(monkeypatch, grpo, "fixed_log_probs")
    tis = {**cfg, "rollout_correction": "tis"}
    train = train_records(tis, world, tmp_path / "run", monkeypatch)
    assert len(calls) == 1 and len(train) == 2
    assert train[0]["rollout/tis_weight_mean"] == train[1]["rollout/tis_weight_mean"]
    assert train[0]["rollout/tis_weight_mean"] == pytest.approx(1.0, abs=1e-5)


def test_ei_lines_carry_the_check(world, tmp_path, monkeypatch):
    """EI's iteration line and its optimizer-step lines carry the check of that iteration's
    rollouts (one no-gradient forward); in sync it is float rounding, one step stale
    (sync_every 2, lr 1e-3) far above it."""
    cfg = {**EI, **QUIET, "n_ei_steps": 2, "ei_batch_size": 8, "sync_every": 2}
    train = train_records(cfg, world, tmp_path / "run", monkeypatch, module=ei)
    assert all(set(MISMATCH_KEYS) <= set(r) for r in train)
    iterations = [r for r in train if "kept" in r]
    assert len(iterations) == 2 and len(train) > 2  # fake_grade keeps some responses
    for r in train:
        line = iterations[r["ei_step"] - 1]
        assert {k: r[k] for k in MISMATCH_KEYS} == {k: line[k] for k in MISMATCH_KEYS}
    assert iterations[0]["rollout/logprob_diff_mean"] < 2e-6
    assert iterations[1]["rollout/logprob_diff_mean"] > 1e-3


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tis_cap": 0.5}, "'tis_cap' must be >= 1"),
        ({"sync_every": 0}, "'sync_every' must be >= 1"),
        ({"logprob_diff_warn": 0.0}, "'logprob_diff_warn' must be > 0"),
        (
            {"rollout_correction": "tis", "old_log_probs": "none", **ON_POLICY},
            "takes 2 optimizer steps",
        ),
    ],
)
def test_bad_correction_settings_are_refused(world, settings, message):
    cfg = grpo.GRPOConfig(model_path=str(world), **{**GRPO, **settings})
    with pytest.raises(ConfigError, match=message):
        cfg.validate()


def test_one_update_per_batch_tis_needs_no_old_log_probs(world):
    """TIS with one on-policy update per rollout batch reads the update's own forward."""
    cfg = grpo.GRPOConfig(
        model_path=str(world), **{**GRPO, **ONE_UPDATE, "rollout_correction": "tis"}
    )
    cfg.validate()
    assert not cfg.scores_old_log_probs and cfg.tis == 2.0
    cfg.old_log_probs = "none"
    cfg.validate()


def test_tis_with_an_engine_that_agrees_exactly_changes_no_metric(world, tmp_path, monkeypatch):
    """An engine whose log-probs are the old log-probs bit for bit (grpo_clip, two epochs):
    every TIS weight is exactly 1, so the run's metrics are the run's without TIS, bit for
    bit, apart from the two TIS keys."""
    cfg = {**GRPO, **QUIET, "n_grpo_steps": 2, "epochs_per_rollout_batch": 2}
    old: list = []
    real_old = grpo.fixed_log_probs

    def scored(*args, **kwargs):
        old.append(real_old(*args, **kwargs))
        return old[-1]

    def agreeing_engine(labels, response_mask, completions):
        return old[-1].clone(), response_mask.bool()

    monkeypatch.setattr(grpo, "fixed_log_probs", scored)
    monkeypatch.setattr(engine_check, "engine_log_probs", agreeing_engine)
    plain = train_records(cfg, world, tmp_path / "plain", monkeypatch)
    tis = train_records({**cfg, "rollout_correction": "tis"}, world, tmp_path / "tis", monkeypatch)
    assert all(r["rollout/tis_weight_mean"] == 1.0 and r["rollout/tis_clipped"] == 0 for r in tis)
    assert all(r["rollout/logprob_diff_mean"] == 0.0 for r in tis)
    without_tis = [{k: v for k, v in r.items() if k not in TIS_KEYS} for r in tis]
    assert without_time(without_tis) == without_time(plain)
    assert any(r["grad_norm"] > 0 for r in plain)
