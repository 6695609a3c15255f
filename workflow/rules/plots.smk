# Figures (from metrics.jsonl alone) and results/default/summary.tsv. PNGs marked for
# `snakemake --report`.


# Every figure of a family is this rule with its own file, caption, metric and x axis.
rule plot_accuracy:
    input:
        runs=family_done,
    output:
        png=report(
            f"{R}/plots/{{family}}_accuracy.png",
            caption="../report/accuracy.rst",
            category="{family}",
        ),
    log:
        f"{R}/logs/plots/{{family}}_accuracy.log",
    wildcard_constraints:
        family=FAMILY_REGEX,
    conda:
        "../envs/rrl.yaml"
    params:
        runs=family_dirs,
        label_keys=family_keys,
        title=family_title,
        metric="eval/accuracy",
        x="step",
    shell:
        "rrl plot --runs {params.runs} --label-keys {params.label_keys} --metric {params.metric} "
        "--x {params.x} --title {params.title:q} --out {output.png} > {log} 2>&1"


use rule plot_accuracy as plot_accuracy_time with:
    output:
        png=report(
            f"{R}/plots/{{family}}_accuracy_time.png",
            caption="../report/accuracy_time.rst",
            category="{family}",
        ),
    log:
        f"{R}/logs/plots/{{family}}_accuracy_time.log",
    params:
        runs=family_dirs,
        label_keys=family_keys,
        title=family_title,
        metric="eval/accuracy",
        x="time/elapsed",


use rule plot_accuracy as plot_accuracy_grpo_step with:
    output:
        png=report(
            f"{R}/plots/{{family}}_accuracy_grpo_step.png",
            caption="../report/accuracy_grpo_step.rst",
            category="{family}",
        ),
    log:
        f"{R}/logs/plots/{{family}}_accuracy_grpo_step.log",
    params:
        runs=family_dirs,
        label_keys=family_keys,
        title=family_title,
        metric="eval/accuracy",
        x="grpo_step",


# Training curves are noisy from step to step: smoothed over 5 points.
use rule plot_accuracy as plot_training with:
    output:
        png=report(
            f"{R}/plots/{{family}}_training.png",
            caption="../report/training.rst",
            category="{family}",
        ),
    log:
        f"{R}/logs/plots/{{family}}_training.log",
    params:
        runs=family_dirs,
        label_keys=family_keys,
        title=family_title,
        metric=family_panels,
        x="step --smooth 5",


rule plot_methods:
    input:
        runs=runs_done(METHOD_RUNS),
    output:
        png=report(
            f"{R}/plots/methods.png",
            caption="../report/methods.rst",
            category="methods",
        ),
    log:
        f"{R}/logs/plots/methods.log",
    conda:
        "../envs/rrl.yaml"
    params:
        runs=METHOD_RUNS,
    shell:
        "rrl plot --kind final --runs {params.runs} --metric eval/accuracy eval/format_reward "
        "--title 'final evaluation at default settings' --out {output.png} > {log} 2>&1"


rule plot_leaderboard_accuracy_time:
    input:
        runs=run_done(f"{R}/leaderboard"),
    output:
        png=report(
            f"{R}/plots/leaderboard_accuracy_time.png",
            caption="../report/leaderboard_accuracy_time.rst",
            category="leaderboard",
        ),
    log:
        f"{R}/logs/plots/leaderboard_accuracy_time.log",
    conda:
        "../envs/rrl.yaml"
    params:
        runs=runs_folder,
    shell:
        "rrl plot --runs {params.runs} --labels leaderboard --metric eval/accuracy "
        "--x time/elapsed --time-unit min "
        "--title 'leaderboard run: validation accuracy against wall-clock time' "
        "--out {output.png} > {log} 2>&1"


rule summary:
    input:
        runs=SUMMARY_INPUTS,
    output:
        tsv=report(
            f"{R}/summary.tsv",
            caption="../report/summary.rst",
            category="summary",
        ),
    log:
        f"{R}/logs/summary.log",
    conda:
        "../envs/rrl.yaml"
    params:
        runs=ALL_RUNS,
        seeds=SEEDS_ARG,
    shell:
        "rrl summary --runs {params.runs} --seeds {params.seeds} --out {output.tsv} > {log} 2>&1"


rule ablations:
    input:
        tsv=rules.summary.output.tsv,
    output:
        tsv=report(
            f"{R}/ablations.tsv",
            caption="../report/ablations.rst",
            category="summary",
        ),
    log:
        f"{R}/logs/ablations.log",
    conda:
        "../envs/rrl.yaml"
    shell:
        "rrl ablations --summary {input.tsv} --out {output.tsv} > {log} 2>&1"


# Whether the tool runs keep calling their tool, and how they compare (rrl tool-use): the
# grpo_tools family's runs (its default run, without the tool, is their control), or the
# leaderboard recipe when its settings name a multi-turn env, against the runs that setting
# tool_use_controls names (another study's recipe without the tool).
LEADERBOARD_USES_TOOL = (
    "leaderboard" in config["families"]
    and config["leaderboard"].get("settings", {}).get("env", "single_turn") != "single_turn"
)
TOOL_USE_RUNS = FAMILY_RUNS.get("grpo_tools", []) + (
    [f"{R}/leaderboard"] if LEADERBOARD_USES_TOOL else []
)
TOOL_USE_TARGETS = [f"{R}/tool_use.tsv"] if TOOL_USE_RUNS else []


rule tool_use:
    input:
        runs=lambda wildcards: runs_done(TOOL_USE_RUNS),
        controls=[
            metrics
            for run in config["tool_use_controls"]
            for metrics in sorted(Path(run).glob("seed~*/metrics.jsonl"))
        ],
    output:
        tsv=report(
            f"{R}/tool_use.tsv",
            caption="../report/tool_use.rst",
            category="summary",
        ),
    log:
        f"{R}/logs/tool_use.log",
    conda:
        "../envs/rrl.yaml"
    params:
        runs=config["tool_use_controls"] + TOOL_USE_RUNS,
        root=lambda wildcards, output: str(Path(output.tsv).parent),
    shell:
        "rrl tool-use {params.runs} --root {params.root} --out {output.tsv} > {log} 2>&1"
