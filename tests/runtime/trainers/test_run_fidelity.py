"""What a run's files say about the run: nothing silent, and the wall budget.

* a graded pair whose grading raised scores 0 and is counted: ``grade/timeouts`` and
  ``grade/errors`` on every train and eval line, in ``rrl eval``'s ``summary.json``, with a
  warning on stderr;
* eval lines carry the mean response length overall, of correct and of incorrect responses;
* ``rrl eval``'s summary lists the first 10 examples of each category in eval order;
* ``config.yaml`` records the code's git commit and package versions, and a saved one still
  works as ``--config`` and for resuming;
* ``max_wall_seconds`` stops a run after the iteration that spends it, evaluated and saved.
"""

from __future__ import annotations

import json

import pytest
import scripted_rollouts
from micro_world import sets
from tiny_model import save_tiny_model

import envs
from reasoning_core.runtime.engines.rollout import Completion
from reasoning_core.runtime.evaluation import evaluate
from reasoning_core.runtime.run.metrics import read_metrics
from reasoning_core.runtime.run.resume import RESUME_MAY_CHANGE
from reasoning_core.runtime.trainers import ei, grpo, sft

COMMON = {
    "task": "arithmetic",
    "eval_examples": 4,
    "eval_max_tokens": 24,
    "progress": False,
    "save_every": 0,
    "seed": 3,
}
GRPO = {
    **COMMON,
    "n_grpo_steps": 2,
    "lr": 1e-3,
    "rollout_batch_size": 8,
    "group_size": 4,
    "train_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "sampling_max_tokens": 24,
    "loss_type": "grpo_clip",
    "eval_every": 1,
    "train_examples": 16,
}
EI = {
    **COMMON,
    "n_ei_steps": 2,
    "ei_batch_size": 4,
    "group_size": 2,
    "batch_size": 2,
    "gradient_accumulation_steps": 1,
    "sampling_max_tokens": 24,
    "train_examples": 8,
    "lr": 1e-3,
}
SFT = {
    **COMMON,
    "sft_pool_size": 24,
    "batch_size": 4,
    "gradient_accumulation_steps": 2,
    "lr": 1e-3,
    "eval_every": 3,
}


REAL_GRADE_BATCH = envs.grade_batch


def grade_batch_raising_on_first(reward_fn, responses, ground_truths, **kwargs):
    """The real ``envs.grade_batch`` with ``reward_fn`` wrapped so that it raises on the first
    item of each call and grades the others in-process with ``reward_fn`` itself."""
    seen = []

    def fast(response, ground_truth):
        seen.append(response)
        if len(seen) == 1:
            raise ValueError("boom: a reward function that fails on one item")
        return reward_fn(response, ground_truth)

    def flaky(response, ground_truth):  # never reached: fast decides every item
        raise AssertionError("unreachable")

    flaky.fast = fast
    return REAL_GRADE_BATCH(flaky, responses, ground_truths, **kwargs)


@pytest.fixture
def one_grading_error(monkeypatch):
    monkeypatch.setattr(envs, "grade_batch", grade_batch_raising_on_first)


# --------------------------------------------------------------------------- grading counts


class EchoEngine:
    """Answers prompt k with ``responses[k]`` (``len(text) // 2`` tokens)."""

    def __init__(self, responses):
        self.responses = responses

    def generate(self, prompts, params):
        out = []
        for i, _ in enumerate(prompts):
            text = self.responses[i]
            ids = list(range(len(text) // 2))
            out.append([Completion(text, ids, [0.0] * len(ids), "stop")])
        return out

    def sync_weights(self, model):
        pass


def scripted(examples, kinds):
    """One response per example: ``c`` correct, ``w`` wrong answer, ``f`` bad format."""
    texts = {
        "c": lambda ex: f"ok </think> <answer>{ex.ground_truth}</answer>",
        "w": lambda ex: "a longer wrong one </think> <answer>-123456789</answer>",
        "f": lambda ex: f"the answer is {ex.ground_truth}",
    }
    return [texts[k](ex) for ex, k in zip(examples, kinds, strict=True)]


def test_rrl_eval_counts_a_grading_error_and_warns(
    tmp_path, monkeypatch, capsys, one_grading_error
):
    task = envs.get_task("arithmetic")
    examples = task.load("test", limit=6)
    engine = EchoEngine(scripted(examples, "cccwwf"))
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: engine)
    model_dir = save_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    argv = sets({"model_path": str(model_dir), "task": "arithmetic", "eval_examples": 6})
    assert evaluate.main([*argv, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: grading timed out on 0 and raised on 1 of 6 responses" in err, err

    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["grade/errors"] == 1
    assert summary["metrics"]["grade/timeouts"] == 0
    # The first (correct) response scored 0: it counts as bad format now, and is named.
    assert summary["metrics"]["correct"] == 2 and summary["metrics"]["bad_format"] == 2
    (line,) = read_metrics(out)
    assert (line["grade/errors"], line["grade/timeouts"]) == (1, 0)
    # Response lengths: the means over the records the grader scored 1 and over the others.
    records = [json.loads(x) for x in (out / "generations" / "step_000000.jsonl").open()]
    right = [r["response_length"] for r in records if r["answer_reward"] == 1.0]
    wrong = [r["response_length"] for r in records if r["answer_reward"] != 1.0]
    assert len(right) == 2 and len(wrong) == 4
    assert line["response_length_correct"] == pytest.approx(sum(right) / 2)
    assert line["response_length_incorrect"] == pytest.approx(sum(wrong) / 4)
    assert line["response_length"] == pytest.approx((sum(right) + sum(wrong)) / 6)


def test_clean_grading_counts_zero_and_does_not_warn(tmp_path, capsys):
    task = envs.get_task("arithmetic")
    examples = task.load("test", limit=3)
    engine = EchoEngine(scripted(examples, "wwf"))
    result = evaluate.evaluate_policy(engine, examples, task, "r1_zero", evaluate_params())
    assert (result.summary["grade/timeouts"], result.summary["grade/errors"]) == (0, 0)
    assert result.summary["response_length_correct"] is None  # no correct response
    assert "warning" not in capsys.readouterr().err


def evaluate_params():
    from reasoning_core.runtime.engines.rollout import SamplingParams

    return SamplingParams(max_tokens=32)


def check_eval_lines(records, errors=1):
    evals = [r for r in records if r["split"] == "eval"]
    assert evals
    for line in evals:
        assert (line["grade/errors"], line["grade/timeouts"]) == (errors, 0), line
        for key in ("response_length", "response_length_correct", "response_length_incorrect"):
            assert key in line, (key, line)


def test_grpo_lines_carry_grading_errors(world, tmp_path, capsys, one_grading_error):
    out = tmp_path / "grpo"
    assert grpo.main([*sets({**GRPO, "model_path": str(world)}), "--out", str(out)]) == 0
    records = read_metrics(out)
    train = [r for r in records if r["split"] == "train"]
    assert len(train) == 4  # 2 GRPO steps x 2 optimizer steps
    for line in train:  # one rollout per batch raised; the batch's lines say so
        assert (line["grade/errors"], line["grade/timeouts"]) == (1, 0), line
    check_eval_lines(records)
    assert "raised on 1 of 4 responses" in capsys.readouterr().err


def test_ei_lines_carry_grading_errors(world, tmp_path, monkeypatch, one_grading_error):
    scripted_rollouts.install(monkeypatch)  # a correct rollout per question: SFT steps happen
    out = tmp_path / "ei"
    assert ei.main([*sets({**EI, "model_path": str(world)}), "--out", str(out)]) == 0
    records = read_metrics(out)
    train = [r for r in records if r["split"] == "train"]
    assert any("loss" in r for r in train) and any("kept" in r for r in train)
    for line in train:
        assert (line["grade/errors"], line["grade/timeouts"]) == (1, 0), line
    check_eval_lines(records)


def test_sft_filter_correct_counts_its_grading(world, tmp_path, one_grading_error):
    out = tmp_path / "sft"
    values = {**SFT, "filter_correct": True, "max_steps": 2, "model_path": str(world)}
    assert sft.main([*sets(values), "--out", str(out)]) == 0
    records = read_metrics(out)
    train = [r for r in records if r["split"] == "train"]
    assert len(train) == 2
    for line in train:
        assert (line["grade/errors"], line["grade/timeouts"]) == (1, 0), line
    check_eval_lines(records)
    done = json.loads((out / "done.json").read_text())
    assert (done["grade/errors"], done["grade/timeouts"]) == (1, 0)


# --------------------------------------------------------------------------- summary examples


def test_summary_lists_the_first_ten_of_each_category_in_eval_order(tmp_path, monkeypatch):
    task = envs.get_task("arithmetic")
    examples = task.load("test", limit=36)
    kinds = "cwf" * 12
    engine = EchoEngine(scripted(examples, kinds))
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: engine)
    model_dir = save_tiny_model(tmp_path / "model")
    argv = sets({"model_path": str(model_dir), "task": "arithmetic", "eval_examples": 36})
    for out in (tmp_path / "a", tmp_path / "b"):
        assert evaluate.main([*argv, "--out", str(out)]) == 0
    first, second = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    assert first["categories"] == second["categories"]  # the same examples on a rerun
    ids = [ex.id for ex in examples]
    for name, kind in (("correct", "c"), ("wrong_answer", "w"), ("bad_format", "f")):
        listed = first["categories"][name]
        assert listed["count"] == 12
        want = [ids[i] for i, k in enumerate(kinds) if k == kind][:10]
        assert [r["id"] for r in listed["examples"]] == want, name


# --------------------------------------------------------------------------- wall-clock budget


@pytest.mark.parametrize(
    ("module", "base", "per_iteration"),
    [(grpo, GRPO, 2), (ei, EI, None), (sft, {**SFT, "max_steps": 4}, 1)],
)
def test_max_wall_seconds_stops_evaluates_and_saves(
    world, tmp_path, monkeypatch, module, base, per_iteration
):
    """A budget of 1 microsecond is spent by the first iteration: the run stops there, with an
    evaluation at the step reached, a checkpoint and done.json saying so."""
    scripted_rollouts.install(monkeypatch)  # EI keeps a rollout per question: it takes steps
    out = tmp_path / "run"
    values = {**base, "eval_every": 0, "save_every": 1, "model_path": str(world)}
    argv = [*sets({**values, "max_wall_seconds": 1e-6}), "--out", str(out)]
    assert module.main(argv) == 0
    done = json.loads((out / "done.json").read_text())
    records = read_metrics(out)
    last_step = max(r["step"] for r in records)
    assert done["stopped_on_budget"] is True
    assert done["iterations_done"] == 1 and done["iterations_planned"] > 1
    assert done["step"] == last_step >= 1
    if per_iteration is not None:  # optimizer steps of one iteration (EI's depend on kept)
        assert last_step == per_iteration
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, last_step]  # at start and where it stopped
    assert done["eval_accuracy"] == evals[-1]["accuracy"]
    assert (out / "checkpoint" / "config.json").is_file()
    assert not (out / "state").exists()


def test_unspent_budget_runs_to_the_end(world, tmp_path):
    out = tmp_path / "run"
    values = {**SFT, "max_steps": 2, "max_wall_seconds": 3600, "model_path": str(world)}
    assert sft.main([*sets(values), "--out", str(out)]) == 0
    done = json.loads((out / "done.json").read_text())
    assert done["stopped_on_budget"] is False and done["step"] == 2
    # A run that spent none of its budget did every iteration it planned.
    assert done["iterations_done"] == done["iterations_planned"] == 2


def test_bad_budget_is_named(world, tmp_path, capsys):
    values = {**SFT, "max_wall_seconds": 0, "model_path": str(world)}
    assert sft.main([*sets(values), "--out", str(tmp_path / "run")]) == 2
    assert "setting 'max_wall_seconds' must be > 0" in capsys.readouterr().err
    assert "max_wall_seconds" in RESUME_MAY_CHANGE  # when to stop, not what a step computes
