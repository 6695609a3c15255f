# One run across seeds: {run}/seeds.json, the final accuracy and format reward of each seed of
# the `seeds` setting with their mean, sample standard deviation and 95% t-interval half-width
# (reasoning_core/runtime/report/seeds.py). A shell job running `rrl seeds`, which imports no
# torch and starts in a fraction of a second; a `run:` block would cost more, because snakemake
# executes each such job in a new snakemake process that parses the whole workflow again (about
# 4 s of CPU a job).


rule seeds:
    input:
        runs=seed_done,
    output:
        json=f"{R}/{{run}}/seeds.json",
    log:
        f"{R}/logs/seeds/{{run}}.log",
    wildcard_constraints:
        run=rf"(sft|ei|grpo|dpo)/({VARIANT_REGEX})|leaderboard|zero_shot",
    localrule: True
    conda:
        "../envs/rrl.yaml"
    params:
        run=run_folder,
        seeds=SEEDS_ARG,
    shell:
        "rrl seeds --run {params.run} --seeds {params.seeds} --out {output.json} > {log} 2>&1"
