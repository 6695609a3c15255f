"""A policy-gradient method is one registered function: a loss registered in a test trains
through ``rrl grpo`` with no edit elsewhere; presets are a real setting; the update path passes
its settings as one object, not as a long list of keywords; a loss name or a clip bound is
written in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from micro_world import GRPO, QUIET, fake_grade, sets, train_lines

from reasoning_core import POLICY_LOSSES, PRESETS, register_policy_loss
from reasoning_core.runtime import cli
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.metrics import read_metrics
from reasoning_core.runtime.settings.config import build_config
from reasoning_core.runtime.trainers import grpo
from reasoning_core.runtime.training import rollouts as sampling

ROOT = Path(__file__).resolve().parents[3]
SHORT = {**GRPO, **QUIET, "n_grpo_steps": 2}
# A preset's settings give way to those given explicitly: these name no method.
UNCHOSEN = {k: v for k, v in SHORT.items() if k != "loss_type"}
TOY = "toy_double_reinforce"


@pytest.fixture
def toy_loss():
    """A loss known to no file of the package: twice REINFORCE with the group baseline. Yields
    the shapes it was called with; unregistered afterwards."""
    calls: list[tuple[int, ...]] = []

    @register_policy_loss(
        TOY, paper="none: a test's loss", formula="-2 A log pi", inputs=("advantages",)
    )
    def toy(policy_log_probs, response_mask, inputs, settings):
        calls.append(tuple(policy_log_probs.shape))
        return -2.0 * inputs.advantages * policy_log_probs, {}

    yield calls
    POLICY_LOSSES.remove(TOY)


def _rrl_grpo(cfg: dict, world: Path, out: Path) -> list[dict]:
    argv = ["grpo", *sets({**cfg, "model_path": str(world)}), "--out", str(out)]
    assert cli.main(argv) == 0
    return train_lines(read_metrics(out))


def test_a_registered_loss_trains_through_rrl_grpo(toy_loss, world, tmp_path, monkeypatch, capsys):
    """``rrl grpo --set loss_type=<it>`` trains with the registered function, lists it in
    --help, and (reading no old log-probs) never scores the sampling policy. Its loss is
    exactly twice REINFORCE-with-baseline's on the same first rollout batch."""
    monkeypatch.setattr(sampling, "grade", fake_grade)
    scored = []
    real = grpo.fixed_log_probs
    monkeypatch.setattr(grpo, "fixed_log_probs", lambda *a, **k: scored.append(1) or real(*a, **k))
    lines = _rrl_grpo({**SHORT, "loss_type": TOY}, world, tmp_path / "toy")
    assert len(lines) == 4 and toy_loss  # 2 GRPO steps x 2 train batches, through the function
    assert not scored
    saved = yaml.safe_load((tmp_path / "toy" / "config.yaml").read_text())
    assert saved["loss_type"] == TOY
    plain = _rrl_grpo({**SHORT, "loss_type": "reinforce_with_baseline"}, world, tmp_path / "rb")
    assert lines[0]["loss"] == 2 * plain[0]["loss"]  # the same rollouts and weights at step 1
    with pytest.raises(SystemExit):
        cli.main(["grpo", "--help"])
    assert TOY in capsys.readouterr().out


def test_a_preset_expands_to_its_papers_settings_and_each_can_be_overridden(world):
    base = {**UNCHOSEN, "model_path": str(world)}
    dapo = build_config(grpo.GRPOConfig, {**base, "preset": "dapo"})
    for name, value in PRESETS["dapo"].items():
        assert getattr(dapo, name) == value, name
    assert dapo.preset == "dapo" and dapo.cliprange_high == 0.28
    assert dapo.dynamic_sampling and dapo.length_normalization == "token_mean"
    mine = build_config(grpo.GRPOConfig, {**base, "preset": "dapo", "cliprange_high": 0.3})
    assert mine.cliprange_high == 0.3 and mine.loss_type == "dapo"
    with pytest.raises(ConfigError, match="preset"):
        build_config(grpo.GRPOConfig, {**base, "preset": "ppo"})
    # Every preset is a valid configuration, and the loss's part is its registry entry's.
    for name, values in PRESETS.items():
        cfg = build_config(grpo.GRPOConfig, {**base, "preset": name})
        entry = POLICY_LOSSES[values["loss_type"]]
        assert {k: getattr(cfg, k) for k in entry.paper_settings} == dict(entry.paper_settings)


def test_a_preset_is_recorded_in_config_yaml(world, tmp_path, monkeypatch):
    monkeypatch.setattr(sampling, "grade", fake_grade)
    cfg = {**UNCHOSEN, "n_grpo_steps": 1, "preset": "gspo", "cliprange_high": 5e-4}
    _rrl_grpo(cfg, world, tmp_path / "run")
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["preset"] == "gspo" and saved["loss_type"] == "gspo"
    assert saved["cliprange_low"] == 3e-4 and saved["cliprange_high"] == 5e-4


# The files a GRPO optimizer step runs through, from the trainer to the core's loss.
UPDATE_PATH = [
    "reasoning_core/runtime/trainers/grpo.py",
    "reasoning_core/runtime/trainers/grpo_config.py",
    "reasoning_core/runtime/training/updates.py",
    "reasoning_core/runtime/training/rollouts.py",
    "reasoning_core/runtime/training/engine_check.py",
    "reasoning_core/losses.py",
    "reasoning_core/registry.py",
    "reasoning_core/advantages.py",
]


def _calls(path: str):
    tree = ast.parse((ROOT / path).read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def test_no_call_on_the_update_path_passes_more_than_8_keywords():
    counts = {
        f"{path}:{call.lineno}": len(call.keywords) for path in UPDATE_PATH for call in _calls(path)
    }
    assert counts and max(counts.values()) <= 8, sorted(counts.items(), key=lambda kv: -kv[1])[:3]


def test_loss_names_and_clip_bounds_are_written_once():
    """A loss's name is spelled once where it is registered (losses.py); elsewhere in the
    package only where a method is chosen by name (a preset, the configuration's default, the
    GPU check's timed step), never to test what a loss needs. The clip settings' bounds (the
    numbers a Param holds) are written in losses.py alone (and the off-policy corrections' in
    offpolicy.py)."""
    names = set(POLICY_LOSSES)
    spelled: dict[str, list[str]] = {}
    for path in (ROOT / "reasoning_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                spelled.setdefault(path.relative_to(ROOT).as_posix(), []).append(node.value)
    assert sorted(spelled.pop("reasoning_core/losses.py")) == sorted(names)
    choosers = {
        "reasoning_core/presets.py",
        "reasoning_core/runtime/trainers/grpo_config.py",
        "reasoning_core/runtime/gpu_check/train_step.py",
    }
    assert set(spelled) <= choosers, spelled
    assert len(spelled.get("reasoning_core/runtime/trainers/grpo_config.py", [])) == 1
    bound = re.compile(r"\b(above|below)=")
    holders = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "reasoning_core").rglob("*.py")
        if bound.search(p.read_text())
    ]
    # The corrections' bounds are likewise written once, where they are registered.
    assert sorted(holders) == ["reasoning_core/losses.py", "reasoning_core/offpolicy.py"]


def test_use_std_normalization_false_selects_the_estimator_without_the_std(world):
    base = {**SHORT, "model_path": str(world)}
    assert build_config(grpo.GRPOConfig, base).estimator == "grpo"
    off = build_config(grpo.GRPOConfig, {**base, "use_std_normalization": False})
    assert off.estimator == "dr_grpo"
    named = build_config(grpo.GRPOConfig, {**base, "advantage_estimator": "dr_grpo"})
    assert named.estimator == "dr_grpo"
    with pytest.raises(ConfigError, match="use_std_normalization"):
        build_config(
            grpo.GRPOConfig, {**base, "advantage_estimator": "rloo", "use_std_normalization": False}
        )
