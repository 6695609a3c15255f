# The base model, built from nothing when `model_path` is null (pretraining seed `base_seed`).
# The default study trains from the shipped base instead and GPU studies name an existing
# Hugging Face folder in `model_path`: no rule runs then, unless the folder is to be imported
# from a GGUF file that a pip package ships (`model_gguf_package`, rule import_gguf).


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


if GGUF_PACKAGE:

    rule import_gguf:
        output:
            model=directory(config["model_path"]),
            # The folder's record of its source (file, size, SHA-256, package version), kept
            # beside the results: the weights themselves are too large to commit.
            provenance=f"{R}/model_provenance.json",
        log:
            f"{R}/logs/import_gguf.log",
        benchmark:
            f"{R}/job_times/import_gguf.tsv"
        conda:
            "../envs/rrl.yaml"
        threads: THREADS
        params:
            package=GGUF_PACKAGE,
        shell:
            "rrl import-gguf --package {params.package} --out {output.model} > {log} 2>&1 "
            "&& cp {output.model}/gguf_provenance.json {output.provenance}"
