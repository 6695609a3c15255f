# Expert iteration over the `ei` table (G x SFT epochs x question batch size).


rule ei:
    input:
        methods=METHODS_FILE,
        base=base_model_input(),
    output:
        done=f"{R}/ei/{{variant}}/done.json",
    log:
        f"{R}/logs/ei/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/ei/{{variant}}.tsv"
    wildcard_constraints:
        variant=VARIANT_REGEX,
    conda:
        "../envs/rrl.yaml"
    threads: 2
    resources:
        gpu=GPUS,
    params:
        out=run_dir,
        model=base_model,
        settings=command_settings("ei"),
        variant=variant_args,
    shell:
        "rrl ei --config {input.methods} --set model_path={params.model} {params.settings} "
        "{params.variant} --out {params.out} > {log} 2>&1"
