# Zero-shot evaluation of the base model (the handout's first baseline).


rule zero_shot:
    input:
        methods=METHODS_FILE,
        base=base_model_input(),
    output:
        done=f"{R}/zero_shot/done.json",
    log:
        f"{R}/logs/zero_shot.log",
    benchmark:
        f"{R}/benchmarks/zero_shot.tsv"
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=GPUS,
    params:
        out=run_dir,
        model=base_model,
        settings=command_settings("eval"),
    shell:
        "rrl eval --config {input.methods} --set model_path={params.model} {params.settings} "
        "--out {params.out} > {log} 2>&1"
