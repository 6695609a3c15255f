# Helpers of the study's runs: the families and their sweeps, every run folder, the plots and
# their panels, and the input functions of the plots, seeds and leaderboard rules; no rules
# here. Uses common.smk.

# family -> (method, what it shows; used in plot titles and report captions)
FAMILY_INFO = {
    "sft": ("sft", "SFT on 128 to all unique examples, and on the filtered (correct) set"),
    "ei": ("ei", "expert iteration over G x SFT epochs x question batch size"),
    "grpo_lr": ("grpo", "GRPO learning-rate sweep"),
    "grpo_baseline": ("grpo", "no_baseline against reinforce_with_baseline"),
    "grpo_length_norm": ("grpo", "length normalization: masked_mean against masked_normalize"),
    "grpo_std": ("grpo", "group standard-deviation normalization on and off"),
    "grpo_offpolicy": ("grpo", "off-policy GRPO: epochs per rollout batch x train batch size"),
    "grpo_clip": ("grpo", "GRPO-Clip against GRPO-No-Clip (off-policy)"),
    "grpo_prompt": ("grpo", "r1_zero against question_only prompt and reward"),
    "dpo": ("dpo", "DPO on verified pairs from the SFT checkpoint and the base: beta, NLL, rounds"),
    "grpo_mismatch": (
        "grpo",
        "a rollout engine off the policy (lagging, bfloat16), with and without TIS",
    ),
    "grpo_variants": (
        "grpo",
        "the policy-gradient family after GRPO: estimators, losses, KL, sampling, controls",
    ),
    "grpo_async": (
        "grpo",
        "asynchronous GRPO: rollout lag x off-policy correction, and the losses at lag 4",
    ),
    "grpo_tools": (
        "grpo",
        "GRPO with a calculator against none, and with a bonus for calling it",
    ),
}
FAMILIES = [name for name in FAMILY_INFO if name in config["families"]]
# Families whose accuracy is also drawn against wall-clock time.
TIME_FAMILIES = [name for name in ("grpo_offpolicy",) if name in FAMILIES]
# Families whose runs take different numbers of optimizer steps per rollout batch: their
# accuracy is also drawn against GRPO steps (rollout batches), as the handout compares them.
GRPO_STEP_FAMILIES = [name for name in ("grpo_offpolicy", "grpo_clip") if name in FAMILIES]
FAMILY_REGEX = "|".join(FAMILIES) or "none"


def family_variants(family):
    """Run variants of a family: the default run (its control) first, then the table's rows."""
    method = FAMILY_INFO[family][0]
    check_sweep(family, method)
    rows = [canonical_variant(method, p) for p in sweep(family).instance_patterns]
    for row in rows:
        init = parse_variant(row).get("init", "sft")
        if method == "dpo" and init not in DPO_INITS:
            raise ValueError(
                f"{SWEEPS_DIR / family}.tsv: column 'init': {init!r} is neither of {DPO_INITS}"
            )
    return _unique(["default"] + rows)


def family_label_keys(family):
    """Settings that label the family's curves: the columns of its table."""
    return list(sweep(family).dataframe.columns)


FAMILY_RUNS = {
    family: [f"{R}/{FAMILY_INFO[family][0]}/{v}" for v in family_variants(family)]
    for family in FAMILIES
}

# The SFT run the leaderboard recipe starts from (`leaderboard.init: sft`), named by its
# folder under sft/ as the sweep tables name runs.
LEADERBOARD_SFT_RUN = config["leaderboard"].get("sft_run", "default")
if "seed" in parse_variant(LEADERBOARD_SFT_RUN):
    raise ValueError(
        f"setting 'leaderboard.sft_run': {LEADERBOARD_SFT_RUN!r} names a seed; the recipe's "
        "seed N starts from that SFT run's seed N"
    )
if canonical_variant("sft", LEADERBOARD_SFT_RUN) != LEADERBOARD_SFT_RUN:
    raise ValueError(
        f"setting 'leaderboard.sft_run': {LEADERBOARD_SFT_RUN!r} is not a run folder name; "
        f"the run with these settings is {canonical_variant('sft', LEADERBOARD_SFT_RUN)!r}"
    )
LEADERBOARD_STARTS_FROM_SFT = (
    "leaderboard" in config["families"] and config["leaderboard"].get("init", "sft") == "sft"
)
# Setting grpo_init: sft starts every GRPO family's runs, seed N, from seed N of that SFT run
# too (the tool study's start knows the calculator's syntax from it); base: the base model.
GRPO_STARTS_FROM_SFT = config.get("grpo_init", "base") == "sft" and any(
    FAMILY_INFO[f][0] == "grpo" for f in FAMILIES
)

# Final-accuracy comparison of the methods at their default settings; in a study without an
# SFT family, the SFT run the leaderboard recipe starts from is drawn too (where GRPO began).
METHOD_RUNS = _unique(
    ([f"{R}/zero_shot"] if "zero_shot" in config["families"] else [])
    + [
        f"{R}/{method}/default"
        for method in ("sft", "ei", "grpo", "dpo")
        if any(FAMILY_INFO[f][0] == method for f in FAMILIES)
    ]
    + (
        [f"{R}/sft/{LEADERBOARD_SFT_RUN}"]
        if (LEADERBOARD_STARTS_FROM_SFT or GRPO_STARTS_FROM_SFT)
        and not any(FAMILY_INFO[f][0] == "sft" for f in FAMILIES)
        else []
    )
    + ([f"{R}/leaderboard"] if "leaderboard" in config["families"] else [])
)

DPO_STARTS_FROM_SFT = "dpo" in FAMILIES and any(
    parse_variant(run.removeprefix(f"{R}/dpo/")).get("init", "sft") == "sft"
    for run in FAMILY_RUNS["dpo"]
)

ALL_RUNS = _unique(
    ([f"{R}/base"] if BUILD_BASE else [])
    + METHOD_RUNS
    + [run for family in FAMILIES for run in FAMILY_RUNS[family]]
    # The SFT run that the leaderboard recipe, DPO or the GRPO families start from.
    + (
        [f"{R}/sft/{LEADERBOARD_SFT_RUN}"]
        if LEADERBOARD_STARTS_FROM_SFT or DPO_STARTS_FROM_SFT or GRPO_STARTS_FROM_SFT
        else []
    )
)


def _needs_group_seeding(method, settings):
    """Whether a run with these resolved settings samples inside its training job, where
    torchrun's ranks must draw what one process draws (docs/gpu.md, `rollout_seeding`): GRPO
    and EI always; DPO on verified pairs from its second round on (the first round's pairs
    come from one process, rule dpo_pairs)."""
    if method in ("grpo", "ei"):
        return True
    if method == "dpo":
        rounds = int(settings.get("n_dpo_rounds", 1))
        return settings.get("pairs", "verified") == "verified" and rounds > 1
    return False


def _check_group_seeding():
    """Under torchrun (gpus_per_run x nodes_per_run above 1) every run that samples in its
    training job needs `rollout_seeding: group`; refuse the plan naming the first run and where
    its setting comes from, rather than plan jobs that each stop at start."""
    if GPUS * NODES <= 1:
        return
    for run in ALL_RUNS:
        name = run.removeprefix(f"{R}/")
        # A run folder is <method>/<variant>; the leaderboard run has no variant.
        method, _, variant = name.partition("/")
        if name == "leaderboard":
            method, settings = "grpo", {
                **METHOD_SETTINGS["grpo"],
                **config["leaderboard"]["settings"],
            }
            where = "the methods file's grpo section or 'leaderboard.settings'"
        elif variant and method in ("grpo", "ei", "dpo"):
            settings = {**METHOD_SETTINGS[method], **parse_variant(variant)}
            where = f"the methods file's {method} section or 'settings.{method}'"
        else:
            continue
        seeding = settings.get("rollout_seeding", "batch")
        if _needs_group_seeding(method, settings) and seeding != "group":
            raise ValueError(
                f"run {name}: gpus_per_run is {GPUS} and nodes_per_run {NODES}, so it trains "
                f"under torchrun, which needs rollout_seeding: group (it has {seeding!r}); set "
                f"it in {where} ({METHODS_FILE})"
            )


_check_group_seeding()


# Run folders built once (no seed folders); every other run is run once per seed.
SINGLE_RUNS = {f"{R}/base"}


def run_done(run):
    """done.json of a run folder: its own (the base model) or every seed's."""
    if run in SINGLE_RUNS:
        return [f"{run}/done.json"]
    return [f"{run}/seed~{seed}/done.json" for seed in SEEDS]


def runs_done(runs):
    return [done for run in runs for done in run_done(run)]


# What the summary waits for: each run across seeds' seeds.json, the single runs' done.json.
SUMMARY_INPUTS = [
    f"{run}/done.json" if run in SINGLE_RUNS else f"{run}/seeds.json" for run in ALL_RUNS
]
SEEDS_ARG = " ".join(str(seed) for seed in SEEDS)

# Validation accuracy of the leaderboard run against wall-clock time (the handout asks for it).
LEADERBOARD_PLOTS = (
    [f"{R}/plots/leaderboard_accuracy_time.png"] if "leaderboard" in config["families"] else []
)

ALL_PLOTS = (
    [f"{R}/plots/{family}_accuracy.png" for family in FAMILIES]
    + [f"{R}/plots/{family}_training.png" for family in FAMILIES]
    + [f"{R}/plots/{family}_accuracy_time.png" for family in TIME_FAMILIES]
    + [f"{R}/plots/{family}_accuracy_grpo_step.png" for family in GRPO_STEP_FAMILIES]
    + ([f"{R}/plots/methods.png"] if METHOD_RUNS else [])
    + LEADERBOARD_PLOTS
)

# Panels of the training figure per method (split/key in metrics.jsonl; EI logs one train
# line per iteration: the rollouts' reward, entropy and length, and how many were kept), then
# the evaluation lines' mean token entropy and response lengths of correct and of incorrect
# answers. A panel no run of the family logs is left out of the figure.
EVAL_PANELS = [
    "eval/entropy",
    "eval/response_length_correct",
    "eval/response_length_incorrect",
]
TRAINING_PANELS = {
    "sft": [
        "train/loss",
        "train/entropy",
        "train/grad_norm",
        "eval/response_length",
        *EVAL_PANELS,
    ],
    "ei": [
        "train/reward",
        "train/rollout/entropy",
        "train/rollout/response_length",
        "train/kept",
        *EVAL_PANELS,
    ],
    "dpo": [
        "train/loss",
        "train/margin",
        "train/val/preference_accuracy",
        "train/pairs",
        *EVAL_PANELS,
    ],
    "grpo": [
        "train/reward",
        "train/entropy",
        "train/response_length",
        "train/grad_norm",
        "train/clip_fraction",
        *EVAL_PANELS,
    ],
    # A family's own panels, where its runs differ in more than the method's figure shows.
    "grpo_variants": [
        "train/reward",
        "train/trained_reward",
        "train/entropy",
        "train/response_length",
        "train/grad_norm",
        "train/kl",
        "train/dynamic_sampling/rounds",
        *EVAL_PANELS,
    ],
    "grpo_async": [
        "train/reward",
        "train/async/staleness_mean",
        "train/offpolicy/weight_mean",
        "train/offpolicy/masked",
        "train/grad_norm",
        *EVAL_PANELS,
    ],
    "grpo_tools": [
        "train/reward",
        "train/answer_reward",
        "train/tool/call_rate",
        "train/tool/turns",
        "train/tool/errors",
        "eval/tool/call_rate",
        "train/response_length",
        *EVAL_PANELS,
    ],
    "grpo_mismatch": [
        "train/reward",
        "train/rollout/logprob_diff_mean",
        "train/rollout/tis_weight_mean",
        "train/rollout/tis_clipped",
        *EVAL_PANELS,
    ],
}
# The GPU studies also draw the share of responses cut off at the token limit (eval lines'
# `truncated`, rollout lines' `rollout/truncated`), where long reasoning meets the 1,024-token
# budget; the CPU studies' figures stay as they are.
if GPUS:
    TRAINING_PANELS["sft"].append("eval/truncated")
    TRAINING_PANELS["ei"] += ["train/rollout/truncated", "eval/truncated"]
    for family in ("grpo", "grpo_variants", "grpo_mismatch"):
        TRAINING_PANELS[family] += ["train/rollout/truncated", "eval/truncated"]
    # and how far the rollout engine's log-probs are from the policy's (docs/rollout_mismatch.md)
    TRAINING_PANELS["grpo"].append("train/rollout/logprob_diff_mean")
    TRAINING_PANELS["dpo"] += ["train/rollout/truncated", "eval/truncated"]


def family_done(wildcards):
    """done.json of every seed of every run of a family (input of its plots)."""
    return runs_done(FAMILY_RUNS[wildcards.family])


def family_dirs(wildcards):
    return FAMILY_RUNS[wildcards.family]


def family_keys(wildcards):
    return " ".join(family_label_keys(wildcards.family))


def family_title(wildcards):
    return FAMILY_INFO[wildcards.family][1]


def family_panels(wildcards):
    """The family's own panels, else its method's."""
    family = wildcards.family
    return " ".join(TRAINING_PANELS.get(family) or TRAINING_PANELS[FAMILY_INFO[family][0]])


def leaderboard_sft_seed(wildcards):
    """done.json of the same seed of SFT run `leaderboard.sft_run`."""
    return expand(rules.sft.output.done, variant=LEADERBOARD_SFT_RUN, seed=wildcards.seed)[0]


def grpo_init(wildcards):
    """done.json of the run a GRPO family run's seed starts from: with setting grpo_init sft,
    the same seed of SFT run `leaderboard.sft_run`; else none (the base model)."""
    if GRPO_STARTS_FROM_SFT:
        return [leaderboard_sft_seed(wildcards)]
    return []


def leaderboard_init(wildcards):
    """done.json of the run the leaderboard recipe's seed starts from: the same seed of SFT
    run `leaderboard.sft_run` (none: the base model)."""
    if config["leaderboard"].get("init", "sft") == "sft":
        return [leaderboard_sft_seed(wildcards)]
    return []


def seed_done(wildcards):
    """done.json of every seed of run folder {R}/{run} (input of its seeds.json)."""
    return run_done(f"{R}/{wildcards.run}")
