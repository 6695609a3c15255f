# The reasoning-rl study: every experiment of CS336 assignment 5 as rules.
#
#   snakemake --cores 2                                          # the tiny CPU world (default)
#   snakemake --cores 2 results/default/grpo/lr~3e-4/seeds.json          # one run, every seed
#   snakemake --cores 2 results/default/grpo/lr~3e-4/seed~1/done.json    # one run, one seed
#   snakemake --cores 2 --configfile workflow/config/smoke.yaml  # the same DAG in minutes
#   snakemake --workflow-profile workflow/profiles/slurm --configfile workflow/config/gpu_math.yaml
#
# Rules live in workflow/rules/ (one file per experiment family), settings in
# workflow/config/ (validated by workflow/schemas/config.schema.yaml), sweeps in Paramspace
# tables under workflow/config/sweeps/. See README.md, "Run one ablation".

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "workflow/config/config.yaml"


# `--config seeds=[0,1]` arrives as ["0", "1"] (snakemake reads lists given there as text).
if isinstance(config.get("seeds"), list):
    config["seeds"] = [
        int(seed) if isinstance(seed, str) and seed.isdigit() else seed for seed in config["seeds"]
    ]


# `--config model_path=null` arrives as the text "null" (and `model_path=` as None): both
# mean "build the base", as `model_path: null` in a config file does.
if config.get("model_path") == "null":
    config["model_path"] = None


# `--config job_server=false` arrives as text too.
if config.get("job_server") in ("true", "false"):
    config["job_server"] = config["job_server"] == "true"


validate(config, "workflow/schemas/config.schema.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/common_sft.smk"
include: "workflow/rules/common_runs.smk"
include: "workflow/rules/common_dpo.smk"
include: "workflow/rules/base.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/sft.smk"
include: "workflow/rules/ei.smk"
include: "workflow/rules/grpo.smk"
include: "workflow/rules/dpo.smk"
include: "workflow/rules/seeds.smk"
include: "workflow/rules/plots.smk"
include: "workflow/rules/eval_suite.smk"
include: "workflow/rules/supplement.smk"


rule all:
    default_target: True
    input:
        summary=rules.summary.output.tsv,
        ablations=rules.ablations.output.tsv,
        tool_use=TOOL_USE_TARGETS,
        plots=ALL_PLOTS,
        eval_suite=EVAL_SUITE_TARGETS,
