# The base model. On CPU the study builds the tiny world from nothing; GPU studies name an
# existing Hugging Face folder in the `model_path` setting instead (no rule runs then).


rule tiny_world:
    input:
        methods=METHODS_FILE,
    output:
        done=f"{R}/base/done.json",
    log:
        f"{R}/logs/base.log",
    benchmark:
        f"{R}/benchmarks/base.tsv"
    conda:
        "../envs/rrl.yaml"
    # The tiny world trains on its own num_threads torch threads (2 in tiny.yaml); nothing
    # else can start before it, so it reserves at least two cores whatever threads_per_job is.
    threads: max(THREADS, 2)
    params:
        out=run_dir,
        settings=command_settings("tiny-world"),
    shell:
        "rrl tiny-world --config {input.methods} {params.settings} --out {params.out} "
        "> {log} 2>&1"
