"""What the GRPO and EI rollouts sample: each step draws its own questions, and rollouts and
evaluations sample from the policy's current weights."""

from __future__ import annotations

import pytest
from micro_world import (
    EI,
    GRPO,
    QUIET,
    fake_grade,
    run_trainer,
    train_lines,
)

from reasoning_core.runtime.trainers import ei, grpo
from reasoning_core.runtime.training import rollouts as sampling


@pytest.mark.parametrize("module", ["grpo", "ei"])
def test_each_step_samples_its_own_questions(world, tmp_path, monkeypatch, module):
    """Two rollout steps ask different questions of the training pool (drawn per step)."""
    from reasoning_core.runtime.trainers import lifecycle as run

    prompts: list[set[str]] = []
    real = run.make_rollout_engine

    class Recorder:
        def __init__(self, inner):
            self.inner = inner

        def sync_weights(self, model):
            self.inner.sync_weights(model)

        def generate(self, batch, params):
            if params.n > 1:  # rollouts, not evaluation
                prompts.append(set(batch))
            return self.inner.generate(batch, params)

    monkeypatch.setattr(run, "make_rollout_engine", lambda *a: Recorder(real(*a)))
    mod = {"grpo": grpo, "ei": ei}[module]
    monkeypatch.setattr(sampling, "grade", fake_grade)
    small = {**QUIET, "sampling_max_tokens": 8, "train_examples": 16}
    if module == "grpo":
        cfg = {**GRPO, **small, "n_grpo_steps": 2, "rollout_batch_size": 8}
    else:
        cfg = {**EI, **small, "n_ei_steps": 2, "ei_batch_size": 2}
    run_trainer(mod, cfg, world, tmp_path / "run")
    assert len(prompts) == 2 and len(prompts[0]) == 2
    assert prompts[0] != prompts[1]


class _SeparateWeightsEngine:
    """An HF engine over its own copy of the policy (as vLLM holds one): it samples from the
    policy's current weights only if the trainer syncs them. Records whether, at each
    ``generate``, its weights were the live policy's."""

    def __init__(self, model, tokenizer):
        import copy

        from reasoning_core.runtime.engines.hf import HFEngine

        self.live = model
        self.inner = HFEngine(copy.deepcopy(model), tokenizer)
        self.in_sync: list[bool] = []

    def sync_weights(self, model):
        self.inner.sync_weights(model)

    def generate(self, prompts, params):
        import torch

        pairs = zip(self.live.parameters(), self.inner.model.parameters(), strict=True)
        self.in_sync.append(all(torch.equal(a, b) for a, b in pairs))
        return self.inner.generate(prompts, params)


@pytest.mark.parametrize("module", ["grpo", "ei"])
def test_rollouts_and_evals_sample_from_the_current_weights(world, tmp_path, monkeypatch, module):
    from reasoning_core.runtime.trainers import lifecycle as run

    engines: list[_SeparateWeightsEngine] = []

    def make(kind, model, tokenizer, **kwargs):
        engines.append(_SeparateWeightsEngine(model, tokenizer))
        return engines[-1]

    monkeypatch.setattr(run, "make_engine", make)
    mod = {"grpo": grpo, "ei": ei}[module]
    monkeypatch.setattr(sampling, "grade", fake_grade)
    # No evaluation between the steps (its weight sync would hide a missing one before a
    # rollout); one at the start and one at the end.
    small = {"eval_at_start": True, "eval_every": 0, "save_every": 0, "eval_examples": 2}
    if module == "grpo":
        cfg = {**GRPO, **small, "n_grpo_steps": 2, "rollout_batch_size": 8}
    else:
        cfg = {**EI, **small, "n_ei_steps": 2, "ei_batch_size": 8}
    train = train_lines(run_trainer(mod, cfg, world, tmp_path / "run"))
    assert any(r.get("grad_norm", 0) > 0 for r in train)  # the weights did change
    (engine,) = engines
    # The start eval, two rollouts, the final eval.
    assert engine.in_sync == [True] * 4


@pytest.mark.parametrize("template", ["r1_zero", "question_only"])
def test_rollouts_prompt_with_the_runs_template(template):
    """The prompt ablation (template question_only) must reach the engine: each question is
    formatted with the run's template, not with r1_zero's."""
    import envs
    from reasoning_core.runtime.engines.rollout import Completion
    from reasoning_core.runtime.trainers.grpo import GRPOConfig

    task = envs.get_task("arithmetic")
    questions = task.load("train", limit=6)
    cfg = GRPOConfig(template=template, group_size=2, seed=3)
    rollouts = sampling.Rollouts.from_config(cfg, task, questions)

    class Recorder:
        prompts: list[str] = []

        def sync_weights(self, model):
            pass

        def generate(self, prompts, params):
            self.prompts = list(prompts)
            return [[Completion(" 1", [1], [-0.1], "stop")] * params.n for _ in prompts]

    engine = Recorder()
    batch = sampling.sample_and_grade(engine, None, rollouts, step=0, count=3)
    formatted = {task.format_prompt(q, template) for q in questions}
    assert engine.prompts and all(p in formatted for p in engine.prompts)
    other = "question_only" if template == "r1_zero" else "r1_zero"
    assert not any(p == task.format_prompt(q, other) for p in engine.prompts for q in questions)
    assert len(batch.responses) == 6 and batch.prompts[::2] == engine.prompts
