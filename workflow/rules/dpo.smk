# DPO on verified pairs: the default run and every row of the `dpo` table (beta, NLL weight,
# rounds, init~base). Seed N of each starts from the checkpoint of seed N of the SFT run
# `leaderboard.sft_run`, where the leaderboard recipe starts, or from the base (init~base).
# Round 1's pairs come from rule dpo_pairs (common_dpo.smk, "DPO's first-round pairs"); rounds 2
# and later are sampled by the run from the policy the round before trained.


# Round 1's verified pairs: G responses to each of `dpo_questions` training questions sampled
# from the model the runs start from with the rollout engine, graded, correct paired with
# incorrect (`rrl dpo --set sample_only=true`), once per seed for every DPO run that shares
# the start and the sampling settings.
rule dpo_pairs:
    input:
        base=base_model_input(),
        init=dpo_init,
    output:
        done=f"{R}/dpo_pairs/{{variant}}/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/dpo_pairs/{{variant}}/seed~{{seed}}.log",
    benchmark:
        f"{R}/job_times/dpo_pairs/{{variant}}/seed~{{seed}}.tsv"
    wildcard_constraints:
        variant=VARIANT_REGEX,
        seed=SEED_REGEX,
    conda:
        "../envs/rrl.yaml"
    threads: THREADS
    resources:
        gpu=EVAL_GPUS,
    params:
        methods=METHODS_FILE,
        section=section_digest("dpo"),
        out=run_dir,
        model=init_model,
        settings=command_settings("dpo"),
        variant=dpo_variant_args,
    shell:
        "rrl dpo --config {params.methods} --set model_path={params.model} {params.settings} "
        "{params.variant} --set seed={wildcards.seed} --set sample_only=true "
        "--out {params.out} > {log} 2>&1"


use rule grpo as dpo with:
    input:
        base=base_model_input(),
        init=dpo_init,
        pairs=dpo_pairs_done,
    output:
        done=f"{R}/dpo/{{variant}}/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/dpo/{{variant}}/seed~{{seed}}.log",
    benchmark:
        f"{R}/job_times/dpo/{{variant}}/seed~{{seed}}.tsv"
    params:
        methods=METHODS_FILE,
        section=section_digest("dpo"),
        command="dpo",
        out=run_dir,
        model=init_model,
        settings=command_settings("dpo"),
        variant=dpo_run_args,
