"""Zero-shot evaluation end to end on a handful of arithmetic problems, and log_generations."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from micro_world import sets
from tiny_model import build_model, build_tokenizer, save_tiny_model

from reasoning_core.runtime.engines import ENGINE_DEFAULT
from reasoning_core.runtime.engines.rollout import Completion, SamplingParams
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation import evaluate, generations
from reasoning_core.runtime.evaluation.loop import chunk_seed
from reasoning_core.runtime.evaluation.safety_judge import SafetyJudgeConfig
from reasoning_core.runtime.evaluation.suite import EvalSuiteConfig
from reasoning_core.runtime.evaluation.supplement_generate import SupplementGenerateConfig
from reasoning_core.runtime.settings.config import build_config
from reasoning_core.runtime.training.rollouts import EVAL_RENAMED
from reasoning_core.runtime.training.settings import CommonConfig


class ScriptedEngine:
    """Answers example k (in prompt order) with ``responses[k % len(responses)]``."""

    def __init__(self, responses):
        self.responses = responses
        self.calls = []
        self.answered = 0

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        out = []
        for _ in prompts:
            text = self.responses[self.answered % len(self.responses)]
            self.answered += 1
            ids = list(range(len(text) // 2 + 1))
            out.append([Completion(text, ids, [0.0] * len(ids), "stop")] * params.n)
        return out

    def sync_weights(self, model):
        pass


@pytest.fixture(scope="module")
def examples(task):
    return task.load("test", limit=6)


def scripted_for(examples):
    """Two correct, two with a wrong answer, two badly formatted responses."""
    texts = []
    for i, ex in enumerate(examples):
        if i % 3 == 0:
            texts.append(f"easy </think> <answer>{ex.ground_truth}</answer>")
        elif i % 3 == 1:
            texts.append("hmm </think> <answer>-123456789</answer>")
        else:
            texts.append(f"the answer is {ex.ground_truth}")
    return texts


def test_evaluate_policy_counts_categories(task, examples):
    engine = ScriptedEngine(scripted_for(examples))
    params = SamplingParams(max_tokens=32)
    summary, records = evaluate.evaluate_policy(
        engine, examples, task, "r1_zero", params, batch_size=4
    )
    assert [len(p) for p, _ in engine.calls] == [4, 2]
    assert (summary["correct"], summary["wrong_answer"], summary["bad_format"]) == (2, 2, 2)
    assert summary["accuracy"] == pytest.approx(2 / 6)
    assert summary["format_reward"] == pytest.approx(4 / 6)
    assert summary["num_examples"] == 6
    assert [r["category"] for r in records] == ["correct", "wrong_answer", "bad_format"] * 2
    for r, ex in zip(records, examples, strict=True):
        assert r["prompt"] == task.format_prompt(ex, "r1_zero")
        assert r["ground_truth"] == ex.ground_truth
        assert r["finish_reason"] == "stop"
        assert r["response_length"] > 0
        assert {"reward", "format_reward", "answer_reward"} <= set(r)
    report = evaluate.category_report(records, examples_per_category=1)
    assert {k: v["count"] for k, v in report.items()} == {
        "correct": 2,
        "wrong_answer": 2,
        "bad_format": 2,
    }
    assert all(len(v["examples"]) == 1 for v in report.values())


def test_each_engine_call_of_an_evaluation_samples_from_its_own_seed(task, examples):
    """Calls of one evaluation must not replay one random stream (rows k and k + batch_size
    would share their draws): the first call keeps the seed, the others get distinct ones."""
    engine = ScriptedEngine(scripted_for(examples))
    evaluate.evaluate_policy(
        engine, examples, task, "r1_zero", SamplingParams(max_tokens=32, seed=7), batch_size=2
    )
    seeds = [params.seed for _, params in engine.calls]
    assert len(seeds) == 3 and seeds[0] == 7 and len(set(seeds)) == 3
    assert seeds == [chunk_seed(7, k) for k in range(3)]

    unseeded = ScriptedEngine(scripted_for(examples))
    evaluate.evaluate_policy(
        unseeded, examples, task, "r1_zero", SamplingParams(max_tokens=32), batch_size=4
    )
    assert [params.seed for _, params in unseeded.calls] == [None, None]


def test_chunk_seeds_of_nearby_eval_seeds_do_not_collide():
    """Seed N's later calls must not start where seed N + 1's first call does (seed + k)."""
    seeds = [chunk_seed(s, k) for s in range(50) for k in range(8)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= x < 2**31 for x in seeds)
    assert chunk_seed(3, 2) == chunk_seed(3, 2)  # deterministic across calls


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A complete model folder (random tiny weights + tokenizer): passes the folder check."""
    return save_tiny_model(tmp_path_factory.mktemp("model") / "m")


@pytest.fixture
def six_problems(model_dir):
    """The `rrl eval` settings of the end-to-end tests: the tiny model, six arithmetic problems
    (a fresh list per test, to extend)."""
    return sets({"model_path": str(model_dir), "task": "arithmetic", "eval_examples": 6})


def test_rrl_eval_writes_run_folder(tmp_path, monkeypatch, examples, six_problems, capsys):
    """The command end to end; the engine is scripted so the counts are known."""
    engine = ScriptedEngine(scripted_for(examples))
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: engine)
    out = tmp_path / "run"
    argv = six_problems
    assert evaluate.main([*argv, "--set", "eval_split=test", "--out", str(out)]) == 0
    assert engine.calls[0][1].temperature == 1.0 and engine.calls[0][1].stop == ["</answer>"]

    lines = (out / "generations" / "step_000000.jsonl").read_text().splitlines()
    assert len(lines) == 6
    first = json.loads(lines[0])
    for key in (
        "prompt",
        "response",
        "ground_truth",
        "reward",
        "format_reward",
        "answer_reward",
        "response_length",
        "finish_reason",
    ):
        assert key in first
    summary = json.loads((out / "summary.json").read_text())
    assert {k: v["count"] for k, v in summary["categories"].items()} == {
        "correct": 2,
        "wrong_answer": 2,
        "bad_format": 2,
    }
    (metrics,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 0 and metrics["split"] == "eval"
    assert metrics["accuracy"] == pytest.approx(2 / 6) and metrics["num_examples"] == 6
    done = json.loads((out / "done.json").read_text())
    assert done["eval_accuracy"] == pytest.approx(2 / 6)
    assert done["eval_format_reward"] == pytest.approx(4 / 6)
    assert done["eval_examples"] == 6
    assert (out / "config.yaml").is_file()
    # a finished run is not redone, and says so (its numbers may come from other settings)
    capsys.readouterr()
    assert evaluate.main([*argv, "--out", str(out)]) == 0
    assert len(engine.calls) == 1
    assert f"{out} is already complete (done.json)" in capsys.readouterr().err


def test_rrl_eval_samples_with_its_seed_setting(tmp_path, monkeypatch, examples, six_problems):
    """Zero-shot runs once per seed of the study (`rrl eval --set seed=N`): seed N must reach
    the engine, so that zero-shot seed N draws what a trainer's step 0 with seed N draws."""
    engine = ScriptedEngine(scripted_for(examples))
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: engine)
    argv = six_problems
    for seed in (0, 3):
        out = tmp_path / f"seed{seed}"
        assert evaluate.main([*argv, "--set", f"seed={seed}", "--out", str(out)]) == 0
        assert engine.calls[-1][1].seed == seed


@pytest.mark.parametrize("engine", ["hf", "static"])
def test_rrl_eval_with_a_real_engine(model_dir, tmp_path, engine):
    out = tmp_path / "run"
    settings = {"model_path": str(model_dir), "task": "arithmetic", "eval_split": "test"}
    argv = [*sets({**settings, "eval_examples": 4, "engine": engine, "eval_max_tokens": 12})]
    argv += ["--out", str(out)]
    assert evaluate.main(argv) == 0
    records = [
        json.loads(x) for x in (out / "generations/step_000000.jsonl").read_text().splitlines()
    ]
    assert len(records) == 4
    assert all(1 <= r["response_length"] <= 12 for r in records)
    summary = json.loads((out / "summary.json").read_text())["metrics"]
    assert summary["correct"] + summary["wrong_answer"] + summary["bad_format"] == 4
    assert json.loads((out / "done.json").read_text())["eval_examples"] == 4


def test_rrl_eval_gives_engine_kwargs_to_its_engine(model_dir, tmp_path, capsys):
    """Setting engine_kwargs reaches the static engine (the trainers' evaluations sample with
    their engine's options, so rrl eval draws theirs only with the same ones); an option the
    engine does not take is named before any work, and vLLM's options are refused before any
    work too, naming the settings that carry them."""
    base = {"model_path": str(model_dir), "task": "arithmetic", "device": "cpu"}
    options = {"max_batch_size": 8, "row_step": 4}
    cfg = build_config(evaluate.EvalConfig, {**base, "engine": "static", "engine_kwargs": options})
    engine = evaluate.build_engine(cfg)
    assert (engine.max_batch_size, engine.row_step) == (8, 4)
    sections = {"static": options, "hf": {"max_batch_size": 2}}
    cfg = build_config(evaluate.EvalConfig, {**base, "engine": "hf", "engine_kwargs": sections})
    assert evaluate.build_engine(cfg).max_batch_size == 2
    argv = [*sets({**base, "engine": "static", "engine_kwargs": {"rows": 8}})]
    assert evaluate.main([*argv, "--out", str(tmp_path / "r")]) == 2
    assert "engine_kwargs" in capsys.readouterr().err and not (tmp_path / "r").exists()
    for engine, given in (("vllm", {"max_model_len": 64}), ("static", {"vllm": {"seed": 1}})):
        argv = [*sets({**base, "engine": engine, "engine_kwargs": given})]
        assert evaluate.main([*argv, "--out", str(tmp_path / "v")]) == 2
        assert "max_model_len, kv_cache_memory_bytes" in capsys.readouterr().err
        assert not (tmp_path / "v").exists()


def test_bad_eval_config_is_named(tmp_path, capsys):
    argv = ["--set", "model_path=x", "--set", "task=chess", "--out", str(tmp_path / "r")]
    assert evaluate.main(argv) == 2
    assert "task" in capsys.readouterr().err


def test_interrupted_eval_leaves_nothing_marked_complete_and_reruns(
    tmp_path, monkeypatch, examples, six_problems
):
    """Stopped mid-generation (Ctrl-C; kill -9 stops at the same point or earlier), the run
    folder holds only config.yaml: no done.json for Snakemake or `rrl summary` to count, no
    metrics or summary for a plot. The rerun then completes it."""
    from reasoning_core.runtime.report.runs import find_runs

    class Interrupted(ScriptedEngine):
        def generate(self, prompts, params):
            if self.calls:
                raise KeyboardInterrupt
            return super().generate(prompts, params)

    out = tmp_path / "results" / "zero_shot"
    argv = six_problems
    argv += ["--set", "eval_batch_size=2", "--out", str(out)]
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: Interrupted(scripted_for(examples)))
    with pytest.raises(KeyboardInterrupt):
        evaluate.main(argv)
    assert sorted(p.name for p in out.iterdir()) == [".rrl-run", "config.yaml"]
    assert find_runs(tmp_path / "results") == []
    engine = ScriptedEngine(scripted_for(examples))
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: engine)
    assert evaluate.main(argv) == 0
    assert json.loads((out / "done.json").read_text())["eval_examples"] == 6
    assert find_runs(tmp_path / "results") == [out]


def _damage(folder, how):
    if how == "no weights":
        (folder / "model.safetensors").unlink()
        return "no weights"
    if how == "truncated weights":
        path = folder / "model.safetensors"
        path.write_bytes(path.read_bytes()[:-100])  # a copy or save that stopped early
        return "model.safetensors: truncated"
    if how == "no tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).unlink(missing_ok=True)
        return "no tokenizer"
    if how == "corrupt tokenizer":
        (folder / "tokenizer.json").write_text('{"version": ')
        return "tokenizer.json: tokenizer.json is not readable JSON"
    if how == "corrupt config":
        (folder / "config.json").write_text('{"model_type": "qwen2",')
        return "config.json: config.json is not readable JSON"
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    ["no weights", "truncated weights", "no tokenizer", "corrupt tokenizer", "corrupt config"],
)
def test_damaged_model_folder_is_named_before_any_work(how, model_dir, tmp_path, capsys):
    import shutil

    from reasoning_core.runtime import cli

    folder = tmp_path / "model"
    shutil.copytree(model_dir, folder)
    needle = _damage(folder, how)
    out = tmp_path / "run"
    argv = ["eval", "--set", f"model_path={folder}", "--set", "task=arithmetic"]
    rc = cli.main([*argv, "--set", "engine=hf", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("rrl eval: setting 'model_path': ") and needle in err, err
    assert not out.exists()


def test_bad_data_path_is_named_and_leaves_no_run_folder(model_dir, tmp_path, capsys):
    data = tmp_path / "test.jsonl"
    data.write_text('{"id": "a", "question": "1+1", "ground_truth": 2}\n{"id": ')
    for path, needle in [(tmp_path / "nope.jsonl", "nope.jsonl: file not found"), (data, ":2:")]:
        out = tmp_path / "run"
        argv = sets({"model_path": str(model_dir), "task": "arithmetic", "engine": "hf"})
        assert evaluate.main([*argv, "--set", f"data_path={path}", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rrl eval: setting 'data_path': {path}") and needle in err, err
        assert not out.exists()


def test_unknown_split_or_template_fails_before_any_work(model_dir, tmp_path, capsys):
    for bad in ("eval_split=dev", "template=chatml"):
        argv = ["--set", f"model_path={model_dir}", "--set", "task=arithmetic", "--set", bad]
        assert evaluate.main([*argv, "--out", str(tmp_path / "r")]) == 2
        assert repr(bad.partition("=")[2]) in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_log_generations():
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer))
    prompts = ["x = 3", "The answer is"]
    responses = [" </think> <answer> 3 </answer>", " 5 5"]
    rewards = [
        {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0},
        {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0},
    ]
    out = generations.log_generations(model, tokenizer, prompts, responses, ["3", "4"], rewards)
    assert not model.training  # the caller's mode is restored (an eval-mode model stays so)
    recs = out["records"]
    assert [r["reward"] for r in recs] == [1.0, 0.0]
    lengths = [len(tokenizer.encode(r, add_special_tokens=False)) for r in responses]
    assert [r["response_length"] for r in recs] == lengths
    assert out["mean_response_length"] == pytest.approx(sum(lengths) / 2)
    assert out["mean_response_length_correct"] == lengths[0]
    assert out["mean_response_length_incorrect"] == lengths[1]
    # entropy of each response = mean over its tokens of the next-token entropy (plain forward)
    for prompt, response, rec in zip(prompts, responses, recs, strict=True):
        p = tokenizer.encode(prompt, add_special_tokens=False)
        r = tokenizer.encode(response, add_special_tokens=False)
        with torch.no_grad():
            logits = model(torch.tensor([p + r])).logits[0, len(p) - 1 : len(p) + len(r) - 1]
        ent = -(logits.log_softmax(-1).exp() * logits.log_softmax(-1)).sum(-1).mean()
        assert rec["mean_token_entropy"] == pytest.approx(float(ent), abs=1e-4)
    assert 0.0 < out["mean_token_entropy"] <= float(torch.log(torch.tensor(len(tokenizer))))


class TwoSampleEngine(ScriptedEngine):
    """Per prompt: sample 0 is right and stops after 3 tokens; sample 1 has a wrong answer
    in 5 tokens, cut at the token limit (``finish_reason`` length) for every other prompt.
    Token counts differ from text lengths."""

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        out = []
        for i, prompt in enumerate(prompts):
            truth = self.responses[prompt]
            good = Completion(f"ok </think> <answer>{truth}</answer>", [1, 2, 3], [0.0] * 3, "stop")
            why = "length" if i % 2 == 0 else "stop"
            bad = Completion("no </think> <answer>-1</answer>", [4] * 5, [0.0] * 5, why)
            out.append([good, bad][: params.n])
        return out


def test_rrl_eval_with_several_samples_per_example(
    tmp_path, monkeypatch, task, examples, six_problems
):
    """samples_per_problem=2: every sample is graded and counted; means are over responses, the example count
    (done.json, summary) over examples."""
    truths = {task.format_prompt(ex, "r1_zero"): ex.ground_truth for ex in examples}
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: TwoSampleEngine(truths))
    out = tmp_path / "run"
    argv = six_problems
    assert evaluate.main([*argv, "--set", "samples_per_problem=2", "--out", str(out)]) == 0
    lines = (out / "generations" / "step_000000.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert [(r["id"], r["sample"]) for r in records] == [
        (ex.id, j) for ex in examples for j in (0, 1)
    ]
    assert [r["response_length"] for r in records] == [3, 5] * 6
    metrics = json.loads((out / "summary.json").read_text())["metrics"]
    assert metrics["accuracy"] == pytest.approx(0.5) and metrics["format_reward"] == 1.0
    assert (metrics["num_examples"], metrics["num_responses"]) == (6, 12)
    assert (metrics["correct"], metrics["wrong_answer"], metrics["bad_format"]) == (6, 6, 0)
    assert metrics["response_length"] == pytest.approx(4.0)
    assert metrics["finish_length_fraction"] == pytest.approx(3 / 12)
    assert metrics["truncated"] == pytest.approx(3 / 12)  # on the eval line too:
    line = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert line["split"] == "eval" and line["truncated"] == pytest.approx(3 / 12)
    done = json.loads((out / "done.json").read_text())
    assert (done["eval_examples"], done["eval_accuracy"]) == (6, pytest.approx(0.5))


def test_rerun_after_a_crash_before_done_json_logs_one_eval_line(
    tmp_path, monkeypatch, examples, six_problems
):
    """A run killed after its eval line but before done.json is redone; its metrics.jsonl
    must then hold only the new line, not the stale one too."""
    out = tmp_path / "run"
    out.mkdir()
    (out / ".rrl-run").write_text('{"command": "eval"}\n')  # as the killed run left it
    stale = {"step": 0, "split": "eval", "accuracy": 0.99, "num_examples": 6}
    (out / "metrics.jsonl").write_text(json.dumps(stale) + "\n")
    monkeypatch.setattr(
        evaluate, "build_engine", lambda cfg: ScriptedEngine(scripted_for(examples))
    )
    argv = six_problems
    assert evaluate.main([*argv, "--out", str(out)]) == 0
    (line,) = (out / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line)["accuracy"] == pytest.approx(2 / 6)


@pytest.mark.parametrize(("seed", "eval_seed", "drawn"), [(0, None, 0), (2, None, 2), (2, 5, 5)])
def test_a_trainers_evaluation_samples_with_the_runs_seed_unless_eval_seed_is_set(
    task, seed, eval_seed, drawn
):
    """Seeds of a study differ in their evaluation draw too (eval_seed unset follows seed)."""
    from reasoning_core.runtime.trainers.lifecycle import Evaluator
    from reasoning_core.runtime.training.settings import CommonConfig

    cfg = CommonConfig(task="arithmetic", seed=seed, eval_seed=eval_seed, eval_examples=6)
    assert Evaluator(cfg, task, tokenizer=None).params.seed == drawn


def test_a_trainers_evaluation_takes_the_eval_split_and_the_eval_sampling_settings(task):
    """Trainers evaluate on the eval split's first eval_examples problems (never the training
    questions) at eval_temperature / eval_max_tokens, not at the rollouts' settings."""
    from reasoning_core.runtime.trainers.grpo import GRPOConfig
    from reasoning_core.runtime.trainers.lifecycle import Evaluator

    cfg = GRPOConfig(
        task="arithmetic",
        train_split="train",
        eval_split="test",
        eval_examples=6,
        eval_temperature=0.0,
        eval_max_tokens=33,
        sampling_temperature=0.7,
        sampling_max_tokens=40,
    )
    evaluator = Evaluator(cfg, task, tokenizer=None)
    test, train = task.load("test", limit=6), task.load("train", limit=6)
    assert [e.question for e in evaluator.examples] == [e.question for e in test]
    assert not {e.question for e in evaluator.examples} & {e.question for e in train}
    params = evaluator.params
    assert (params.temperature, params.max_tokens, params.n) == (0.0, 33, 1)


@pytest.mark.parametrize(("old", "new"), sorted(evaluate.EvalConfig.RENAMED.items()))
def test_an_old_setting_name_stops_with_the_new_one(model_dir, tmp_path, capsys, old, new):
    """rrl eval's evaluation settings have the trainers' names; an old name is refused before
    any work, naming the one to write instead."""
    argv = ["--set", f"model_path={model_dir}", "--set", f"{old}=1", "--out", str(tmp_path / "r")]
    assert evaluate.main(argv) == 2
    err = capsys.readouterr().err
    assert f"setting {old!r} of EvalConfig was renamed {new!r}" in err, err
    assert new in {f.name for f in dataclasses.fields(evaluate.EvalConfig)}
    assert not (tmp_path / "r").exists()


def test_the_trainers_and_rrl_eval_share_the_evaluation_names_and_engine_default():
    trainer = {f.name: f.default for f in dataclasses.fields(CommonConfig)}
    command = {f.name: f.default for f in dataclasses.fields(evaluate.EvalConfig)}
    for name in (
        "eval_split",
        "eval_examples",
        "eval_temperature",
        "eval_top_p",
        "eval_max_tokens",
        "eval_seed",
        "eval_batch_size",
        "stop",
        "seed",
        "engine",
        "engine_kwargs",
    ):
        assert name in trainer and name in command, name
    assert trainer["engine"] == command["engine"] == "auto"


@pytest.mark.parametrize("cls", [EvalSuiteConfig, SupplementGenerateConfig, SafetyJudgeConfig])
def test_the_other_evaluation_commands_take_rrl_evals_names(cls):
    """rrl eval-suite, supplement-generate and safety-judge name their evaluation settings as
    rrl eval does; an old name is refused naming the new one, and the engine default is one."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert not set(fields) & set(EVAL_RENAMED)
    assert cls.RENAMED
    for old, new in cls.RENAMED.items():
        assert EVAL_RENAMED[old] == new and new in fields
        message = f"setting {old!r} of {cls.__name__} was renamed {new!r}"
        with pytest.raises(ConfigError, match=message):
            build_config(cls, {old: 1})
    assert fields["engine"].default == ENGINE_DEFAULT


CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_template_puts_each_prompt_in_the_users_turn(
    tmp_path, monkeypatch, examples, task, capsys
):
    """With ``chat_template: true`` the engine gets each task prompt inside the tokenizer's
    chat template (user turn, assistant turn opened), the generations record that prompt, and
    the reward reads the responses as without it; a tokenizer without a template is named."""
    plain = save_tiny_model(tmp_path / "plain")
    chat = save_tiny_model(tmp_path / "chat")
    config = json.loads((chat / "tokenizer_config.json").read_text())
    (chat / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHAT}))
    base = ["--set", "task=arithmetic", "--set", "eval_examples=6"]

    def run(model, out, *extra):
        engine = ScriptedEngine(scripted_for(examples))
        monkeypatch.setattr(evaluate, "build_engine", lambda cfg: engine)
        code = evaluate.main([*base, "--set", f"model_path={model}", *extra, "--out", str(out)])
        return code, engine

    code, engine = run(chat, tmp_path / "on", "--set", "chat_template=true")
    assert code == 0
    sent = engine.calls[0][0]
    raw = [task.format_prompt(ex, "r1_zero") for ex in examples]
    assert sent == [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in raw]
    records = [
        json.loads(x)
        for x in (tmp_path / "on/generations/step_000000.jsonl").read_text().splitlines()
    ]
    assert [r["prompt"] for r in records] == sent
    summary = json.loads((tmp_path / "on/summary.json").read_text())
    assert summary["chat_template"] is True
    code, engine = run(chat, tmp_path / "off")
    assert code == 0 and engine.calls[0][0] == raw
    off = json.loads((tmp_path / "off/done.json").read_text())
    on = json.loads((tmp_path / "on/done.json").read_text())
    assert on["eval_accuracy"] == off["eval_accuracy"] == pytest.approx(2 / 6)

    capsys.readouterr()
    code, engine = run(plain, tmp_path / "none", "--set", "chat_template=true")
    assert code == 2 and engine.calls == []
    assert "setting 'chat_template' is true but the tokenizer of" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


class CallingEngine:
    """Answers the first turn of every episode with a calculator call and the second with
    the answer -1 (never right), as token ids of ``tokenizer``; records each call's prompts."""

    TURNS = (" <calc>2+3</calc>", " </think> <answer> -1 </answer>")

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def generate(self, prompts, params):
        text = self.TURNS[min(len(self.calls), 1)]
        self.calls.append(list(prompts))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        out = Completion(text, ids, [-0.5] * len(ids), "stop")
        return [[out] * params.n for _ in prompts]

    def sync_weights(self, model):
        pass


def test_rrl_eval_with_the_calculator_samples_episodes(
    tmp_path, monkeypatch, model_dir, six_problems, capsys
):
    """Setting env=calculator: each problem is an episode (the environment's prompt, the call
    answered, the transcript graded as a whole); the eval line and summary.json carry the
    episodes' tool/ means, and entropy is null when the engine holds no model to give it."""
    from transformers import AutoTokenizer

    engine = CallingEngine(AutoTokenizer.from_pretrained(model_dir))
    monkeypatch.setattr(evaluate, "build_engine", lambda cfg: engine)
    out = tmp_path / "run"
    argv = [*six_problems, "--set", "env=calculator", "--set", "tool_prompt=r1_zero_calc"]
    assert evaluate.main([*argv, "--out", str(out)]) == 0
    first, second = engine.calls
    assert len(first) == 6 and all("<calc>12*34</calc>" in p for p in first)  # r1_zero_calc
    assert len(second) == 6 and all(isinstance(p, list) for p in second)  # token ids
    records = [
        json.loads(x) for x in (out / "generations/step_000000.jsonl").read_text().splitlines()
    ]
    assert all(
        r["response"] == " <calc>2+3</calc> <result>5</result>" + CallingEngine.TURNS[1]
        for r in records
    )
    assert all(r["format_reward"] == 1.0 and r["answer_reward"] == 0.0 for r in records)
    (line,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert line["tool/call_rate"] == 1.0 and line["tool/calls"] == 1.0
    assert line["tool/turns"] == 2.0 and line["tool/errors"] == 0.0
    assert "tool/bonus" not in line  # nothing trains in an evaluation
    summary = json.loads((out / "summary.json").read_text())["metrics"]
    assert summary["tool/call_rate"] == 1.0 and summary["entropy"] is None
    assert "entropy: null" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["hf", "static"])
def test_rrl_eval_with_the_calculator_on_a_real_engine(model_dir, tmp_path, engine):
    out = tmp_path / "run"
    settings = {"model_path": str(model_dir), "task": "arithmetic", "eval_examples": 4}
    settings |= {"engine": engine, "eval_max_tokens": 12, "env": "calculator"}
    assert evaluate.main([*sets({**settings, "tool_prompt": "r1_zero"}), "--out", str(out)]) == 0
    records = [
        json.loads(x) for x in (out / "generations/step_000000.jsonl").read_text().splitlines()
    ]
    assert len(records) == 4 and all(1 <= r["response_length"] <= 12 for r in records)
    summary = json.loads((out / "summary.json").read_text())["metrics"]
    assert 0.0 <= summary["tool/call_rate"] <= 1.0 and summary["tool/turns"] >= 1.0
    assert summary["entropy"] is not None  # the policy's own tokens, from the engine


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"env": "chess"}, "setting 'env': unknown environment 'chess'"),
        ({"tool_prompt": "r1_zero"}, "'tool_prompt' belongs to env calculator"),
        ({"env": "calculator", "tool_max_calls": 0}, "tool_max_calls"),
        ({"env": "calculator", "template": "question_only"}, "setting 'env'.*r1_zero"),
        ({"env": "calculator", "chat_template": True}, "'chat_template' cannot be used"),
    ],
)
def test_rrl_eval_env_settings_refused_by_name(model_dir, settings, message):
    cfg = evaluate.EvalConfig(model_path=str(model_dir), task="arithmetic", **settings)
    with pytest.raises(ConfigError, match=message):
        cfg.validate()
