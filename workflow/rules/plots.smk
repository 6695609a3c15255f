# Figures (from metrics.jsonl alone) and results/summary.tsv. PNGs marked for
# `snakemake --report`.


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
    shell:
        "rrl plot --runs {params.runs} --label-keys {params.label_keys} --metric eval/accuracy "
        "--x step --title {params.title:q} --out {output.png} > {log} 2>&1"


rule plot_accuracy_time:
    input:
        runs=family_done,
    output:
        png=report(
            f"{R}/plots/{{family}}_accuracy_time.png",
            caption="../report/accuracy_time.rst",
            category="{family}",
        ),
    log:
        f"{R}/logs/plots/{{family}}_accuracy_time.log",
    wildcard_constraints:
        family=FAMILY_REGEX,
    conda:
        "../envs/rrl.yaml"
    params:
        runs=family_dirs,
        label_keys=family_keys,
        title=family_title,
    shell:
        "rrl plot --runs {params.runs} --label-keys {params.label_keys} --metric eval/accuracy "
        "--x time/elapsed --title {params.title:q} --out {output.png} > {log} 2>&1"


rule plot_accuracy_grpo_step:
    input:
        runs=family_done,
    output:
        png=report(
            f"{R}/plots/{{family}}_accuracy_grpo_step.png",
            caption="../report/accuracy_grpo_step.rst",
            category="{family}",
        ),
    log:
        f"{R}/logs/plots/{{family}}_accuracy_grpo_step.log",
    wildcard_constraints:
        family=FAMILY_REGEX,
    conda:
        "../envs/rrl.yaml"
    params:
        runs=family_dirs,
        label_keys=family_keys,
        title=family_title,
    shell:
        "rrl plot --runs {params.runs} --label-keys {params.label_keys} --metric eval/accuracy "
        "--x grpo_step --title {params.title:q} --out {output.png} > {log} 2>&1"


rule plot_training:
    input:
        runs=family_done,
    output:
        png=report(
            f"{R}/plots/{{family}}_training.png",
            caption="../report/training.rst",
            category="{family}",
        ),
    log:
        f"{R}/logs/plots/{{family}}_training.log",
    wildcard_constraints:
        family=FAMILY_REGEX,
    conda:
        "../envs/rrl.yaml"
    params:
        runs=family_dirs,
        label_keys=family_keys,
        title=family_title,
        panels=family_panels,
    shell:
        "rrl plot --runs {params.runs} --label-keys {params.label_keys} --metric {params.panels} "
        "--x step --smooth 5 --title {params.title:q} --out {output.png} > {log} 2>&1"


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
        runs=lambda wildcards, input: Path(input.runs[0]).parent.parent,
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
        tsv=f"{R}/summary.tsv",
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
