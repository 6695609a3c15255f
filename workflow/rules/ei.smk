# Expert iteration over the `ei` table (G x SFT epochs x question batch size).


rule ei:
    input:
        methods=METHODS_FILE,
        base=base_model_input(),
    output:
        done=f"{R}/ei/{{variant}}/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/ei/{{variant}}/seed~{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/ei/{{variant}}/seed~{{seed}}.tsv"
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
        model=base_model,
        settings=command_settings("ei"),
        variant=variant_args,
    shell:
        "rrl ei --config {input.methods} --set model_path={params.model} {params.settings} "
        "{params.variant} --set seed={wildcards.seed} --out {params.out} > {log} 2>&1"
