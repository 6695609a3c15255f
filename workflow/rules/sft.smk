# Supervised fine-tuning: every run of the `sft` table (unique-example counts, the filtered
# set) and the default run on all unique examples, all on the study's SFT data (common_sft.smk).


# The r1_zero SFT set from the task's own worked solutions (MATH: the training split's
# solutions, the boxed answer as the answer; GSM8K: the solutions without their <<...>>
# calculator notes, the #### number as the answer). Unfiltered: `filter_correct` runs filter
# it with the task's grader and record how many examples they kept.
rule sft_data:
    output:
        jsonl=SFT_DATA_RULE_OUTPUT,
    log:
        f"{R}/logs/sft_data.log",
    conda:
        "../envs/rrl.yaml"
    params:
        task=SFT_TASK,
        split=SFT_SPLIT,
        template=SFT_TEMPLATE,
        limit=sft_data_limit(),
    shell:
        "rrl sft-data --task {params.task} --split {params.split} --template {params.template} "
        "--no-filter {params.limit} --out {output.jsonl} > {log} 2>&1"


# Every training rule (sft, ei, grpo, the leaderboard recipe, dpo) is this one with its own
# command, inputs, folders and settings (`use rule sft as ... with:`).
rule sft:
    input:
        base=base_model_input(),
        data=sft_data_input(),
    output:
        done=f"{R}/sft/{{variant}}/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/sft/{{variant}}/seed~{{seed}}.log",
    benchmark:
        f"{R}/job_times/sft/{{variant}}/seed~{{seed}}.tsv"
    wildcard_constraints:
        variant=VARIANT_REGEX,
        seed=SEED_REGEX,
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        **TRAIN_RESOURCES,
    params:
        methods=METHODS_FILE,
        section=section_digest("sft"),
        command="sft",
        out=run_dir,
        model=base_model,
        settings=sft_settings(),
        variant=variant_args,
    shell:
        f"{TRAIN_LAUNCH} {{params.command}} --config {{params.methods}} "
        "--set model_path={params.model} "
        "{params.settings} {params.variant} --set seed={wildcards.seed} --out {params.out} "
        "> {log} 2>&1"
