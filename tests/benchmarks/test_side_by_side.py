"""benchmarks/side_by_side.py at toy sizes: both training sides get the same work from the
default study's GRPO settings (and a difference is refused by name), our side and the engine
part run and give per-step and per-contender numbers, the report computes its ratios. TRL's
side runs only where TRL is installed (the benchmark's own environment); elsewhere that test
is skipped and says why."""

from __future__ import annotations

import importlib.util

import pytest
import yaml
from project_root import ROOT, load_script

STUDY = ROOT / "results/default/grpo/default/seed~0/config.yaml"
TINY = ROOT / "workflow/resources/tiny_world"
NO_TRL = (
    "trl is not installed in this environment: it lives only in the benchmark's own "
    "environment (bash benchmarks/side_by_side_env.sh makes .venv-bench)"
)


def sbs():
    return load_script("benchmarks/side_by_side.py")


def study() -> dict:
    return yaml.safe_load(STUDY.read_text())


def toy(mod, steps: int = 3):
    return mod.study_work(
        study(),
        str(TINY),
        steps,
        prompts_per_step=2,
        group_size=4,
        micro_batch=4,
        max_new_tokens=8,
        min_new_tokens=1,
    )


def test_both_sides_get_the_default_studys_work():
    mod = sbs()
    work = mod.study_work(study(), str(TINY), 7)
    assert (work.prompts_per_step, work.group_size, work.completions) == (16, 8, 128)
    assert (work.max_new_tokens, work.micro_batch, work.accumulation) == (48, 32, 4)
    rows = mod.same_work(mod.ours_config(study(), work), mod.trl_config_kwargs(work, "x"))
    mod.check_same_work(rows)  # raises on any difference
    got = {name: (a, b) for name, a, b in rows}
    assert got["completions per step"] == (128, 128)
    assert got["optimizer steps per step"] == (1, 1)
    assert got["KL coefficient"] == (0.0, 0.0)
    assert got["log-prob pass before the update"] == (False, False)
    assert got["evaluation during the timed steps"] == (False, False)
    assert got["stop strings"] == (["</answer>"], ["</answer>"])


def test_a_difference_is_refused_by_name():
    mod = sbs()
    work = mod.study_work(study(), str(TINY), 7)
    ours = mod.ours_config(study(), work)
    trl = {**mod.trl_config_kwargs(work, "x"), "num_generations": 4, "beta": 0.04}
    with pytest.raises(ValueError, match="group size: ours 8, TRL 4") as err:
        mod.check_same_work(mod.same_work(ours, trl))
    assert "KL coefficient: ours 0.0, TRL 0.04" in str(err.value)
    # A loss with a ratio makes our side compute old log-probs: TRL's on-policy side does not.
    clipped = {**ours, "loss_type": "grpo_clip", "old_log_probs": "always"}
    with pytest.raises(ValueError, match="log-prob pass before the update: ours True"):
        mod.check_same_work(mod.same_work(clipped, mod.trl_config_kwargs(work, "x")))


def test_a_study_of_several_optimizer_steps_per_batch_is_refused():
    with pytest.raises(ValueError, match="one optimizer step"):
        sbs().study_work({**study(), "train_batch_size": 32}, str(TINY), 3)


def check_steps(steps: list[dict], count: int) -> None:
    assert len(steps) == count
    for step in steps:
        assert step["wall"] > 0 and step["generation"] > 0 and step["training"] > 0
        parts = step["generation"] + step["grading"] + step["training"] + step["other"]
        assert parts == pytest.approx(step["wall"])
        assert 1 <= step["response_tokens"] <= 8
        assert 0 <= step["reward"] <= 1


def test_our_side_times_every_step_but_the_first(tmp_path):
    mod = sbs()
    result = mod.run_ours(toy(mod), study(), tmp_path)
    check_steps(result["steps"], 2)
    assert all(step["other"] >= 0 for step in result["steps"])


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason=NO_TRL)
def test_trls_side_times_every_step_but_the_first(tmp_path):
    mod = sbs()
    result = mod.run_trl(toy(mod), study(), tmp_path)
    check_steps(result["steps"], 2)


def test_engine_part_measures_every_contender_at_both_temperatures():
    result = sbs().run_engines(str(TINY), rows=4, tokens=4, rounds=1, kinds=["hf", "static"])
    assert result["errors"] == {}
    assert set(result["rates"]) == {"1.0", "0.0"}
    for rates in result["rates"].values():
        assert set(rates) == {"generate", "hf", "static"}
        assert all(len(v) == 1 and v[0] > 0 for v in rates.values())


def test_reports_take_medians_of_the_pairs_ratios():
    mod = sbs()
    work = mod.study_work(study(), str(TINY), 3)

    def run(wall: float) -> dict:
        step = dict(
            wall=wall,
            generation=wall / 2,
            grading=0.0,
            training=wall / 2,
            other=0.0,
            response_tokens=20.0,
            reward=0.5,
        )
        return {"steps": [step, dict(step)]}

    runs = {"ours": [run(1.0), run(1.0), run(2.0)], "TRL": [run(4.0), run(2.0), run(4.0)]}
    text = "\n".join(mod.training_report([("group size", 8, 8)], runs, work))
    assert (
        "ours against TRL: steps/s 1.000 against 0.250, ratio 2.00x (rounds: 4.00, 2.00, 2.00)"
        in text
    )
    engines = {
        "rows": 4,
        "tokens": 4,
        "rates": {"1.0": {"generate": [100.0, 200.0], "static": [300.0, 500.0]}},
        "errors": {"vllm": "RuntimeError: no CPU backend"},
    }
    text = "\n".join(mod.engines_report("toy", engines, 2))
    assert "temperature 1: generate 150 (1.00x); static 400 (2.75x)" in text
    assert "vllm did not run: RuntimeError: no CPU backend" in text


def test_profile_report_lists_each_sides_operators():
    mod = sbs()
    work = mod.study_work(study(), str(TINY), 3)
    step = dict(wall=2.0, generation=1.0, grading=0.0, training=1.0, other=0.0)
    results = {
        side: {"steps": [step, step], "profile_total": 9.5, "profile": [("aten::mm", 3.25, 120)]}
        for side in ("ours", "TRL")
    }
    text = "\n".join(mod.profile_report(results, work))
    assert text.count("aten::mm 3.25 s (120 calls)") == 2
    assert "  TRL: 9.5 s in operators in all; the 2 timed steps 4.0 s of wall" in text


def test_rollout_shape_times_each_sampler_on_the_same_batch():
    mod = sbs()
    result = mod.run_rollout_shape(
        str(TINY), prompts_n=2, group=2, tokens=6, min_tokens=1, stop=["</answer>"], rounds=1
    )
    assert set(result["seconds"]) == {"generate", "hf", "static"}
    for kind, got in result["seconds"].items():
        assert len(got) == 1 and got[0] > 0
        assert 1 <= result["lengths"][kind][0] <= 6
    text = "\n".join(mod.rollout_report(result))
    assert "  generate: " in text and "(1.00x)" in text
