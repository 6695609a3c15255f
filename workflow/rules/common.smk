# Helpers of the study: settings, sweep tables, run folders. No rules here.
#
# A run lives in {results_dir}/{method}/{variant}: `variant` is "default" (the method's
# settings from the `methods` file) or the settings it changes, as Paramspace writes them,
# sorted by name and without those equal to the defaults ("lr~3e-05",
# "epochs_per_rollout_batch~2/loss_type~grpo_clip/train_batch_size~64"). The same settings
# therefore always name the same folder, so a run shared by two families (the default GRPO run
# is the control of every ablation) is planned and trained once.
#
# Every training run (sft, ei, grpo, the leaderboard recipe) is trained once per seed of the
# `seeds` setting, into {run}/seed~{N} (`--set seed=N`; evaluation samples with seed N too, so
# a band holds both training's and the evaluation sample's variation), and {run}/seeds.json
# gathers them (rule seeds). Zero-shot is evaluated once per seed as well ({results_dir}/
# zero_shot/seed~{N}); the base model is the shipped one (`model_path`) or built once
# ({results_dir}/base, when `model_path` is null).
# Families, plots and the summary name run folders (without the seed); the input functions
# below expand them into every seed's done.json.

import math
import posixpath
import re
import shlex
import sys
from pathlib import Path

import pandas as pd
import yaml
from snakemake.utils import Paramspace

R = config["results_dir"]
ROOT = Path(workflow.basedir)
METHODS_FILE = str(ROOT / config["methods"])
SWEEPS_DIR = ROOT / config["sweeps"]
GPUS = config["gpus_per_run"]
SEEDS = config["seeds"]
THREADS = config["threads_per_job"]  # `threads:` of every training and evaluation rule
BUILD_BASE = config["model_path"] is None
COMMANDS = ("tiny-world", "eval", "sft", "ei", "grpo", "dpo")
# A variant's parts are key~value folders; none is a seed folder (seed~N), which follows it.
VARIANT_PART = r"(?!seed~)[A-Za-z0-9_]+~[^/]+"
VARIANT_REGEX = rf"default|{VARIANT_PART}(/{VARIANT_PART})*"
SEED_REGEX = r"0|[1-9][0-9]*"

# Rules call the `rrl` console script. When snakemake runs as .venv/bin/snakemake without the
# virtual environment activated, `rrl` is not on PATH: fall back to the interpreter's folder.
shell.prefix(
    "set -euo pipefail; command -v rrl >/dev/null || "
    f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH; "
)


def _method_settings():
    """Default settings of each command: its section of the methods file, then `settings`."""
    path = Path(METHODS_FILE)
    if not path.is_file():
        raise ValueError(f"setting 'methods': file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    out = {}
    for command in COMMANDS:
        section = data.get(command)
        base = dict(section) if isinstance(section, dict) else {}
        base.update(config["settings"].get(command, {}))
        out[command] = base
    seeded = [
        c for c in ("eval", "sft", "ei", "grpo", "dpo") if "seed" in config["settings"].get(c, {})
    ]
    if "seed" in config["leaderboard"].get("settings", {}):
        seeded.append("leaderboard")
    if seeded:
        where = f"settings.{seeded[0]}" if seeded[0] != "leaderboard" else "leaderboard.settings"
        raise ValueError(
            f"setting '{where}.seed': runs take their seeds from the setting 'seeds' "
            f"(now {SEEDS}), one run folder seed~N per seed"
        )
    return out


METHOD_SETTINGS = _method_settings()
BASE_SEED = config["base_seed"]
if "seed" in config["settings"].get("tiny-world", {}):
    raise ValueError(
        "setting 'settings.tiny-world.seed': the base model's pretraining seed is the setting "
        f"'base_seed' (now {BASE_SEED})"
    )


def _shipped_base_files():
    """A `model_path` folder that carries SHA256SUMS (the shipped tiny-world base) is checked
    against it now, before any job runs, and its weights become the runs' input (a changed base
    reruns them); nothing for a folder without SHA256SUMS or not on this machine (the GPU
    studies plan without their weights)."""
    from reasoning_core.runtime.checkpoint import CHECKSUMS, verify_checksums
    from reasoning_core.runtime.config import ConfigError

    if BUILD_BASE or not (Path(config["model_path"]) / CHECKSUMS).is_file():
        return []
    try:
        verify_checksums(config["model_path"])
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return [str(Path(config["model_path"]) / "model.safetensors")]


SHIPPED_BASE_FILES = _shipped_base_files()


def _yaml_value(value):
    """A value as `rrl --set` reads it back (YAML, one line)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf)
    return text.removesuffix("...\n").strip()


def set_args(settings):
    """--set arguments for a mapping of settings, shell-quoted."""
    return " ".join(
        f"--set {shlex.quote(f'{key}={_yaml_value(value)}')}" for key, value in settings.items()
    )


def command_settings(command):
    """--set arguments that every run of `command` gets from the configuration."""
    return set_args(config["settings"].get(command, {}))


def _same_value(text, default):
    """Does the table cell `text` hold the method's default value?"""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            value = float(value)  # "3e-5": YAML 1.1 reads it as a string
        except ValueError:
            pass
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if isinstance(value, (int, float)) and isinstance(default, (int, float)):
        return math.isclose(value, default, rel_tol=1e-9, abs_tol=0.0)
    return value == default


def parse_variant(variant):
    """'a~1/b~x' -> {'a': '1', 'b': 'x'}; 'default' -> {}."""
    if variant == "default":
        return {}
    return dict(part.split("~", 1) for part in variant.split("/"))


# Columns of a sweep table that the workflow reads itself instead of passing them to the
# command, with their default: a DPO run's `init` (where it starts and its first pairs are
# sampled: `sft`, the checkpoint of the leaderboard's SFT run, or `base`).
WORKFLOW_KEYS = {"dpo": {"init": "sft"}}
DPO_INITS = ("sft", "base")


def canonical_variant(method, pattern):
    """Paramspace instance pattern -> run variant: sorted keys, empty cells and settings
    equal to the method's defaults dropped; 'default' when nothing is left."""
    defaults = {**METHOD_SETTINGS[method], **WORKFLOW_KEYS.get(method, {})}
    parts = []
    for key, text in sorted(parse_variant(pattern).items()):
        if text.strip() == "":
            continue
        if key in defaults and _same_value(text, defaults[key]):
            continue
        parts.append(f"{key}~{text}")
    return posixpath.join(*parts) if parts else "default"


def sweep(family):
    """The Paramspace table of `family` (<sweeps>/<family>.tsv), cells kept as written."""
    path = SWEEPS_DIR / f"{family}.tsv"
    frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    if "seed" in frame.columns:
        raise ValueError(
            f"{path}: column 'seed': every run is trained once per seed of the setting 'seeds'"
        )
    return Paramspace(frame[sorted(frame.columns)])


def _unique(items):
    return list(dict.fromkeys(items))


# ---- SFT data -------------------------------------------------------------------------------
# What every SFT run trains on, decided while the study is planned:
#   - the `sft_data` setting: the user's file, checked now (a bad record stops snakemake before
#     any job runs, naming the file, the line and the field);
#   - `train_data` in the methods file or settings.sft: that file, passed on as it is;
#   - a task with a built-in SFT pool (the tiny world's arithmetic task): that pool, as before;
#   - any other task (MATH, GSM8K, Countdown): the set the `sft_data` rule builds from the
#     task's own worked solutions, unfiltered (the filtered SFT run filters it and records how
#     many examples it kept in its done.json).
SFT_SETTINGS = METHOD_SETTINGS["sft"]
SFT_TASK = SFT_SETTINGS.get("task", "math")  # defaults as in CommonConfig
SFT_SPLIT = SFT_SETTINGS.get("train_split", "train")
SFT_TEMPLATE = SFT_SETTINGS.get("template", "r1_zero")
SFT_DATA_RULE_OUTPUT = f"{R}/sft_data/{SFT_TASK}_{SFT_SPLIT}.jsonl"


def _sft_data_file():
    """(file every SFT run gets as `train_data`, or None; whether the sft_data rule makes it)."""
    import envs
    from envs.sft_data import check_examples_file

    if config.get("sft_data"):
        path = Path(config["sft_data"])
        path = path if path.is_absolute() else ROOT / path
        try:
            check_examples_file(path)
        except envs.DataError as exc:
            raise ValueError(f"setting 'sft_data': {exc}") from None
        return str(path), False
    if SFT_SETTINGS.get("train_data"):
        return None, False
    try:
        task = envs.get_task(SFT_TASK)
    except ValueError as exc:
        raise ValueError(f"{METHODS_FILE}: section sft, setting 'task': {exc}") from None
    if getattr(task, "sft_pool", None) is not None:
        return None, False
    return SFT_DATA_RULE_OUTPUT, True


SFT_DATA, SFT_DATA_BUILT = _sft_data_file()


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

# Final-accuracy comparison of the methods at their default settings.
METHOD_RUNS = _unique(
    ([f"{R}/zero_shot"] if "zero_shot" in config["families"] else [])
    + [
        f"{R}/{method}/default"
        for method in ("sft", "ei", "grpo", "dpo")
        if any(FAMILY_INFO[f][0] == method for f in FAMILIES)
    ]
    + ([f"{R}/leaderboard"] if "leaderboard" in config["families"] else [])
)

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

DPO_STARTS_FROM_SFT = "dpo" in FAMILIES and any(
    parse_variant(run.removeprefix(f"{R}/dpo/")).get("init", "sft") == "sft"
    for run in FAMILY_RUNS["dpo"]
)

ALL_RUNS = _unique(
    ([f"{R}/base"] if BUILD_BASE else [])
    + METHOD_RUNS
    + [run for family in FAMILIES for run in FAMILY_RUNS[family]]
    + ([f"{R}/sft/{LEADERBOARD_SFT_RUN}"] if LEADERBOARD_STARTS_FROM_SFT else [])
    + ([f"{R}/sft/{LEADERBOARD_SFT_RUN}"] if DPO_STARTS_FROM_SFT else [])
)

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
    TRAINING_PANELS["grpo"] += ["train/rollout/truncated", "eval/truncated"]
    # and how far the rollout engine's log-probs are from the policy's (docs/rollout_mismatch.md)
    TRAINING_PANELS["grpo"].append("train/rollout/logprob_diff_mean")
    TRAINING_PANELS["dpo"] += ["train/rollout/truncated", "eval/truncated"]


# ---- functions used by rules (input functions and params) ----------------------------------


def base_model_input():
    """The tiny world's done.json when the study builds its base model, the shipped base's
    weights when `model_path` is that folder, else nothing."""
    return [rules.tiny_world.output.done] if BUILD_BASE else SHIPPED_BASE_FILES


def base_model(wildcards, input):
    """Folder of the base model: the tiny world's, or the `model_path` setting."""
    if BUILD_BASE:
        return str(Path(input.base[0]).parent)
    return config["model_path"]


def init_model(wildcards, input):
    """Folder of the model a run starts from: the base model or an upstream run's checkpoint."""
    if input.init:
        return str(Path(input.init[0]).parent / "checkpoint")
    return base_model(wildcards, input)


def run_dir(wildcards, output):
    """A run's folder: the one holding its done.json."""
    return str(Path(output.done).parent)


def run_folder(wildcards):
    """{R}/{run}: the run folder a rule with wildcard `run` reads."""
    return f"{R}/{wildcards.run}"


def runs_folder(wildcards, input):
    """The run folder above the seed folders of input `runs`."""
    return Path(input.runs[0]).parent.parent


def done_checkpoint(wildcards, input):
    """The checkpoint folder beside input `done` (a run's done.json)."""
    return str(Path(input.done).parent / "checkpoint")


def variant_args(wildcards):
    """--set arguments of a run variant ('lr~3e-05' -> --set lr=3e-05)."""
    return " ".join(
        f"--set {shlex.quote(f'{key}={value}')}"
        for key, value in parse_variant(wildcards.variant).items()
    )


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


def leaderboard_init(wildcards):
    """done.json of the run the leaderboard recipe's seed starts from: the same seed of SFT
    run `leaderboard.sft_run` (none: the base model)."""
    if config["leaderboard"].get("init", "sft") == "sft":
        return [leaderboard_sft_seed(wildcards)]
    return []


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
# settings that only change how it trains (reasoning_core.runtime.dpo_pairs.TRAINING_SETTINGS),
# so runs that differ in beta, the NLL weight or the rounds train on the same first pairs.
# Later rounds sample from the policy the round before trained, inside the run.


def _dpo_training_settings():
    from reasoning_core.runtime.dpo_pairs import TRAINING_SETTINGS

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


def seed_done(wildcards):
    """done.json of every seed of run folder {R}/{run} (input of its seeds.json)."""
    return run_done(f"{R}/{wildcards.run}")


def sft_data_input():
    """The SFT data file every SFT job reads, when the study names or builds one."""
    if SFT_DATA_BUILT:
        return [rules.sft_data.output.jsonl]
    return [SFT_DATA] if SFT_DATA else []


def sft_settings():
    """--set arguments of every SFT run: settings.sft, then the study's SFT data file."""
    args = command_settings("sft")
    if SFT_DATA:
        args = f"{args} {set_args({'train_data': SFT_DATA})}"
    return args.strip()


def sft_data_limit():
    limit = config.get("sft_data_limit")
    return f"--limit {int(limit)}" if limit else ""
