# Helpers of the study: settings, sweep tables, run folders and the input functions every
# family's rules use. No rules here; the helpers of one concern are beside it in
# common_sft.smk (the SFT data), common_runs.smk (the runs, families, plots) and
# common_dpo.smk (DPO's starts and first-round pairs).
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
# of common_runs.smk expand them into every seed's done.json.

import dataclasses
import hashlib
import json
import math
import os
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
NODES = config["nodes_per_run"]
SEEDS = config["seeds"]
THREADS = config["threads_per_job"]  # `threads:` of every training and evaluation rule
BUILD_BASE = config["model_path"] is None
# A study on a model that a pip package ships as GGUF imports it into `model_path` itself.
GGUF_PACKAGE = config.get("model_gguf_package")
if GGUF_PACKAGE and (
    BUILD_BASE or not Path(config["model_path"]).is_relative_to(config["results_dir"])
):
    raise ValueError(
        f"setting 'model_path': {config['model_path']!r} must be a folder under results_dir "
        f"({config['results_dir']!r}) when 'model_gguf_package' is set: the study writes the "
        "imported model there"
    )
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


# `job_server: true`: the rrl jobs of a local run fork from one warm `rrl job-server`, started
# here before the first job and stopped after the last (or when snakemake is gone: the server
# exits once its parent does). `rrl` finds it through RRL_JOB_SERVER, which the jobs inherit;
# a job whose server does not answer runs in a process of its own.
JOB_SERVER = {}
JOB_SERVER_ENV = "RRL_JOB_SERVER"  # what `rrl` reads; set here, for the jobs, not read


def start_job_server():
    # Local CPU runs on Linux only: forking a process that has loaded torch is not safe on macOS.
    if not config.get("job_server") or not workflow.local_exec or GPUS or sys.platform != "linux":
        return
    import shutil
    import subprocess
    import tempfile
    import time

    rrl = shutil.which("rrl") or str(Path(sys.executable).parent / "rrl")
    folder = Path(tempfile.mkdtemp(prefix="rrl-jobs-"))
    socket_path = folder / "socket"
    log_path = Path(".snakemake") / "log" / "rrl-job-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [rrl, "job-server", "--socket", str(socket_path), "--parent", str(os.getpid())],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    deadline = time.monotonic() + 180
    while not socket_path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not socket_path.exists():
        process.terminate()
        print(
            f"rrl job server did not start (see {log_path}); every job starts its own process",
            file=sys.stderr,
        )
        return
    os.environ[JOB_SERVER_ENV] = str(socket_path)
    JOB_SERVER.update(process=process, folder=folder)


def stop_job_server():
    import shutil

    process = JOB_SERVER.pop("process", None)
    if process is not None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except Exception:
            process.kill()
        os.environ.pop(JOB_SERVER_ENV, None)
        shutil.rmtree(JOB_SERVER.pop("folder"), ignore_errors=True)


onstart:
    start_job_server()


onsuccess:
    stop_job_server()


onerror:
    stop_job_server()


def training_launcher(gpus, nodes):
    """How a training job starts `rrl`: directly on one device or none; under torchrun with one
    process per GPU on several (docs/gpu.md, "Several GPUs and nodes"); on several nodes of a
    SLURM allocation, srun starts one torchrun per node and they meet at the allocation's first
    node (c10d rendezvous named after the job id)."""
    if nodes == 1 and gpus <= 1:
        return "rrl"
    if nodes == 1:
        return f"torchrun --standalone --nproc-per-node {gpus} --no-python rrl"
    first_node = '"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
    return (
        f"srun --nodes {nodes} --ntasks-per-node 1 torchrun --nnodes {nodes} "
        f"--nproc-per-node {gpus} --rdzv-backend c10d --rdzv-endpoint {first_node}:29500 "
        '--rdzv-id "$SLURM_JOB_ID" --no-python rrl'
    )


def training_resources(gpus, nodes):
    """Resources of a training job. On several nodes the job starts its own processes with srun,
    which the SLURM executor plugin allows for jobs that declare `mpi`: one task per node, each
    node with `gpus` GPUs."""
    if nodes == 1:
        return {"gpu": gpus}
    return {
        "nodes": nodes,
        "tasks": nodes,
        "mpi": "srun",
        "slurm_extra": f"--gpus-per-node={gpus}",
    }


if NODES > 1 and GPUS < 1:
    raise ValueError(
        f"nodes_per_run is {NODES}: a run spread over several nodes needs gpus_per_run >= 1"
    )
# GPUs a training job holds beyond its processes' for a rollout worker (worker_device).
WORKER_GPUS = config["worker_gpus_per_run"]
if WORKER_GPUS and (GPUS != 1 or NODES != 1):
    raise ValueError(
        f"worker_gpus_per_run is {WORKER_GPUS}: a rollout worker runs beside one learner "
        f"process, which needs gpus_per_run 1 and nodes_per_run 1 (got {GPUS} and {NODES})"
    )
TRAIN_LAUNCH = training_launcher(GPUS, NODES)
TRAIN_RESOURCES = training_resources(GPUS + WORKER_GPUS, NODES)
# Evaluation, sampling and the plots run in one process: one GPU where the study has GPUs.
EVAL_GPUS = min(GPUS, 1)


def _setting_value(command, key, value):
    """A value of the `settings` mapping as `rrl <command>` reads it. `snakemake --config
    'settings={grpo: {n_grpo_steps: 40}}'` hands every nested value over as text ('40',
    'true': snakemake reads --config with YAML's base loader), so text where the setting takes
    no text is read as `--set key=value` reads it."""
    from reasoning_core.runtime.errors import ConfigError
    from reasoning_core.runtime.settings.config import build_config, parse_overrides
    from reasoning_core.runtime.settings.docs import load_config_class

    if not isinstance(value, str):
        return value
    try:
        build_config(load_config_class(command), {key: value}, validate=False)
    except ConfigError:
        try:
            return parse_overrides([f"{key}={value}"])[key]
        except ConfigError:
            return value  # refused, naming the setting, by _check_settings
    return value


def _check_settings(command, settings):
    """Refuse, naming the setting, a default setting of `command` that is no setting of it or
    of the wrong type (a sweep table's cells are checked over them: a bad default must not be
    blamed on a table's row)."""
    from reasoning_core.runtime.errors import ConfigError
    from reasoning_core.runtime.settings.config import build_config
    from reasoning_core.runtime.settings.docs import load_config_class

    cls = load_config_class(command)
    # The rules give the settings that have no default (eval's model_path) on the command line.
    given_by_rules = {
        f.name: ""
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    source = (
        f"settings of rrl {command} (section {command!r} of {METHODS_FILE}, then "
        f"'settings.{command}')"
    )
    try:
        build_config(cls, {**given_by_rules, **settings}, source, validate=False)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


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
        given = config["settings"].get(command, {})
        base.update({key: _setting_value(command, key, value) for key, value in given.items()})
        out[command] = base
        _check_settings(command, base)
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
    from reasoning_core.runtime.run.checkpoint import CHECKSUMS, verify_checksums
    from reasoning_core.runtime.settings.config import ConfigError

    if GGUF_PACKAGE:  # rule import_gguf writes the folder; the commands check its SHA256SUMS
        return [config["model_path"]]
    if BUILD_BASE or not (Path(config["model_path"]) / CHECKSUMS).is_file():
        return []
    try:
        verify_checksums(config["model_path"])
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return [str(Path(config["model_path"]) / "model.safetensors")]


SHIPPED_BASE_FILES = _shipped_base_files()


def section_digest(command):
    """A digest of `command`'s resolved default settings (its section of the methods file with
    `settings` over it). Jobs pass the methods file as a parameter with this digest beside it,
    not as an input: they rerun when their own settings change, not when the file's bytes do
    (a comment, another command's section)."""
    text = json.dumps(METHOD_SETTINGS[command], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
    given = config["settings"].get(command, {})
    return set_args({key: METHOD_SETTINGS[command][key] for key in given})  # typed values


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


def read_sweep_table(path, family):
    """The table at `path` as text cells, read strictly: the first non-blank line names the
    columns; every other non-blank line, the first included, holds exactly one cell per
    column, separated by tabs, with no spaces in a cell (a cell is part of a folder name).
    Anything else is refused naming the table, the line and what it holds. (pandas takes a
    first row with one cell too many as holding an index, and a row separated by spaces as
    one cell: both would plan folders nobody asked for.)"""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such sweep table (family {family!r})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: unreadable sweep table ({exc})") from None
    numbered = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not numbered:
        raise ValueError(f"{path}: empty; its first line names the columns, separated by tabs")
    (header_line, header), *rows = numbered
    columns = header.split("\t")
    for name in columns:
        if not name or name != "".join(name.split()):
            raise ValueError(
                f"{path}, line {header_line}: column name {name!r} in the header {columns!r}: "
                "names are separated by tabs and hold no spaces"
            )
    if len(set(columns)) != len(columns):
        raise ValueError(f"{path}, line {header_line}: a column is named twice in {columns!r}")
    cells = []
    for number, line in rows:
        row = line.split("\t")
        if len(row) != len(columns):
            raise ValueError(
                f"{path}, line {number}: {len(row)} tab-separated cell(s) {row!r} where the "
                f"header (line {header_line}) has {len(columns)} column(s) {columns!r}: every "
                "row needs exactly one cell per column, separated by tabs"
            )
        for name, cell in zip(columns, row):
            if cell != "".join(cell.split()):
                raise ValueError(
                    f"{path}, line {number}, column {name!r}: the cell {cell!r} holds spaces; "
                    "cells are separated by tabs, and a cell is part of its run's folder name "
                    "(write a list or mapping without spaces: [a,b])"
                )
        cells.append(row)
    return pd.DataFrame(cells, columns=columns, dtype=str)


def sweep(family):
    """The Paramspace table of `family` (<sweeps>/<family>.tsv), cells kept as written."""
    path = SWEEPS_DIR / f"{family}.tsv"
    frame = read_sweep_table(path, family)
    if "seed" in frame.columns:
        raise ValueError(
            f"{path}: column 'seed': every run is trained once per seed of the setting 'seeds'"
        )
    return Paramspace(frame[sorted(frame.columns)])


def check_sweep(family, method):
    """Refuse, now rather than when a job runs, a sweep table whose column is no setting of
    `rrl <method>` or whose cell is of the wrong type for it (`lr = abc`): the message names the table, the row (and its line) and the column. Each cell is
    read as `--set column=cell` reads it, over the method's settings from the configuration."""
    from reasoning_core.runtime.errors import ConfigError
    from reasoning_core.runtime.settings.config import build_config, parse_overrides
    from reasoning_core.runtime.settings.docs import load_config_class

    path = SWEEPS_DIR / f"{family}.tsv"
    cls = load_config_class(method)
    known = {f.name for f in dataclasses.fields(cls)} | set(WORKFLOW_KEYS.get(method, {}))
    frame = sweep(family).dataframe
    for column in frame.columns:
        if column not in known:
            raise ValueError(
                f"{path}: column {column!r} is no setting of rrl {method} (see "
                f"`rrl {method} --help` or docs/configuration.md)"
            )
    # Types only: the settings class's own checks (choices, ranges, combinations) look at the model folder, which
    # the job's rule passes and which need not exist yet.
    defaults = METHOD_SETTINGS[method]
    for number, (_, row) in enumerate(frame.iterrows(), start=1):
        where = f"{path}: row {number} (line {number + 1})"
        cells = {
            key: text
            for key, text in row.items()
            if text.strip() != "" and key not in WORKFLOW_KEYS.get(method, {})
        }
        for key, text in cells.items():
            try:
                value = parse_overrides([f"{key}={text}"])
                build_config(cls, {**defaults, **value}, f"{where}, column {key!r}", validate=False)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None


def _unique(items):
    return list(dict.fromkeys(items))


# ---- functions used by rules (input functions and params) ----------------------------------


def base_model_input():
    """The tiny world's done.json when the study builds its base model, the shipped base's
    weights when `model_path` is that folder, the imported folder when the study imports a
    GGUF model (`model_gguf_package`), else nothing."""
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
