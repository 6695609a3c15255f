# The base model, built from nothing when `model_path` is null (pretraining seed `base_seed`).
# The default study trains from the shipped base instead and GPU studies name an existing
# Hugging Face folder in `model_path`: no rule runs then.


rule tiny_world:
    output:
        done=f"{R}/base/done.json",
    log:
        f"{R}/logs/base.log",
    benchmark:
        f"{R}/job_times/base.tsv"
    conda:
        "../envs/rrl.yaml"
    # The tiny world trains on its own num_threads torch threads (2 in tiny.yaml); nothing
    # else can start before it, so it reserves at least two cores whatever threads_per_job is.
    threads: max(THREADS, 2)
    params:
        methods=METHODS_FILE,
        section=section_digest("tiny-world"),
        out=run_dir,
        settings=command_settings("tiny-world"),
        seed=BASE_SEED,
    shell:
        "rrl tiny-world --config {params.methods} {params.settings} --set seed={params.seed} "
        "--out {params.out} > {log} 2>&1"
