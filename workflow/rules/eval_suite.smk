# The five-benchmark evaluation suite (rrl eval-suite: AIME24, AMC23, MATH500, Minerva Math,
# OlympiadBench; docs/eval_suite.md) on the base model with every template of
# `eval_suite.base_templates`, and on the final checkpoint (first seed) of each run of
# `eval_suite.runs` that the study has, one target per model:
#   {results_dir}/eval_suite/base/suite.tsv, {results_dir}/eval_suite/<run>/suite.tsv.
# Off unless `eval_suite.enabled` (the GPU configurations); the default CPU study never runs it.


EVAL_SUITE = config.get("eval_suite", {})
EVAL_SUITE_ON = bool(EVAL_SUITE.get("enabled", False))
EVAL_SUITE_RUNS = [
    run
    for run in EVAL_SUITE.get(
        "runs",
        ["sft/default", "sft/filter_correct~true", "ei/default", "grpo/default", "leaderboard"],
    )
    if f"{R}/{run}" in ALL_RUNS
]
EVAL_SUITE_TARGETS = (
    [f"{R}/eval_suite/base/done.json"]
    + [f"{R}/eval_suite/{run}/done.json" for run in EVAL_SUITE_RUNS]
    if EVAL_SUITE_ON
    else []
)
EVAL_SUITE_SETTINGS = set_args(EVAL_SUITE.get("settings", {"protocol": "paper"}))
EVAL_SUITE_RUN_REGEX = "|".join(re.escape(run) for run in EVAL_SUITE_RUNS) or "none"


EVAL_SUITE_BASE_TEMPLATES = set_args(
    {"templates": EVAL_SUITE.get("base_templates", ["r1_zero", "question_only", "qwen_math"])}
)
EVAL_SUITE_RUN_TEMPLATES = set_args({"templates": EVAL_SUITE.get("run_templates", ["r1_zero"])})


rule eval_suite_base:
    input:
        base=base_model_input(),
    output:
        done=f"{R}/eval_suite/base/done.json",
    log:
        f"{R}/logs/eval_suite/base.log",
    benchmark:
        f"{R}/job_times/eval_suite/base.tsv"
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=EVAL_GPUS,
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
        f"{R}/job_times/eval_suite/{{run}}.tsv"
    wildcard_constraints:
        run=EVAL_SUITE_RUN_REGEX,
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=EVAL_GPUS,
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
