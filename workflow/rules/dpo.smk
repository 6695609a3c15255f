# DPO on verified pairs: the default run and every row of the `dpo` table (beta, NLL weight,
# rounds). Seed N of each starts from the checkpoint of seed N of the SFT run
# `leaderboard.sft_run`, where the leaderboard recipe starts. Opt-in: add `dpo` to `families`.


rule dpo:
    input:
        methods=METHODS_FILE,
        base=base_model_input(),
        init=dpo_init,
    output:
        done=f"{R}/dpo/{{variant}}/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/dpo/{{variant}}/seed~{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/dpo/{{variant}}/seed~{{seed}}.tsv"
    wildcard_constraints:
        variant=VARIANT_REGEX,
        seed=SEED_REGEX,
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=GPUS,
    params:
        out=run_dir,
        model=init_model,
        settings=command_settings("dpo"),
        variant=variant_args,
    shell:
        "rrl dpo --config {input.methods} --set model_path={params.model} {params.settings} "
        "{params.variant} --set seed={wildcards.seed} --out {params.out} > {log} 2>&1"
