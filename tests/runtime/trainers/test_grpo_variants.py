"""The policy-gradient variants of ``rrl grpo`` (docs/algorithms.md) on the micro world: each
setting runs and logs what it should, dynamic sampling never trains on a group whose rewards
are all equal, token_mean's constant does not depend on the micro batches, the KL reference
is the starting model, and bad settings are refused with the setting's name."""

from __future__ import annotations

import math

import pytest
import scripted_rollouts
import torch
from micro_world import GRPO, QUIET, fake_grade, run_trainer, train_lines

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.settings.config import build_config
from reasoning_core.runtime.trainers import grpo
from reasoning_core.runtime.training import rollouts as sampling
from reasoning_core.runtime.training import updates

SHORT = {**GRPO, **QUIET, "n_grpo_steps": 2}
DYNAMIC_KEYS = ["dynamic_sampling/rounds", "dynamic_sampling/kept", "dynamic_sampling/repeated"]
# The keys only some variants log.
VARIANT_KEYS = {"kl", "overlong_penalty", "trained_reward", *DYNAMIC_KEYS}


def _record_updates(monkeypatch) -> list:
    """Record the ScoredRollouts and rows of every optimizer step."""
    seen: list = []
    real = grpo.grpo_update

    def grpo_update(model, optimizer, scheduler, scored, rows, **kwargs):
        seen.append((scored, torch.as_tensor(rows).clone(), kwargs["loss"]))
        return real(model, optimizer, scheduler, scored, rows, **kwargs)

    monkeypatch.setattr(grpo, "grpo_update", grpo_update)
    return seen


@pytest.mark.parametrize(
    ("change", "keys"),
    [
        ({"advantage_estimator": "rloo"}, []),
        ({"advantage_estimator": "batch_std"}, []),
        ({"advantage_estimator": "reinforce_pp"}, []),
        ({"advantage_estimator": "dr_grpo", "length_normalization": "masked_normalize"}, []),
        ({"loss_type": "dapo", "cliprange_high": 0.28, "length_normalization": "token_mean"}, []),
        ({"loss_type": "gspo", "cliprange_low": 3e-4, "cliprange_high": 4e-4}, []),
        ({"loss_type": "cispo", "cliprange_high": 0.28}, []),
        ({"loss_type": "sapo"}, []),
        ({"kl_coef": 0.1, "kl_estimator": "k1"}, ["kl"]),
        (
            {"overlong": "soft_penalty", "overlong_cache_tokens": 20},
            ["overlong_penalty", "trained_reward"],
        ),
        ({"overlong": "mask"}, []),
        ({"reward_control": "random"}, ["trained_reward"]),
        ({"reward_control": "format_only"}, ["trained_reward"]),
        ({"dynamic_sampling": True}, DYNAMIC_KEYS),
    ],
    ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else None,
)
def test_each_variant_trains_and_logs_its_keys(world, tmp_path, monkeypatch, change, keys):
    """Two GRPO steps with the setting: every train line has a finite loss, a gradient, the
    variant's own keys, and none of the other variants' keys (default lines stay as they
    were)."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    lines = train_lines(run_trainer(grpo, {**SHORT, **change}, world, tmp_path / "run"))
    assert len(lines) == 4  # 2 GRPO steps x 2 train batches
    for line in lines:
        assert math.isfinite(line["loss"]) and math.isfinite(line["grad_norm"])
        assert set(line) & VARIANT_KEYS == set(keys)
    assert any(line["grad_norm"] > 0 for line in lines)


def test_default_lines_carry_no_variant_key(world, tmp_path, monkeypatch):
    monkeypatch.setattr(sampling, "grade", fake_grade)
    # kl_coef 0: no reference policy is loaded at all.
    monkeypatch.setattr(grpo, "load_reference", lambda cfg: pytest.fail("reference loaded"))
    lines = train_lines(run_trainer(grpo, SHORT, world, tmp_path / "run"))
    for key in ("kl", "overlong_penalty", "trained_reward", "dynamic_sampling/rounds"):
        assert all(key not in line for line in lines)


def test_ratio_losses_get_the_sampling_policy_log_probs(world, tmp_path, monkeypatch):
    """dapo, gspo, cispo and sapo take a ratio: every optimizer step has the old log-probs,
    and they are refused with old_log_probs none."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    for loss_type in ("dapo", "gspo", "cispo", "sapo"):
        seen = _record_updates(monkeypatch)
        run_trainer(grpo, {**SHORT, "loss_type": loss_type}, world, tmp_path / loss_type)
        assert seen and all(scored.old_log_probs is not None for scored, _, _ in seen)
        monkeypatch.undo()
        monkeypatch.setattr(sampling, "grade", fake_grade)
        cfg = {**SHORT, "loss_type": loss_type, "old_log_probs": "none", "model_path": str(world)}
        with pytest.raises(ConfigError, match="old_log_probs"):
            grpo.GRPOConfig(**cfg).validate()


def _half_constant_grade(reward_fn, responses, ground_truths):
    """A grader under which every question whose answer is even gets the same reward for all
    its responses (a constant group), and the others a reward by response length."""
    scores = fake_grade(reward_fn, responses, ground_truths)
    for score, truth in zip(scores, ground_truths, strict=True):
        if int(truth) % 2 == 0:
            score.update(reward=1.0, answer_reward=1.0, format_reward=1.0)
    return scores


def test_dynamic_sampling_never_trains_on_a_constant_group(world, tmp_path, monkeypatch):
    """With about half the groups constant, every group of every train batch has rewards that
    differ (so a non-zero advantage), extra rounds are taken and logged, and the rollout batch
    is full."""
    monkeypatch.setattr(sampling, "grade", _half_constant_grade)
    seen = _record_updates(monkeypatch)
    cfg = {**SHORT, "dynamic_sampling": True, "n_grpo_steps": 3}
    lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / "run"))
    group = SHORT["group_size"]
    constant_before = 0
    for scored, rows, _ in seen:
        assert scored.raw_rewards.shape[0] == SHORT["rollout_batch_size"]
        groups = scored.raw_rewards.view(-1, group)
        assert (groups != groups[:, :1]).any(dim=1).all()
        assert (scored.advantages.view(-1, group).abs().sum(dim=1) > 0).all()
        # every row a train batch uses belongs to one of those groups
        assert rows.max() < scored.raw_rewards.shape[0]
    for line in lines:
        constant_before += line["dynamic_sampling/kept"] < 1
        assert line["frac_constant_groups"] == 0  # of the batch trained on
    assert constant_before > 0  # the grader did make constant groups to drop
    assert any(line["dynamic_sampling/rounds"] >= 1 for line in lines)


def test_dynamic_sampling_with_no_group_to_keep_takes_no_step(world, tmp_path, monkeypatch):
    """Every group constant: the extra rounds are capped and no optimizer step is taken."""

    def constant(reward_fn, responses, ground_truths):
        return [{"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0} for _ in responses]

    monkeypatch.setattr(sampling, "grade", constant)
    calls = []
    real = grpo.sample_and_grade

    def counting(*args, **kwargs):
        calls.append(kwargs.get("round_", 0))
        return real(*args, **kwargs)

    monkeypatch.setattr(grpo, "sample_and_grade", counting)
    cfg = {**SHORT, "dynamic_sampling": True, "dynamic_sampling_max_rounds": 2}
    assert train_lines(run_trainer(grpo, cfg, world, tmp_path / "run")) == []
    assert calls == [0, 1, 2, 0, 1, 2]


def test_token_mean_constant_is_the_whole_train_batch(world, tmp_path, monkeypatch):
    """token_mean: the same first optimizer step (loss, gradient norm) with 1, 2 or 4 micro
    batches, because the constant is counted once over the train batch."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    firsts = []
    for steps in (1, 2, 4):
        cfg = {
            **SHORT,
            "n_grpo_steps": 1,
            "loss_type": "dapo",
            "length_normalization": "token_mean",
            "gradient_accumulation_steps": steps,
        }
        firsts.append(train_lines(run_trainer(grpo, cfg, world, tmp_path / f"ga{steps}"))[0])
    for line in firsts[1:]:
        assert line["loss"] == pytest.approx(firsts[0]["loss"], rel=1e-5, abs=1e-7)
        assert line["grad_norm"] == pytest.approx(firsts[0]["grad_norm"], rel=1e-4)
    assert firsts[0]["grad_norm"] > 0


def test_token_mean_passes_the_batch_token_count(world, tmp_path, monkeypatch):
    """grpo_update hands every micro batch normalize_constant = the train batch's response
    tokens over its rows (the constant of reasoning_core.token_mean_constant)."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    seen_constants = []
    real = updates.grpo_microbatch_train_step

    def step(**kwargs):
        seen_constants.append(kwargs["settings"].normalize_constant)
        return real(**kwargs)

    monkeypatch.setattr(updates, "grpo_microbatch_train_step", step)
    seen = _record_updates(monkeypatch)
    cfg = {**SHORT, "n_grpo_steps": 1, "length_normalization": "token_mean"}
    run_trainer(grpo, cfg, world, tmp_path / "run")
    micro = SHORT["gradient_accumulation_steps"]
    for i, (scored, rows, _) in enumerate(seen):
        mask = scored.tokens.response_mask[rows]
        expected = float(mask.sum()) / len(rows)
        assert seen_constants[i * micro : (i + 1) * micro] == [pytest.approx(expected)] * micro


def test_kl_reference_is_the_starting_model(world, tmp_path, monkeypatch):
    """kl_coef > 0: the reference's log-probs equal the sampling policy's before the first
    update (KL about 0 on the first line) and the k3 estimate is never negative; the policy
    then moves away from it."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    seen = _record_updates(monkeypatch)
    cfg = {**SHORT, "n_grpo_steps": 3, "kl_coef": 0.05, "loss_type": "grpo_clip"}
    lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / "run"))
    first, _, _ = seen[0]
    mask = first.tokens.response_mask
    torch.testing.assert_close(
        first.ref_log_probs * mask, first.old_log_probs * mask, rtol=1e-5, atol=1e-5
    )
    assert abs(lines[0]["kl"]) < 1e-5
    assert all(line["kl"] >= 0 for line in lines)
    assert lines[-1]["kl"] > 1e-6


def test_overlong_mask_leaves_truncated_responses_out(world, tmp_path, monkeypatch):
    """overlong mask: a response cut at sampling_max_tokens has no token in the loss mask; the
    others keep theirs (4 tokens: most of the micro world's answers are cut, the scripted
    correct ones are not)."""
    scripted_rollouts.install(monkeypatch)
    seen = _record_updates(monkeypatch)
    batches = []
    real = grpo.sample_and_grade

    def recording(*args, **kwargs):
        batches.append(real(*args, **kwargs))
        return batches[-1]

    monkeypatch.setattr(grpo, "sample_and_grade", recording)
    cfg = {**SHORT, "n_grpo_steps": 1, "overlong": "mask", "sampling_max_tokens": 4}
    run_trainer(grpo, cfg, world, tmp_path / "run")
    scored, _, _ = seen[0]
    cut = torch.tensor([c.finish_reason == "length" for c in batches[0].completions])
    assert cut.any() and not cut.all()
    kept = scored.loss_mask.sum(dim=1)
    assert (kept[cut] == 0).all()
    assert torch.equal(
        scored.loss_mask[~cut], scored.tokens.response_mask[~cut].to(scored.loss_mask.dtype)
    )


def test_random_control_keeps_the_rate_of_ones(world, tmp_path, monkeypatch):
    """reward_control random trains on the batch's rewards reordered: the same multiset, and
    the logged reward stays the verifier's."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    seen = _record_updates(monkeypatch)
    real = grpo.trained_rewards
    verifier = []

    def recording(cfg, ro, step, round_):
        verifier.append(torch.tensor(ro.rewards))
        return real(cfg, ro, step, round_)

    monkeypatch.setattr(grpo, "trained_rewards", recording)
    lines = train_lines(
        run_trainer(grpo, {**SHORT, "reward_control": "random"}, world, tmp_path / "r")
    )
    scored, _, _ = seen[0]
    assert torch.equal(scored.raw_rewards.sort().values, verifier[0].float().sort().values)
    assert not torch.equal(scored.raw_rewards, verifier[0].float())
    assert lines[0]["reward"] == pytest.approx(float(verifier[0].float().mean()))


def test_one_example_training_repeats_the_problem(world, tmp_path, monkeypatch):
    """train_examples 1: every question of every rollout batch is the same problem."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    seen = _record_updates(monkeypatch)
    run_trainer(grpo, {**SHORT, "train_examples": 1}, world, tmp_path / "run")
    assert seen
    for scored, _, _ in seen:
        ids = scored.tokens.input_ids
        assert scored.raw_rewards.shape[0] == SHORT["rollout_batch_size"]
        prompt_rows = {
            tuple(row[: int(m.nonzero()[0])].tolist())
            for row, m in zip(ids, scored.tokens.response_mask, strict=True)
        }
        assert len(prompt_rows) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"loss_type": "grpo_clip", "cliprange_high": 0.28}, "cliprange_high"),
        ({"loss_type": "dapo", "cliprange_low": 0.0}, "cliprange_low"),
        ({"loss_type": "dapo", "cliprange_low": 1.5}, "cliprange_low"),
        ({"loss_type": "sapo", "sapo_tau_neg": 0.0}, "sapo_tau_neg"),
        ({"advantage_estimator": "rloo", "use_std_normalization": False}, "use_std"),
        ({"length_normalization": "token_mean", "normalize_constant": 10.0}, "normalize_const"),
        ({"kl_coef": -0.1}, "kl_coef"),
        ({"dynamic_sampling_max_rounds": -1}, "dynamic_sampling_max_rounds"),
        ({"overlong_cache_tokens": 8}, "overlong_cache_tokens"),
        ({"overlong": "soft_penalty", "overlong_cache_tokens": 999}, "overlong_cache_tokens"),
        ({"train_examples": 0}, "train_examples"),
    ],
)
def test_bad_variant_settings_are_named(world, change, message):
    with pytest.raises(ConfigError, match=message):
        grpo.GRPOConfig(**{**SHORT, "model_path": str(world), **change}).validate()


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("advantage_estimator", "ppo"),
        ("kl_estimator", "k4"),
        ("overlong", "cut"),
        ("reward_control", "noise"),
    ],
)
def test_unknown_choices_are_named(world, setting, value):
    with pytest.raises(ConfigError, match=setting):
        build_config(grpo.GRPOConfig, {**SHORT, "model_path": str(world), setting: value})
