# One run across seeds: {run}/seeds.json, the final accuracy and format reward of each seed of
# the `seeds` setting with their mean, sample standard deviation and 95% t-interval half-width
# (reasoning_core/runtime/report/seeds.py; `rrl seeds` outside the workflow). Run inside
# snakemake (a few milliseconds of work each): a job would pay for importing torch.


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
    params:
        run=run_folder,
    run:
        from reasoning_core.runtime.report.seeds import write_seed_summary

        data = write_seed_summary(params.run, output.json, SEEDS)
        Path(log[0]).write_text(f"{output.json}: {data}\n")
