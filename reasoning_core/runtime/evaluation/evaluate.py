"""Zero-shot evaluation (the handout's ``math_baseline``) and ``log_generations``.

- :func:`evaluate_policy` (from :mod:`.eval_loop`): format a task's prompts, sample with any
  rollout engine, grade in batch with ``envs.grade_batch``, the responses' mean token entropy
  under the policy; returns summary metrics and one record per response. The trainers call it
  for their periodic evaluation.
- :func:`category_report` (from :mod:`.eval_report`, like :func:`summarize`): the handout's
  three categories (format 1 & answer 1; format 1 & answer 0; format 0) with counts and the
  first 10 examples of each in eval order.
- :func:`~reasoning_core.runtime.evaluation.generations.log_generations` (the handout's), the
  in-the-loop logging, is in its own module beside this one.
- ``rrl eval --config F --out DIR`` (:func:`main`): writes ``config.yaml``,
  ``generations/step_000000.jsonl`` (per example: prompt, response, ground truth, the three
  rewards, response length in tokens, finish reason), ``summary.json`` (metrics, with the
  responses' mean token ``entropy``, and categories),
  one ``eval`` line in ``metrics.jsonl`` and, last, ``done.json``. A task with a ``report``
  method adds its own scores to ``summary.json`` as ``task_report`` (``mmlu``: the unparsed
  count with examples and each subject's accuracy).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import envs
from reasoning_core.runtime.engines import ENGINE_DEFAULT, make_engine, resolve_engine
from reasoning_core.runtime.engines.hf import model_and_tokenizer
from reasoning_core.runtime.engines.rollout import RolloutEngine, SamplingParams
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation.loop import EvalResult, evaluate_policy, records_entropy
from reasoning_core.runtime.evaluation.summary import (
    CATEGORIES,
    CATEGORY_HELP,
    EVAL_LINE_KEYS,
    category,
    category_report,
    eval_line_stats,
    is_one,
    load_eval_examples,
    summarize,
    warn_grading,
)
from reasoning_core.runtime.run.checkpoint import check_model_folder
from reasoning_core.runtime.run.metrics import (
    MetricsWriter,
    finished_run,
    write_generations,
    write_json_atomic,
)
from reasoning_core.runtime.run.ownership import lock_run_folder, release_run_folder
from reasoning_core.runtime.settings.config import (
    available_examples,
    resolve_command,
    save_config,
)
from reasoning_core.runtime.training.batching import MicroBatchSize
from reasoning_core.runtime.training.episodes import (
    EnvironmentTask,
    EpisodeEngine,
    environment_factory,
    episode_metrics,
)
from reasoning_core.runtime.training.rollouts import EVAL_RENAMED, eval_params
from reasoning_core.runtime.training.settings import (
    check_engine_settings,
    check_env_settings,
    engine_options,
    env_choices,
    per_engine_sections,
)

# ---------------------------------------------------------------------------------------------
# rrl eval


@dataclass
class EvalConfig:
    """Settings of ``rrl eval`` (section ``eval`` of a config file). The evaluation settings
    have the trainers' names (``eval_split``, ``eval_examples``, ``eval_temperature``, ...)."""

    RENAMED: ClassVar[dict[str, str]] = EVAL_RENAMED
    # Setting env's values are the registered environments: --help and the docs list them.
    CHOICES: ClassVar[dict] = {"env": env_choices}

    model_path: str
    """Hugging Face model folder to evaluate (config.json, safetensors weights, tokenizer)."""
    task: str = "math"
    """Task whose data, prompt templates and reward are used: math, gsm8k, countdown,
    arithmetic, one benchmark of the evaluation suite (aime24, amc23, math500, minerva_math,
    olympiadbench: split test; rrl eval-suite runs them all), or the supplement's mmlu and
    gsm8k_supplement (templates zero_shot_system_prompt and alpaca_sft)."""
    eval_split: str = "test"
    """Split of the task to evaluate on (math: test or math500)."""
    template: str = "r1_zero"
    """Prompt template (r1_zero or question_only; countdown has its own), with its matching
    reward."""
    chat_template: bool = False
    """Put each prompt in the model's chat template as the user's turn (the format an instruct
    model was tuned on, e.g. SmolLM2-Instruct); the reward reads the response as without it.
    The model folder's tokenizer must have a chat template."""
    data_path: str | None = None
    """Read the split from this JSONL file instead of the vendored data."""
    eval_examples: int | None = None
    """Evaluate on the first N problems of eval_split (null: all of them; more than the split
    holds: all of them, with a warning on stderr)."""
    engine: Literal["auto", "hf", "static", "vllm"] = ENGINE_DEFAULT
    """Sampling engine: hf, static or vllm, or auto (vllm when the vllm package imports and
    device is CUDA, else static on CUDA, else hf); the log says which and done.json records
    it."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Options of the hf or static engine, as the trainers' setting of this name: a flat
    mapping ({max_batch_size: 128, row_step: 8}) or one section per engine. A trainer's
    evaluation samples exactly what rrl eval does only with the same engine options. vLLM's
    options are the settings max_model_len, kv_cache_memory_bytes and
    gpu_memory_utilization."""
    device: str = "auto"
    """Where the hf and static engines and the entropy forward run (vLLM places itself): auto
    (the CUDA GPU when there is one), cpu, cuda or cuda:N."""
    dtype: str = "float32"
    """Dtype of the model's weights (bfloat16 on a GPU)."""
    samples_per_problem: int = 1
    """Responses sampled per problem."""
    eval_temperature: float = 1.0
    """Sampling temperature of the evaluation."""
    eval_top_p: float = 1.0
    """Nucleus-sampling top_p of the evaluation."""
    eval_max_tokens: int = 1024
    """Most new tokens per evaluation response."""
    eval_min_tokens: int = 0
    """Fewest new tokens per evaluation response."""
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    """Strings that end a response."""
    include_stop_str_in_output: bool = True
    """Keep the stop string at the end of the response (the r1_zero reward needs
    </answer>)."""
    seed: int = 0
    """Seed of the sampling unless eval_seed is set; each engine call (eval_batch_size
    problems) draws from its own seed derived from it."""
    eval_seed: int | None = None
    """Seed of the evaluation's sampling; null: seed (as a trainer's eval_seed)."""
    eval_batch_size: int = 256
    """Problems per engine call, each call with its own seed."""
    max_model_len: int | None = None
    """vLLM only: longest prompt + response in tokens (null: the model's)."""
    kv_cache_memory_bytes: int | None = None
    """vLLM only: bytes of KV cache (null: 1 GiB on CPU, gpu_memory_utilization on a GPU)."""
    gpu_memory_utilization: float = 0.85
    """vLLM on a GPU only: the share of the GPU's memory vLLM may take."""
    grade_timeout: float = 10.0
    """Seconds per response the grader may take; a response that takes longer scores 0 and is
    counted in grade/timeouts."""
    entropy: bool = True
    """Report entropy, the responses' mean token entropy under the model (token-weighted).
    The hf and static engines give it with the samples; with vLLM the model is loaded again
    with Hugging Face on device once vLLM is closed. false: entropy is null."""
    entropy_micro_batch_size: int = 8
    """Responses per no-gradient forward when the entropy needs its own pass (vLLM)."""
    examples_per_category: int = 10
    """summary.json lists the first N responses of each category in eval order (the handout
    asks for at least 10)."""
    env: str = "single_turn"
    """The environment of the samples (envs.environment): single_turn (one completion per
    prompt) or calculator (multi-turn episodes in which the model may call a calculator, as
    ``rrl grpo`` trains with it; docs/tools.md). With calculator the eval line and summary.json
    carry the episodes' tool/ means (call rate, calls, errors, turns), eval_max_tokens bounds
    all of an episode's tokens after the prompt, and entropy is that of the model's own
    tokens (with vLLM, whose samples carry none, it is null)."""
    tool_max_calls: int = 4
    """env calculator: the calls an episode may make; a call past them ends the episode."""
    tool_prompt: str = "r1_zero_calc"
    """env calculator: the prompt, r1_zero_calc (r1_zero plus a sentence that shows the call
    syntax) or r1_zero (for a model that learnt the syntax elsewhere)."""

    def validate(self) -> None:
        if self.task not in envs.task_names():
            raise ConfigError(
                f"setting 'task' must be one of {envs.task_names()}, got {self.task!r}"
            )
        try:
            task = envs.get_task(self.task)
            task.check_template(self.template)
            task.check_split(self.eval_split)
        except ValueError as exc:
            raise ConfigError(f"setting 'template'/'eval_split': {exc}") from None
        if self.examples_per_category < 0:
            raise ConfigError(
                f"setting 'examples_per_category' must be >= 0, got {self.examples_per_category}"
            )
        if self.entropy_micro_batch_size < 1:
            raise ConfigError(
                "setting 'entropy_micro_batch_size' must be >= 1, got "
                f"{self.entropy_micro_batch_size}"
            )
        if self.eval_examples is not None and self.eval_examples < 1:
            raise ConfigError(f"setting 'eval_examples' must be >= 1, got {self.eval_examples}")
        if self.device != "auto" and not self.device.startswith(("cpu", "cuda")):
            raise ConfigError(
                f"setting 'device' must be auto, cpu, cuda or cuda:N, got {self.device!r}"
            )
        if self.device.startswith("cuda") and not _cuda_available():
            raise ConfigError(f"setting 'device' is {self.device!r} but no CUDA GPU is available")
        try:
            self.sampling_params()
        except ValueError as exc:
            raise ConfigError(f"sampling settings: {exc}") from exc
        self._validate_engine()
        self._validate_env()
        # The problems read at start: a missing data file is named before the model loads.
        setting = "data_path" if self.data_path else "eval_split"
        available_examples(setting, task, self.eval_split, self.data_path)
        check_model_folder(self.model_path)  # last: the cheap settings are named first

    def _validate_engine(self) -> None:
        check_engine_settings(self.engine, self.engine_kwargs)
        if self.engine == "vllm" or per_engine_sections(self.engine_kwargs):
            options = engine_options(self.engine_kwargs, "vllm")
            if options:
                raise ConfigError(
                    f"setting 'engine_kwargs' gives the vllm engine options {sorted(options)}: "
                    "rrl eval takes vLLM's from the settings max_model_len, "
                    "kv_cache_memory_bytes and gpu_memory_utilization"
                )

    def _validate_env(self) -> None:
        check_env_settings(self)
        if self.env != "single_turn" and self.chat_template:
            # The environment writes the prompt and reads every turn as plain text.
            raise ConfigError(
                f"setting 'chat_template' cannot be used with env {self.env!r}; turn it off"
            )

    @property
    def env_settings(self) -> dict:
        """The environment's own settings (the calculator's calls and prompt)."""
        if self.env != "calculator":
            return {}
        return {"max_calls": self.tool_max_calls, "prompt": self.tool_prompt}

    def sampling_params(self) -> SamplingParams:
        return eval_params(
            self,
            n=self.samples_per_problem,
            min_tokens=self.eval_min_tokens,
            include_stop_str_in_output=self.include_stop_str_in_output,
        )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def eval_device(cfg: EvalConfig) -> str:
    """The device of the hf and static engines and of the entropy forward."""
    if cfg.device == "auto":
        return "cuda" if _cuda_available() else "cpu"
    return cfg.device


def load_hf_model(cfg: EvalConfig, command: str = "rrl eval") -> tuple[Any, Any]:
    """``(model, tokenizer)`` from ``cfg.model_path`` with Hugging Face, on :func:`eval_device`
    (a load error names ``command``)."""
    model, tokenizer = model_and_tokenizer(cfg.model_path, None, cfg.dtype, engine=command)
    return model.to(eval_device(cfg)), tokenizer


def engine_kind(cfg: EvalConfig) -> str:
    """Setting ``engine`` with ``auto`` resolved for :func:`eval_device`."""
    return resolve_engine(cfg.engine, eval_device(cfg))


def build_engine(
    cfg: EvalConfig, *, command: str = "rrl eval", **vllm_options: Any
) -> RolloutEngine:
    """The engine of :func:`engine_kind` on ``cfg``'s model; the commands that sample through
    it (``rrl supplement-generate``, ``rrl safety-judge``) name themselves as ``command`` and
    may add options of the vLLM engine (``tensor_parallel_size``)."""
    kind = engine_kind(cfg)
    if kind in ("hf", "static"):
        model, tokenizer = load_hf_model(cfg, command)
        return make_engine(kind, model, tokenizer, **engine_options(cfg.engine_kwargs, kind))
    return make_engine(
        "vllm",
        cfg.model_path,
        None,
        dtype=cfg.dtype,
        seed=cfg.seed,
        max_model_len=cfg.max_model_len,
        kv_cache_memory_bytes=cfg.kv_cache_memory_bytes,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        **vllm_options,
    )


def chat_template_tokenizer(cfg: EvalConfig) -> Any:
    """The tokenizer of ``cfg.model_path`` when setting ``chat_template`` is on (None when
    off); a tokenizer without a chat template is an error naming the setting and the folder."""
    if not cfg.chat_template:
        return None
    tokenizer = _hf_tokenizer(cfg.model_path)
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"setting 'chat_template' is true but the tokenizer of {cfg.model_path} has no "
            "chat template"
        )
    return tokenizer


def _hf_tokenizer(model_path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


def engine_policy(engine: Any) -> tuple[Any, Any] | None:
    """``(model, tokenizer)`` when ``engine`` samples from a Hugging Face module it holds (the
    hf and static engines), else None (vLLM keeps its own copy of the weights)."""
    import torch

    model = getattr(engine, "model", None)
    if isinstance(model, torch.nn.Module) and getattr(engine, "tokenizer", None) is not None:
        return model, engine.tokenizer
    return None


def engine_tokenizer(engine: Any, model_path: str) -> Any:
    """The tokenizer of ``model_path``, the folder ``engine`` samples from: the one an hf or
    static engine loaded with its model, loaded again only for vLLM (which keeps its own);
    loading a large tokenizer costs seconds (Llama 3's about 2 s on a CPU)."""
    held = engine_policy(engine)
    return held[1] if held else _hf_tokenizer(model_path)


def close_engine(engine: Any) -> None:
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def run_eval(cfg: EvalConfig, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Run the evaluation described by ``cfg`` into folder ``out``; returns ``done.json``'s data."""
    out = Path(out)
    if (done := finished_run(out, "eval", cfg)) is not None:
        return done
    t0 = time.perf_counter()
    task = envs.get_task(cfg.task)
    try:  # before anything is written, so a bad data file leaves no run folder behind
        examples = load_eval_examples(task, cfg, path=cfg.data_path)
    except ValueError as exc:  # envs.DataError (names file and line) or an unknown split
        setting = "data_path" if cfg.data_path else "eval_split"
        raise ConfigError(f"setting {setting!r}: {exc}") from None
    if not examples:
        raise ConfigError(f"task {cfg.task!r} split {cfg.eval_split!r} has no examples")
    chat_tokenizer = chat_template_tokenizer(cfg)  # before the folder, as a bad data file
    lock_run_folder(out, "eval")
    save_config(cfg, out)
    kind = engine_kind(cfg)
    print(f"[eval] rollout engine: {kind} (engine: {cfg.engine})", file=sys.stderr)
    engine = build_engine(cfg)
    t1 = time.perf_counter()
    held = engine_policy(engine)  # hf and static: (model, tokenizer); vLLM keeps its own
    policy = held if cfg.entropy else None
    entropy_micro = MicroBatchSize(cfg.entropy_micro_batch_size, name="eval entropy")
    sampler, graded_task = engine, task
    make_env = environment_factory(cfg, task)
    if make_env is not None:  # setting env: every sample is an episode, the tool at hand
        tokenizer = engine_tokenizer(engine, cfg.model_path)
        sampler = EpisodeEngine(engine, make_env, examples, tokenizer)
        graded_task = EnvironmentTask(make_env)
    summary, records = evaluate_policy(
        sampler,
        examples,
        graded_task,
        cfg.template,
        cfg.sampling_params(),
        batch_size=cfg.eval_batch_size,
        grade_timeout=cfg.grade_timeout,
        progress=progress,
        model=policy[0] if policy else None,
        tokenizer=policy[1] if policy else None,
        entropy_micro_batch_size=entropy_micro,
        chat_tokenizer=chat_tokenizer,
    )
    if make_env is not None:  # what the tool did in the episodes (no bonus: nothing trains)
        summary.update(
            {k: v for k, v in episode_metrics(sampler.episodes).items() if k != "tool/bonus"}
        )
    if make_env is not None and policy is None and cfg.entropy:
        # A transcript holds the tool's results, which the model did not sample: its entropy
        # pass over the text would count them.
        print(
            "[eval] entropy: null (vLLM's samples carry none, and a re-scored episode would "
            "count the tool's tokens)",
            file=sys.stderr,
        )
        summary["entropy"] = None
    elif cfg.entropy and policy is None:  # a vLLM engine: free its memory, load the model with HF
        close_engine(engine)
        t_entropy = time.perf_counter()
        model, tokenizer = load_hf_model(cfg)
        summary["entropy"] = records_entropy(model, tokenizer, records, entropy_micro)
        summary["time/entropy"] = time.perf_counter() - t_entropy
        del model
    t2 = time.perf_counter()
    write_generations(out, 0, records)
    report = {
        "task": cfg.task,
        "split": cfg.eval_split,
        "template": cfg.template,
        "chat_template": cfg.chat_template,
        "model_path": cfg.model_path,
        "metrics": summary,
        "categories": category_report(records, cfg.examples_per_category),
    }
    task_report = getattr(task, "report", None)  # a task's own scores (mmlu: per subject)
    if task_report is not None:
        by_id = {ex.id: ex for ex in examples}
        report["task_report"] = task_report(
            [by_id[r["id"]] for r in records], [r["response"] for r in records]
        )
    write_json_atomic(out / "summary.json", report)
    with MetricsWriter(out) as metrics:
        metrics.truncate(0)  # a rerun after a crash starts this one-line file afresh
        metrics.log(
            {
                "accuracy": summary["accuracy"],
                "format_reward": summary["format_reward"],
                "reward": summary["reward"],
                "num_examples": summary["num_examples"],
                **eval_line_stats(summary),
                **{k: v for k, v in summary.items() if k.startswith("tool/")},
                "time/elapsed": t2 - t0,
                "time/startup": t1 - t0,
                "time/rollout": summary["time/generate"],
                "time/grade": summary["time/grade"],
                "time/entropy": summary["time/entropy"],
            },
            step=0,
            split="eval",
        )
    done = {
        "eval_accuracy": summary["accuracy"],
        "eval_format_reward": summary["format_reward"],
        "eval_reward": summary["reward"],
        "eval_examples": summary["num_examples"],
        "wall_seconds": time.perf_counter() - t0,
        "engine": kind,
    }
    close_engine(engine)
    write_json_atomic(out / "done.json", done)
    release_run_folder(out)
    return done


def main(argv: list[str] | None = None) -> int:
    resolved = resolve_command(
        EvalConfig,
        "eval",
        argv,
        "Zero-shot evaluation: sample responses to a task's eval split and grade them.",
    )
    if resolved is None:
        return 2
    cfg, args = resolved
    try:
        done = run_eval(cfg, args.out)
    except ConfigError as exc:  # data-dependent: a bad data file or split
        print(f"rrl eval: {exc}", file=sys.stderr)
        return 2
    summary = json.loads((Path(args.out) / "summary.json").read_text())["metrics"]
    counts = ", ".join(f"{k} {summary[k]}" for k in CATEGORIES)
    print(
        f"{cfg.task}/{cfg.eval_split}: accuracy {done['eval_accuracy']:.4f}, format reward "
        f"{done['eval_format_reward']:.4f} on {done['eval_examples']} examples ({counts}); "
        f"{done['wall_seconds']:.1f} s"
    )
    return 0


__all__ = [
    "CATEGORIES",
    "CATEGORY_HELP",
    "EVAL_LINE_KEYS",
    "EvalConfig",
    "EvalResult",
    "category",
    "category_report",
    "eval_line_stats",
    "evaluate_policy",
    "records_entropy",
    "is_one",
    "main",
    "run_eval",
    "summarize",
    "warn_grading",
]

if __name__ == "__main__":
    sys.exit(main())
