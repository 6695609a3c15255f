# The five-benchmark evaluation suite (rrl eval-suite: AIME24, AMC23, MATH500, Minerva Math,
# OlympiadBench; docs/eval_suite.md) on the base model with every template of
# `eval_suite.base_templates`, and on the final checkpoint (first seed) of each run of
# `eval_suite.runs` that the study has, one target per model:
#   {results_dir}/eval_suite/base/suite.tsv, {results_dir}/eval_suite/<run>/suite.tsv.
# Off unless `eval_suite.enabled` (the GPU configurations); the default CPU study never runs it.


rule eval_suite_base:
    input:
        base=base_model_input(),
    output:
        done=f"{R}/eval_suite/base/done.json",
    log:
        f"{R}/logs/eval_suite/base.log",
    benchmark:
        f"{R}/benchmarks/eval_suite/base.tsv"
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=GPUS,
    params:
        out=run_dir,
        model=base_model,
        templates=EVAL_SUITE_BASE_TEMPLATES,
        settings=EVAL_SUITE_SETTINGS,
    shell:
        "rrl eval-suite --set model_path={params.model} {params.templates} {params.settings} "
        "--compare published --out {params.out} > {log} 2>&1"


rule eval_suite_run:
    input:
        done=f"{R}/{{run}}/seed~{SEEDS[0]}/done.json",
    output:
        done=f"{R}/eval_suite/{{run}}/done.json",
    log:
        f"{R}/logs/eval_suite/{{run}}.log",
    benchmark:
        f"{R}/benchmarks/eval_suite/{{run}}.tsv"
    wildcard_constraints:
        run=EVAL_SUITE_RUN_REGEX,
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=GPUS,
    params:
        out=run_dir,
        model=done_checkpoint,
        templates=EVAL_SUITE_RUN_TEMPLATES,
        settings=EVAL_SUITE_SETTINGS,
    shell:
        "rrl eval-suite --set model_path={params.model} {params.templates} {params.settings} "
        "--out {params.out} > {log} 2>&1"


rule eval_suite:
    input:
        EVAL_SUITE_TARGETS,
