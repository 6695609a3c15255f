# Helpers of the DPO runs: where each starts and its first-round pairs; no rules here. Uses
# common.smk and common_runs.smk.


def dpo_init(wildcards):
    """done.json of the SFT run a DPO run's (or its first pairs') seed starts from: the
    leaderboard recipe's start (`leaderboard.sft_run`, same seed) whatever `leaderboard.init`
    says; none (the base model) for a variant with init~base."""
    if parse_variant(wildcards.variant).get("init", "sft") == "base":
        return []
    return [leaderboard_sft_seed(wildcards)]


def dpo_variant_args(wildcards):
    """--set arguments of a DPO variant, without the keys the workflow reads (`init`)."""
    keys = WORKFLOW_KEYS["dpo"]
    return " ".join(
        f"--set {shlex.quote(f'{key}={value}')}"
        for key, value in parse_variant(wildcards.variant).items()
        if key not in keys
    )


# ---- DPO's first-round pairs (rule dpo_pairs) ------------------------------------------------
# Round 1's verified pairs of a DPO run are sampled by their own job from the model the run
# starts from, into {R}/dpo_pairs/{pairs variant}/seed~N: the run's variant without the
# settings that only change how it trains (reasoning_core.runtime.trainers.dpo_pairs.TRAINING_SETTINGS),
# so runs that differ in beta, the NLL weight or the rounds train on the same first pairs.
# Later rounds sample from the policy the round before trained, inside the run.


def _dpo_training_settings():
    from reasoning_core.runtime.trainers.dpo_pairs import TRAINING_SETTINGS

    return TRAINING_SETTINGS


DPO_TRAINING_SETTINGS = _dpo_training_settings()


def dpo_pairs_variant(variant):
    """The pairs folder's variant of DPO run variant `variant` (see above)."""
    parts = [
        f"{key}~{value}"
        for key, value in parse_variant(variant).items()
        if key not in DPO_TRAINING_SETTINGS
    ]
    return posixpath.join(*parts) if parts else "default"


def dpo_samples_pairs(variant):
    """Does a DPO variant train on verified pairs (which the dpo_pairs rule samples)?"""
    pairs = parse_variant(variant).get("pairs", METHOD_SETTINGS["dpo"].get("pairs", "verified"))
    return pairs == "verified"


def dpo_pairs_done(wildcards):
    """done.json of the first-round pairs a DPO run reads (none without verified pairs)."""
    if not dpo_samples_pairs(wildcards.variant):
        return []
    folder = dpo_pairs_variant(wildcards.variant)
    return expand(rules.dpo_pairs.output.done, variant=folder, seed=wildcards.seed)


def dpo_first_round_args(wildcards, input):
    """--set first_round_pairs=<the dpo_pairs job's folder> (nothing without one)."""
    if not input.pairs:
        return ""
    return set_args({"first_round_pairs": str(Path(input.pairs[0]).parent)})


def dpo_run_args(wildcards, input):
    """--set arguments of a DPO run: its variant's, then where its first-round pairs are."""
    return f"{dpo_variant_args(wildcards)} {dpo_first_round_args(wildcards, input)}"
