# Zero-shot evaluation of the base model (the handout's first baseline), once per seed of the
# `seeds` setting: seed N samples as the trained runs' seed N evaluate (their step 0 is this
# sample), so zero-shot has a band like every other run.


rule zero_shot:
    input:
        base=base_model_input(),
    output:
        done=f"{R}/zero_shot/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/zero_shot/seed~{{seed}}.log",
    benchmark:
        f"{R}/job_times/zero_shot/seed~{{seed}}.tsv"
    wildcard_constraints:
        seed=SEED_REGEX,
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=EVAL_GPUS,
    params:
        methods=METHODS_FILE,
        section=section_digest("eval"),
        out=run_dir,
        model=base_model,
        settings=command_settings("eval"),
    shell:
        "rrl eval --config {params.methods} --set model_path={params.model} {params.settings} "
        "--set seed={wildcards.seed} --out {params.out} > {log} 2>&1"
