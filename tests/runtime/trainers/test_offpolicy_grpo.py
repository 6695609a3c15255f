"""GRPO with a fixed rollout lag and off-policy corrections on the micro world.

* lag 0 is the synchronous loop: no new key on any line, nothing new in the saved state;
* with ``rollout_lag`` L, step k samples with the weights of step max(0, k - L): the engine
  is synced from that saved version (checked against the versions the run held), every train
  line records the staleness, and a lagged run is reproducible and differs from lag 0;
* a correction weights the loss and logs what it masked and truncated;
* bad settings are ConfigErrors naming the setting, and the lag is refused under torchrun.
(Killed and resumed lagged runs: tests/runtime/run/test_resume.py.)
"""

from __future__ import annotations

import pytest
import scripted_rollouts
import torch
from micro_world import GRPO, run_trainer, train_lines

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.resume import load_state
from reasoning_core.runtime.trainers import grpo
from reasoning_core.runtime.training import offpolicy

LAGGED = {**GRPO, "rollout_lag": 2, "save_every": 2}


def _new_keys(lines: list[dict]) -> set[str]:
    return {k for r in lines for k in r if k.startswith(("async/", "offpolicy/"))}


def saved_states(monkeypatch) -> list:
    """The list that each ``PolicyVersions.state()`` the run saves is appended to."""
    saved = []
    real = offpolicy.PolicyVersions.state
    monkeypatch.setattr(
        offpolicy.PolicyVersions, "state", lambda self: saved.append(real(self)) or saved[-1]
    )
    return saved


def test_lag_zero_lines_and_state_carry_nothing_new(world, tmp_path, monkeypatch):
    scripted_rollouts.install(monkeypatch)
    saved = saved_states(monkeypatch)
    cfg = {**GRPO, "rollout_lag": 0, "n_grpo_steps": 2, "save_every": 1}
    lines = run_trainer(grpo, cfg, world, tmp_path / "sync")
    assert not _new_keys(lines)
    assert saved and all(s is None for s in saved)


def test_lagged_run_samples_with_the_version_lag_steps_old(world, tmp_path, monkeypatch):
    """The engine syncs from the saved version of step k - L (the starting weights for the
    first L steps); train lines record staleness min(k, L); the run is reproducible and its
    samples differ from the synchronous run's once the lag bites."""
    scripted_rollouts.install(monkeypatch)
    synced: list[tuple[int, dict]] = []
    real_sampler = offpolicy.PolicyVersions.sampler

    def sampler(self, step, model):
        weights = real_sampler(self, step, model)
        synced.append((step, weights.state_dict()))
        return weights

    monkeypatch.setattr(offpolicy.PolicyVersions, "sampler", sampler)
    cfg = {**LAGGED, "save_every": 0}
    a = run_trainer(grpo, cfg, world, tmp_path / "a")
    first = dict(synced)
    assert [s for s, _ in synced] == list(range(cfg["n_grpo_steps"]))
    start = first[0]
    for step, weights in synced:
        if step <= 2:  # versions 0: the starting weights (held as step 0's copy)
            assert all(torch.equal(weights[k], start[k]) for k in start)
    # Step 3 samples with version 1: the weights after one GRPO step, not the starting ones.
    assert any(not torch.equal(first[3][k], start[k]) for k in start)
    lines = train_lines(a)
    for line in lines:
        k = line["grpo_step"] - 1
        assert line["async/staleness_mean"] == line["async/staleness_max"] == min(k, 2)
        assert line[f"async/staleness_le_{min(k, 2)}"] == 1.0
    b = run_trainer(grpo, cfg, world, tmp_path / "b")
    assert train_lines(b) == lines
    sync = train_lines(run_trainer(grpo, {**GRPO, "save_every": 0}, world, tmp_path / "sync"))
    strip = [{k: v for k, v in r.items() if not k.startswith("async/")} for r in lines]
    by_step = {r["grpo_step"]: r for r in sync}
    # Steps 1 and 2 sample version 0 in both runs (one update apart in step 2's weights
    # trained on); step 3's rollouts come from other weights.
    assert strip[0] == sync[0]
    assert any(r["response_length"] != by_step[r["grpo_step"]]["response_length"]
               or r["reward"] != by_step[r["grpo_step"]]["reward"]
               for r in strip if r["grpo_step"] >= 3)  # fmt: skip


def test_saved_state_holds_the_versions_the_next_steps_need(world, tmp_path, monkeypatch):
    scripted_rollouts.install(monkeypatch)
    saved = saved_states(monkeypatch)
    run_trainer(grpo, {**LAGGED, "save_every": 1}, world, tmp_path / "run")
    # After step k (k = 1..3 are saved; the last is the finished run's checkpoint): the next
    # step k+1 needs version k+1-L, which the state holds (or is the saved model, version k).
    for done, extra in enumerate(saved, start=1):
        held = set(extra["policy_versions"])
        need = max(0, done - 2)
        assert need in held or need == done, (done, held)
        assert len(held) <= 3


def test_state_extra_round_trips(tmp_path):
    from reasoning_core.runtime.run.resume import save_state

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    extra = {"policy_versions": {3: {"w": torch.arange(4.0)}}}
    save_state(tmp_path / "state", model=model, optimizer=opt, scheduler=None, counters={"a": 1},
               extra=extra)  # fmt: skip
    counters = load_state(tmp_path / "state", model=model, optimizer=opt, scheduler=None)
    assert counters["a"] == 1
    assert torch.equal(counters["state_extra"]["policy_versions"][3]["w"], torch.arange(4.0))
    save_state(tmp_path / "plain", model=model, optimizer=opt, scheduler=None, counters={"a": 1})
    assert "state_extra" not in load_state(
        tmp_path / "plain", model=model, optimizer=opt, scheduler=None
    )


@pytest.mark.parametrize("correction", ["tis", "decoupled", "icepop", "geo_mask"])
def test_each_correction_trains_and_logs_what_it_masked(world, tmp_path, monkeypatch, correction):
    scripted_rollouts.install(monkeypatch)
    cfg = {**LAGGED, "n_grpo_steps": 3, "save_every": 0, "offpolicy_correction": correction}
    lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / correction))
    assert lines and all(r["grad_norm"] > 0 or r["loss"] == 0 for r in lines)
    for r in lines:
        assert 0.0 <= r["offpolicy/masked"] <= 1.0
        assert 0.0 <= r["offpolicy/truncated"] <= 1.0
        assert r["offpolicy/weight_mean"] >= 0.0
    assert {"offpolicy/masked", "async/staleness_mean"} <= _new_keys(lines)


SHORT = {**GRPO, "n_grpo_steps": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"offpolicy_correction": "magic"}, "offpolicy_correction"),
        ({"icepop_high": 0.5}, "icepop_high"),
        ({"icepop_low": float("nan")}, "icepop_low"),
        ({"geo_mask_low": 1.2}, "geo_mask_low"),
        ({"tis_cap": 0.5}, "tis_cap"),
        ({"decoupled_cap": 2.0}, "decoupled_cap"),
        ({"offpolicy_correction": "decoupled", "decoupled_cap": 1.0}, "decoupled_cap"),
        ({"offpolicy_correction": "tis", "rollout_correction": "tis"}, "rollout_correction"),
        (
            {"offpolicy_correction": "icepop", "old_log_probs": "none", "loss_type": "no_baseline"},
            "old_log_probs",
        ),  # fmt: skip
        ({"rollout_lag": -1}, "rollout_lag"),
        ({"rollout_lag": 1, "sync_every": 2}, "sync_every"),
    ],
)
def test_bad_settings_are_named(world, change, message):
    with pytest.raises(ConfigError, match=message):
        grpo.GRPOConfig(**{**SHORT, "model_path": str(world), **change}).validate()


def test_rollout_lag_is_refused_under_torchrun(world):
    cfg = grpo.GRPOConfig(
        **{**SHORT, "model_path": str(world), "rollout_lag": 1, "rollout_seeding": "group"}
    )
    cfg.validate()
    with pytest.raises(ConfigError, match="rollout_lag.*torchrun"):
        cfg.check_world(2)
    grpo.GRPOConfig(**{**SHORT, "model_path": str(world), "rollout_seeding": "group"}).check_world(
        2
    )


ONE_STEP_LAGGED = {
    **LAGGED,
    "loss_type": "reinforce_with_baseline",
    "train_batch_size": 16,
    "n_grpo_steps": 4,
    "save_every": 0,
}


@pytest.mark.parametrize("correction", ["decoupled", "icepop"])
def test_one_step_per_batch_weighs_the_correction_on_the_update_forward(
    world, tmp_path, monkeypatch, correction
):
    """With one optimizer step per rollout batch the update's own forward is the proximal
    policy's, so no old log-probs are scored; the run equals the one that scores them (as
    several steps per batch must), up to float rounding, key for key, and the correction's
    weights change its loss."""
    scripted_rollouts.install(monkeypatch)
    scored = []
    real_fixed = grpo.fixed_log_probs
    monkeypatch.setattr(
        grpo, "fixed_log_probs", lambda *a, **k: scored.append(1) or real_fixed(*a, **k)
    )
    cfg = {**ONE_STEP_LAGGED, "offpolicy_correction": correction}
    config = grpo.GRPOConfig(model_path=str(world), **cfg)
    assert not config.scores_old_log_probs
    lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / "update"))
    assert not scored  # no scoring pass at all
    monkeypatch.setattr(grpo.GRPOConfig, "scores_old_log_probs", property(lambda self: True))
    reference = train_lines(run_trainer(grpo, cfg, world, tmp_path / "scored"))
    assert len(scored) == cfg["n_grpo_steps"]
    assert len(lines) == len(reference) == cfg["n_grpo_steps"]
    for ours, theirs in zip(lines, reference, strict=True):
        assert ours.keys() == theirs.keys()
        assert {"offpolicy/masked", "offpolicy/weight_mean"} <= ours.keys()
        for key, value in theirs.items():
            if isinstance(value, float) and not key.startswith("time/"):
                assert ours[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
            elif not key.startswith("time/"):
                assert ours[key] == value, key
    # The lag bites: the proximal policy is not the behaviour one, so weights are not all 1,
    # and they weight the loss: it differs from the uncorrected run's at the same lag.
    assert any(r["offpolicy/weight_mean"] != 1.0 for r in lines[2:])
    plain = {**cfg, "offpolicy_correction": "none"}
    uncorrected = train_lines(run_trainer(grpo, plain, world, tmp_path / "plain"))
    assert any(a["loss"] != b["loss"] for a, b in zip(lines, uncorrected, strict=True))
