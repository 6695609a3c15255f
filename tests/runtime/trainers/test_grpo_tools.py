"""GRPO with multi-turn episodes (setting ``env: calculator``) on the micro world, with each
CPU engine. The micro model never learned the call syntax, so an engine wrapper makes one
episode of every group call the calculator in its first turn (its later turns are the real
engine's samples, sent as token ids)."""

from __future__ import annotations

import json
import math

import pytest
from micro_world import GRPO, fake_grade, run_trainer, train_lines

from reasoning_core.runtime.engines.rollout import Completion
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.trainers import grpo
from reasoning_core.runtime.trainers import lifecycle as run
from reasoning_core.runtime.trainers.grpo_config import GRPOConfig
from reasoning_core.runtime.training import rollouts as sampling

CALL = " <calc>12*34</calc>"


class OneCallPerGroup:
    """``inner`` whose first completion of each text prompt in a rollout call (n > 1) is the
    calculator call :data:`CALL` (not sampled: NaN log-probs); everything else is real."""

    def __init__(self, inner, tokenizer):
        self.inner, self.tokenizer = inner, tokenizer
        self.eos_ids = getattr(inner, "eos_ids", [tokenizer.eos_token_id])
        self.token_prompts = 0

    def sync_weights(self, model):
        self.inner.sync_weights(model)

    def generate(self, prompts, params):
        outs = self.inner.generate(prompts, params)
        self.token_prompts += sum(not isinstance(p, str) for p in prompts)
        if params.n == 1:
            return outs
        ids = self.tokenizer.encode(CALL, add_special_tokens=False)
        call = Completion(CALL, ids, [math.nan] * len(ids), "stop")
        return [[call, *group[1:]] for group in outs]


def scripted_engines(monkeypatch) -> list[OneCallPerGroup]:
    """Make the trainers' rollout engines :class:`OneCallPerGroup` (listed as made) and grade
    with :func:`fake_grade`."""
    made = []
    real = run.make_rollout_engine

    def make(cfg, model, tokenizer):
        made.append(OneCallPerGroup(real(cfg, model, tokenizer), tokenizer))
        return made[-1]

    monkeypatch.setattr(run, "make_rollout_engine", make)
    monkeypatch.setattr(sampling, "grade", fake_grade)
    return made


@pytest.mark.parametrize("engine", ["hf", "static"])
def test_grpo_trains_on_calculator_episodes(engine, world, tmp_path, monkeypatch):
    made = scripted_engines(monkeypatch)
    cfg = {
        **GRPO,
        "engine": engine,
        "env": "calculator",
        "tool_max_calls": 2,
        "n_grpo_steps": 2,
        "eval_every": 0,
        "sampling_max_tokens": 64,
        "sampling_min_tokens": 0,
    }
    lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / "run"))
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    group = GRPO["group_size"]
    for r in lines:
        # One scripted call per group at least (the model may call too, by chance).
        assert r["tool/call_rate"] >= 1 / group and r["tool/calls"] >= 1 / group
        assert r["tool/turns"] >= 1 + 1 / group
        assert r["tool/errors"] == 0 or r["tool/errors"] <= r["tool/calls"]
        assert r["tool/observation_tokens"] > 0 and r["tool/policy_tokens"] > 0
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])
        assert 0 < r["rollout/logprob_aligned"] <= 1
    assert made[0].token_prompts > 0  # later turns went to the engine as token ids
    # The evaluations ran episodes too: the calculator's prompt, the transcript graded.
    generations = sorted((tmp_path / "run" / "generations").glob("*.jsonl"))
    assert len(generations) == 2  # at the start and at the end
    record = json.loads(generations[-1].read_text().splitlines()[0])
    assert "<calc>12*34</calc>" in record["prompt"]
    # The evaluation lines say what the tool did in their episodes.
    evals = [
        r
        for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").open())
        if r.get("split") == "eval"
    ]
    assert len(evals) == 2
    for r in evals:
        assert 0 <= r["tool/call_rate"] <= 1 and r["tool/turns"] >= 1 + r["tool/call_rate"] - 1e-9
        assert r["tool/policy_tokens"] > 0


def test_packed_episodes_train_as_unpacked_ones(world, tmp_path, monkeypatch):
    """share_prompts with episodes: each group's prompt once, every episode after it with its
    tool results as context; the first update (same rollouts, same weights) has the unpacked
    run's loss and gradient norm up to float rounding."""
    first = {}
    for share in (False, True):
        scripted_engines(monkeypatch)
        cfg = {**GRPO, "engine": "static", "env": "calculator", "share_prompts": share}
        cfg.update(n_grpo_steps=1, eval_every=0, sampling_max_tokens=64, sampling_min_tokens=0)
        lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / f"share_{share}"))
        first[share] = lines[0]
    unpacked, packed = first[False], first[True]
    assert packed["tool/observation_tokens"] > 0  # the packed rows had results inside them
    assert packed["reward"] == unpacked["reward"]
    for key in ("loss", "grad_norm"):
        assert packed[key] == pytest.approx(unpacked[key], rel=1e-4, abs=1e-6), key


def test_tool_bonus_is_added_to_the_trained_reward(world, tmp_path, monkeypatch):
    """tool_bonus: each episode with an answered call earns it on top of the graded reward
    (the scripted call 12*34 always is answered); answer_reward is the grader's alone; the
    r1_zero prompt has no word about the tool."""
    scripted_engines(monkeypatch)
    cfg = {**GRPO, "env": "calculator", "tool_bonus": 0.5, "tool_prompt": "r1_zero"}
    cfg.update(n_grpo_steps=2, eval_every=0, sampling_max_tokens=64, sampling_min_tokens=0)
    lines = train_lines(run_trainer(grpo, cfg, world, tmp_path / "run"))
    assert lines
    for r in lines:
        assert 0.5 * r["tool/call_rate"] >= r["tool/bonus"] >= 0.5 / GRPO["group_size"]
        assert r["reward"] == pytest.approx(r["answer_reward"] + r["tool/bonus"])
    record = json.loads(
        sorted((tmp_path / "run" / "generations").glob("*.jsonl"))[0].read_text().splitlines()[0]
    )
    assert "<calc>" not in record["prompt"] and record["prompt"].endswith("Assistant: <think>")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"env": "chess"}, "setting 'env': unknown environment 'chess'"),
        ({"env": "calculator", "template": "question_only"}, "setting 'env'.*r1_zero"),
        ({"env": "calculator", "tool_max_calls": 0}, "tool_max_calls"),
        ({"env": "calculator", "tool_prompt": "countdown"}, "setting 'tool_prompt' must be"),
        ({"env": "calculator", "tool_bonus": 1.5}, r"setting 'tool_bonus' must lie in \[0, 1\]"),
        ({"tool_bonus": 0.1}, "'tool_bonus' belongs to env calculator"),
        ({"tool_prompt": "r1_zero"}, "'tool_prompt' belongs to env calculator"),
        (
            {"env": "calculator", "rollout_lag": 1, "rollout_worker": True},
            "'rollout_worker' samples single-turn rollouts only",
        ),
    ],
)
def test_env_settings_refused_by_name(settings, message, world):
    with pytest.raises(ConfigError, match=message):
        GRPOConfig(task="arithmetic", model_path=str(world), **settings).validate()


def test_env_is_refused_under_torchrun():
    cfg = GRPOConfig(task="arithmetic", env="calculator", rollout_seeding="group")
    with pytest.raises(ConfigError, match="setting 'env'"):
        cfg.check_world(2)


def test_a_bad_env_on_the_command_line_is_a_message(world, tmp_path, capsys):
    argv = ["--set", "task=arithmetic", "--set", f"model_path={world}", "--set", "env=chess"]
    argv += ["--out", str(tmp_path / "run")]
    assert grpo.main(argv) != 0
    assert "setting 'env': unknown environment 'chess'" in capsys.readouterr().err
