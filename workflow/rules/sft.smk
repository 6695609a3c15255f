# Supervised fine-tuning: every run of the `sft` table (unique-example counts, the filtered
# set) and the default run on all unique examples.


rule sft:
    input:
        methods=METHODS_FILE,
        base=base_model_input(),
    output:
        done=f"{R}/sft/{{variant}}/done.json",
    log:
        f"{R}/logs/sft/{{variant}}.log",
    benchmark:
        f"{R}/benchmarks/sft/{{variant}}.tsv"
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
        settings=command_settings("sft"),
        variant=variant_args,
    shell:
        "rrl sft --config {input.methods} --set model_path={params.model} {params.settings} "
        "{params.variant} --out {params.out} > {log} 2>&1"
