"""The settings every trainer shares, and the checks that refuse a bad one before any work.

:class:`CommonConfig` holds what to train (model, task, splits, template, seed), where it runs
(device, dtype, threads, rollout engine, memory knobs), the optimizer and its schedule, the
evaluation, saving and metric trackers. Each trainer's config dataclass extends it and adds its
own checks with the helpers below (each raises :class:`ConfigError` naming the setting).

:data:`RESUME_MAY_CHANGE` lists the settings a resumed run may change: where and how it runs,
not what it computes (``max_wall_seconds`` says only when to stop, like a killed process).
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

import envs
from envs.environment import (
    ENVIRONMENTS,
    CalculatorEnvironment,
    environment_names,
    make_environment,
)
from reasoning_core.runtime.distributed.collectives import check_divides
from reasoning_core.runtime.distributed.world import launched_world_size
from reasoning_core.runtime.engines import ENGINE_DEFAULT, ENGINE_SETTINGS, ENGINES
from reasoning_core.runtime.engines.hf import HFEngine
from reasoning_core.runtime.engines.static.engine import StaticEngine
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.checkpoint import check_model_folder
from reasoning_core.runtime.settings.config import available_examples, check_count

# Metric trackers beside metrics.jsonl: setting value -> (module to import, pip extra).
TRACKERS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


@dataclass
class CommonConfig:
    """Settings shared by every trainer. Defaults follow the CS336 handout where it gives one."""

    # What to train and on which task.
    model_path: str = ""
    """Hugging Face model folder to start from (config.json, safetensors weights, tokenizer)."""
    task: str = "math"
    """Task whose data, prompt templates and reward are used: math, gsm8k, countdown or
    arithmetic (the tiny world's)."""
    train_split: str = "train"
    """Split of the task that training questions or examples come from."""
    eval_split: str = "test"
    """Split of the task that the run is evaluated on (math: test or math500)."""
    template: str = "r1_zero"
    """Prompt template (r1_zero or question_only; countdown has its own), with its matching
    reward."""
    seed: int = 0
    """Seed of everything the run draws: question order, rollout sampling, data order and
    subset, and the evaluation's sample unless eval_seed is set."""
    # Placement (GPU-friendly knobs; CPU is the default).
    device: str = "cpu"
    """Where the policy runs: cpu, cuda, cuda:N, or auto (CUDA when there is a GPU)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the policy's weights and forward (bfloat16 on a GPU)."""
    num_threads: int = 1
    """torch threads on CPU. One: two one-thread runs at once get more done than one run on two
    threads (docs/benchmarks.md, threads)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them: less GPU memory,
    slower steps."""
    oom_backoff: bool = True
    """On a CUDA out-of-memory error in a training or scoring pass, redo that step with a
    smaller micro batch (a divisor of the last, so the update is the same batch mean) and keep
    it for the rest of the run. false: the error stops the run."""
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = "auto"
    """Attention kernel. auto: FlashAttention 2 on a GPU in bf16/fp16 when flash-attn is
    installed, else PyTorch SDPA."""
    compile: bool = False
    """Run the training and scoring forwards through torch.compile (sampling and evaluation
    stay eager). Off by default: each micro-batch shape compiles first, which a short run does
    not win back (docs/benchmarks.md, GPU)."""
    engine: Literal["auto", "hf", "static", "vllm"] = ENGINE_DEFAULT
    """Rollout and evaluation engine: hf (transformers generate), static (preallocated KV
    cache, CUDA-graph decode on a GPU), vllm (in-process, weights synced after each step), or
    auto (vllm if it imports and the device is CUDA, else static on CUDA, else hf; done.json
    records the choice)."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Options of the engine: a flat mapping ({max_batch_size: 64}) for an engine named in
    `engine`, or one section per engine ({vllm: {gpu_memory_utilization: 0.35}, static:
    {...}}) of which the chosen engine gets its own. engine: auto needs sections."""
    # Optimizer and schedule (AdamW).
    lr: float = 1e-5
    """Peak learning rate of AdamW."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW's (beta1, beta2)."""
    adam_eps: float = 1e-8
    """AdamW's epsilon."""
    lr_scheduler: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate schedule after the warm-up: constant, or a cosine or linear decay to
    lr * min_lr_ratio at the last step."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up from 0 to lr."""
    min_lr_ratio: float = 0.0
    """Where a decaying schedule ends, as a fraction of lr."""
    max_grad_norm: float = 1.0
    """Clip the gradient to this global L2 norm before each optimizer step."""
    # Evaluation (sampled, fixed problems, seeded: the same seed draws the same sample).
    eval_examples: int | None = 512
    """Evaluate on the first N problems of eval_split (null: all of them; more than the split
    holds: all of them, with a warning on stderr)."""
    eval_every: int = 0
    """Evaluate every N steps in the trainer's own unit (SFT optimizer steps, EI iterations,
    GRPO steps); 0: only at the start and the end."""
    eval_at_start: bool = True
    """Evaluate the starting model at step 0 (a resumed run does not again)."""
    eval_temperature: float = 1.0
    """Sampling temperature of the evaluation."""
    eval_top_p: float = 1.0
    """Nucleus-sampling top_p of the evaluation."""
    eval_max_tokens: int = 1024
    """Most new tokens per evaluation response."""
    eval_seed: int | None = None
    """Seed of the evaluation's sampling; null: the run's seed, so runs with other seeds are
    also evaluated on other draws (and step 0 of seed N is rrl eval's sample with seed N)."""
    eval_batch_size: int | None = 256
    """Problems per engine call of an evaluation, each call with its own seed (null: all at
    once)."""
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    """Strings that end a response, in rollouts and evaluations (kept in the response)."""
    # Saving and watching.
    save_every: int = 10
    """Save the resumable state (state/) every N steps of the trainer's unit; 0: never."""
    save_checkpoint: bool = True
    """Write the final model as a Hugging Face folder, checkpoint/."""
    progress: bool = True
    """Show a progress bar on stderr."""
    max_wall_seconds: float | None = None
    """Wall-clock budget of the whole run in seconds, a resumed run counting its earlier time
    (null: none). Checked after each iteration: once passed, the run evaluates, saves its
    checkpoint and writes done.json with stopped_on_budget: true."""
    trackers: list[Literal["tensorboard", "wandb"]] = field(default_factory=list)
    """Where metrics go besides metrics.jsonl: tensorboard (event files in OUT/tensorboard)
    and/or wandb (offline unless WANDB_MODE says otherwise); each needs its pip extra."""

    def check_world(self, world: int) -> None:
        """Refuse, before any work, a launch on ``world`` processes (``torchrun``) that this
        command cannot split; the trainers that can override this with their own checks. No
        command silently runs ``world`` copies of itself."""
        raise ConfigError(
            f"this command runs in one process only, but torchrun started {world} (WORLD_SIZE="
            f"{world}); launch it without torchrun (rrl sft, ei, grpo, dpo and instruction-sft "
            "run under torchrun)"
        )

    @property
    def micro_batch_size(self) -> int:
        """Rows per micro batch of the training passes: each trainer's batch over its
        ``gradient_accumulation_steps`` (a trainer's config says how); 8 for the common
        settings alone. The no-gradient scoring passes take at least 8."""
        return 8

    def validate(self) -> None:
        """Fail before any work with a message that names the setting."""
        if not self.model_path:
            raise ConfigError("setting 'model_path' is required (a Hugging Face model folder)")
        # config.json, complete weights and a tokenizer, each named when missing or damaged.
        check_model_folder(self.model_path)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"setting 'betas' must be two numbers in [0, 1), got {self.betas}")
        check_positive(self, "lr", "num_threads", "eval_max_tokens")
        check_non_negative(self, "warmup_steps", "eval_every", "save_every", "weight_decay")
        if self.eval_examples is not None and self.eval_examples < 1:
            raise ConfigError("setting 'eval_examples' must be >= 1 (or null for all)")
        if self.max_wall_seconds is not None and self.max_wall_seconds <= 0:
            raise ConfigError(
                f"setting 'max_wall_seconds' must be > 0 (or null for no limit), "
                f"got {self.max_wall_seconds}"
            )
        if self.max_grad_norm <= 0:
            raise ConfigError("setting 'max_grad_norm' must be > 0")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError("setting 'min_lr_ratio' must lie in [0, 1]")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"setting 'device' is {self.device!r} but no CUDA GPU is available")
        check_trackers(self.trackers)
        check_engine_settings(self.engine, self.engine_kwargs)
        try:
            task = envs.get_task(self.task)
            task.check_template(self.template)
            task.check_split(self.train_split)
            task.check_split(self.eval_split)
            check_pair = getattr(task, "check_split_pair", None)
            if check_pair is not None:
                check_pair(self.train_split, self.eval_split)
        except ValueError as exc:
            raise ConfigError(f"setting 'task'/'template'/'*_split': {exc}") from exc
        # The data read at start, not after the model loaded: a missing data file, or more
        # training questions asked than the split holds, is named here. (An eval_examples
        # above the eval split is warned when the evaluation loads it, and takes all.)
        available_examples("eval_split", task, self.eval_split)
        if hasattr(self, "train_examples"):  # the trainers that sample training questions
            held = available_examples("train_split", task, self.train_split)
            where = f"split {self.train_split!r} of task {self.task!r}"
            check_count("train_examples", self.train_examples, held, where)


@dataclass
class RolloutConfig(CommonConfig):
    """What the trainers that sample their own rollouts (EI, GRPO) share beyond
    CommonConfig: the engine's weight sync and the check of its log-probs."""

    sync_every: int = 1
    """Push the policy's weights into the rollout engine before every N-th rollout batch (EI
    iterations, GRPO steps); 1: before each. With N > 1 the engine samples from weights up to
    N - 1 steps old, as an asynchronous trainer's does (the hf and static engines then keep a
    copy of the policy of their own). An evaluation syncs too, so eval_every a multiple of N
    keeps the lag regular; a resumed run starts in sync."""
    logprob_diff_warn: float | None = 0.03
    """Warn once on stderr when a rollout batch's rollout/logprob_diff_mean (mean |engine -
    policy| log-prob of the sampled response tokens) exceeds this; null: never. A float32
    engine in sync stays near 1e-6, a bfloat16 vLLM near 1e-2, one unsynced step at lr 1e-4
    near 8e-2 (docs/rollout_mismatch.md)."""

    rollout_seeding: Literal["batch", "group"] = "batch"
    """How rollouts are seeded: batch (one engine call and one seed per step: the committed
    runs') or group (each question's group sampled in its own engine call, seeded by the seed,
    the step and the group's index, so its responses do not depend on the other groups; needed
    under torchrun, where it gives the same rollouts on any number of processes; slower on an
    engine that batches, as each call holds one group)."""

    def validate(self) -> None:
        check_at_least_one(self, "sync_every")
        if self.logprob_diff_warn is not None and not self.logprob_diff_warn > 0:
            raise ConfigError(
                f"setting 'logprob_diff_warn' must be > 0 (or null: no warning), "
                f"got {self.logprob_diff_warn}"
            )
        super().validate()


@dataclass
class ShardingConfig(CommonConfig):
    """The trainers whose policy FSDP2 can shard under ``torchrun`` (SFT, EI, GRPO, DPO,
    instruction SFT): the setting ``sharding`` and its checks, defined once here (docs/gpu.md,
    "What each rank holds")."""

    sharding: Literal["none", "fsdp"] = "none"
    """Under torchrun: none (each rank holds the whole policy and optimizer state; gradients
    summed once per optimizer step, as DDP does) or fsdp (FSDP2: the policy, its gradients and
    optimizer state sharded over the ranks per decoder layer, bf16 compute on CUDA; the rollout
    engine samples from a full copy of the weights gathered at each sync; DPO's reference is
    sharded too; instruction SFT gathers the shards for its checkpoint only). Needs
    oom_backoff: false (every rank must run the same forwards)."""

    def validate(self) -> None:
        if self.sharding == "fsdp" and launched_world_size() < 2:
            raise ConfigError(
                "setting 'sharding' is fsdp, which shards the policy over several processes: "
                "launch with torchrun --nproc_per_node 2 or more, or use sharding: none"
            )
        super().validate()

    def check_sharding(self) -> None:
        """Under ``torchrun`` (each trainer's ``check_world`` calls it): fsdp refuses the
        out-of-memory back-off, which would let one rank run more sharded forwards than the
        others, each of which waits for every rank."""
        if self.sharding == "fsdp" and self.oom_backoff:
            raise ConfigError(
                "setting 'oom_backoff' must be false with sharding: fsdp: a rank that redid a "
                "pass in smaller micro batches would run more forwards than the others, and "
                "every sharded forward waits for every rank"
            )


def check_group_seeding(cfg: Any, world: int) -> None:
    """Under ``torchrun`` the rollouts are split over the ranks by groups: refuse batch seeding
    (one engine call per step, whose draws depend on the split), naming ``rollout_seeding``."""
    if cfg.rollout_seeding != "group":
        raise ConfigError(
            f"setting 'rollout_seeding' is {cfg.rollout_seeding!r}, but on {world} processes "
            "each rank samples its share of the groups; set rollout_seeding: group (each "
            "group seeded by itself, the same draws on any number of processes)"
        )


def check_world_batches(cfg: Any, world: int, batch: str, accumulation: str) -> None:
    """The batch ``batch`` and its micro batches (``accumulation`` of them) split whole over
    ``world`` ranks: both settings multiples of the world size."""
    check_divides(cfg, world, batch, what=": each rank trains on an equal share of it")
    check_divides(
        cfg, world, accumulation, what=": each rank accumulates an equal share of the micro batches"
    )


def check_positive(cfg: Any, *names: str) -> None:
    """Raise ConfigError unless each ``cfg.<name>`` is > 0."""
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"setting {name!r} must be > 0, got {getattr(cfg, name)}")


def check_non_negative(cfg: Any, *names: str) -> None:
    """Raise ConfigError unless each ``cfg.<name>`` is >= 0."""
    for name in names:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"setting {name!r} must be >= 0, got {getattr(cfg, name)}")


def check_at_least_one(cfg: Any, *names: str) -> None:
    """Raise ConfigError unless each ``cfg.<name>`` (a count) is >= 1."""
    for name in names:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"setting {name!r} must be >= 1, got {getattr(cfg, name)}")


def env_choices() -> dict[str, str]:
    """Setting ``env``'s values, the registered environments, with their summaries (what
    ``--help`` and docs/configuration.md list)."""
    return {name: ENVIRONMENTS[name].summary for name in environment_names()}


def check_env_settings(cfg: Any) -> None:
    """Settings ``env``, ``tool_max_calls`` and ``tool_prompt`` of a command that samples
    episodes (``rrl grpo``, ``rrl eval``): a registered environment that takes ``cfg.task``
    and ``cfg.template`` with its settings (``cfg.env_settings``), and the calculator's
    settings left alone with any other environment. ConfigError naming the setting."""
    names = environment_names()
    if cfg.env not in names:
        raise ConfigError(f"setting 'env': unknown environment {cfg.env!r}; known: {names}")
    check_at_least_one(cfg, "tool_max_calls")
    choices = CalculatorEnvironment.PROMPTS
    if cfg.tool_prompt not in choices:
        raise ConfigError(
            f"setting 'tool_prompt' must be one of {list(choices)}, got {cfg.tool_prompt!r}"
        )
    if cfg.env != "calculator" and cfg.tool_prompt != choices[0]:
        raise ConfigError(f"setting 'tool_prompt' belongs to env calculator; env is {cfg.env!r}")
    if cfg.env == "single_turn":
        return
    try:
        make_environment(cfg.env, envs.get_task(cfg.task), cfg.template, **cfg.env_settings)
    except ValueError as exc:
        raise ConfigError(f"setting 'env': {exc}") from None


def check_divisible(cfg: Any, numerator: str, denominator: str) -> None:
    """Raise ConfigError unless ``cfg.<numerator>`` is a positive multiple of ``cfg.<denominator>``."""
    a, b = getattr(cfg, numerator), getattr(cfg, denominator)
    if b <= 0:
        raise ConfigError(f"setting {denominator!r} must be > 0, got {b}")
    if a <= 0 or a % b != 0:
        raise ConfigError(
            f"setting {numerator!r} ({a}) must be a positive multiple of {denominator!r} ({b})"
        )


def check_sampling(cfg: Any) -> None:
    """Validate the rollout sampling settings (``sampling_*``) that EI and GRPO share."""
    if not 0 <= cfg.sampling_min_tokens <= cfg.sampling_max_tokens:
        raise ConfigError("setting 'sampling_min_tokens' must lie in [0, sampling_max_tokens]")
    if cfg.sampling_temperature <= 0:
        raise ConfigError("setting 'sampling_temperature' must be > 0 (sampled rollouts)")


def check_trackers(names: list[str]) -> None:
    """Raise ConfigError (naming setting ``trackers``) for an unknown tracker, one named twice,
    or one whose package is not installed."""
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(
                f"setting 'trackers' must list names from {list(TRACKERS)}, got {name!r}"
            )
        if names.count(name) > 1:
            raise ConfigError(f"setting 'trackers' names {name!r} twice")
        module, extra = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"setting 'trackers' asks for {name!r}, but the {module!r} package is not "
                f"installed: pip install 'reasoning-rl[{extra}]' (or drop {name!r})"
            )


# Option names of the engines whose constructors take a closed list (vLLM takes any vllm.LLM
# argument, so its options are checked when it starts).
_ENGINE_CLASSES = {"hf": HFEngine, "static": StaticEngine}


def _engine_options(kind: str) -> list[str] | None:
    cls = _ENGINE_CLASSES.get(kind)
    if cls is None:
        return None
    params = list(inspect.signature(cls.__init__).parameters.values())[3:]  # self, model, tok
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params]


def per_engine_sections(engine_kwargs: dict[str, Any]) -> bool:
    """True when ``engine_kwargs`` is keyed by engine (``{vllm: {...}, static: {...}}``): some
    key names an engine. Then every key must (see :func:`check_engine_settings`)."""
    return any(key in ENGINES for key in engine_kwargs)


def check_engine_settings(engine: str, engine_kwargs: dict[str, Any]) -> None:
    """Raise ConfigError naming the setting for an unknown ``engine``, a section of
    ``engine_kwargs`` for an engine that does not exist (or not a mapping), a flat
    ``engine_kwargs`` with ``engine: auto`` (it cannot say which engine the options are for),
    and an option the hf or static engine does not take."""
    if engine not in ENGINE_SETTINGS:
        raise ConfigError(
            f"setting 'engine' must be one of {list(ENGINE_SETTINGS)}, got {engine!r}"
        )
    if not isinstance(engine_kwargs, dict):
        raise ConfigError(f"setting 'engine_kwargs' must be a mapping, got {engine_kwargs!r}")
    if per_engine_sections(engine_kwargs):
        for kind, options in engine_kwargs.items():
            if kind not in ENGINES:
                raise ConfigError(
                    f"setting 'engine_kwargs' has sections per engine, but {kind!r} is no "
                    f"engine: the sections must be named from {list(ENGINES)}"
                )
            if options is not None and not isinstance(options, dict):
                raise ConfigError(
                    f"setting 'engine_kwargs.{kind}' must be a mapping of the {kind} engine's "
                    f"options, got {options!r}"
                )
            _check_options(kind, options or {}, f"engine_kwargs.{kind}")
        return
    for key, value in engine_kwargs.items():
        # A mapping under a name like an engine's, or any mapping with `auto` (which takes
        # sections only), is a section for an engine that does not exist.
        near = difflib.get_close_matches(str(key), ENGINE_SETTINGS, n=1, cutoff=0.6)
        if isinstance(value, dict) and (near or engine == "auto"):
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(
                f"setting 'engine_kwargs' has a section {key!r}, which is no engine{hint}; "
                f"sections must be named from {list(ENGINES)}"
            )
    if engine == "auto" and engine_kwargs:
        raise ConfigError(
            "setting 'engine_kwargs' is a flat mapping but setting 'engine' is auto, so it "
            "cannot say which engine takes these options: key them by engine, e.g. "
            "engine_kwargs: {vllm: {gpu_memory_utilization: 0.35}, static: {max_batch_size: 256}}"
        )
    if engine != "auto":
        _check_options(engine, engine_kwargs, "engine_kwargs")


def _check_options(kind: str, options: dict[str, Any], setting: str) -> None:
    known = _engine_options(kind)
    if known is None:
        return
    for name in options:
        if name not in known:
            raise ConfigError(
                f"setting {setting!r}: the {kind} engine has no option {name!r}; it takes {known}"
            )


def engine_options(engine_kwargs: dict[str, Any], kind: str) -> dict[str, Any]:
    """The options of engine ``kind`` (the resolved engine) in ``engine_kwargs``: its own
    section when the mapping is keyed by engine (none: ``{}``), else the flat mapping."""
    if per_engine_sections(engine_kwargs):
        return dict(engine_kwargs.get(kind) or {})
    return dict(engine_kwargs)
