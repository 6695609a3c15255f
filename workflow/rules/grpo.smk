# GRPO: the default run and every ablation (learning rate, baseline, length normalization,
# std normalization, off-policy, clipping, prompt). Each ablation table lists the settings its
# runs change; the default run is their shared control, trained once. Each starts from the base
# model, or (setting grpo_init: sft) from the same seed of the SFT run `leaderboard.sft_run`.


use rule sft as grpo with:
    input:
        base=base_model_input(),
        init=grpo_init,
    output:
        done=f"{R}/grpo/{{variant}}/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/grpo/{{variant}}/seed~{{seed}}.log",
    benchmark:
        f"{R}/job_times/grpo/{{variant}}/seed~{{seed}}.tsv"
    params:
        methods=METHODS_FILE,
        section=section_digest("grpo"),
        command="grpo",
        out=run_dir,
        model=init_model,
        settings=command_settings("grpo"),
        variant=variant_args,


# The leaderboard recipe: GRPO with the settings of `leaderboard.settings`, its seed N started
# from the checkpoint of seed N of the SFT run `leaderboard.sft_run` (`leaderboard.init: sft`;
# the default run unless the configuration names another, e.g. the filtered one) or from the
# base model.
use rule grpo as leaderboard with:
    input:
        base=base_model_input(),
        init=leaderboard_init,
    output:
        done=f"{R}/leaderboard/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/leaderboard/seed~{{seed}}.log",
    benchmark:
        f"{R}/job_times/leaderboard/seed~{{seed}}.tsv"
    wildcard_constraints:
        seed=SEED_REGEX,
    params:
        methods=METHODS_FILE,
        section=section_digest("grpo"),
        command="grpo",
        out=run_dir,
        model=init_model,
        settings=command_settings("grpo"),
        variant=set_args(config["leaderboard"]["settings"]),
