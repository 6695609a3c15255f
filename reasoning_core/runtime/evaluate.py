"""Zero-shot evaluation (the handout's ``math_baseline``) and ``log_generations``.

- :func:`evaluate_policy`: format a task's prompts, sample with any rollout engine, grade in
  batch with ``envs.grade_batch``; returns summary metrics and one record per response. The
  trainers call it for their periodic evaluation.
- :func:`category_report` (from :mod:`.eval_report`, like :func:`summarize`): the handout's
  three categories (format 1 & answer 1; format 1 & answer 0; format 0) with counts and the
  first 10 examples of each in eval order.
- :func:`~reasoning_core.runtime.generations.log_generations` (SPEC section 1), the
  in-the-loop logging, is in its own module beside this one.
- ``rrl eval --config F --out DIR`` (:func:`main`): writes ``config.yaml``,
  ``generations/step_000000.jsonl`` (per example: prompt, response, ground truth, the three
  rewards, response length in tokens, finish reason), ``summary.json`` (metrics and categories),
  one ``eval`` line in ``metrics.jsonl`` and, last, ``done.json``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from tqdm import tqdm

import envs
from reasoning_core.runtime.checkpoint import check_model_folder
from reasoning_core.runtime.config import ConfigError, resolve_command, save_config
from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.eval_report import (
    CATEGORIES,
    CATEGORY_HELP,
    EVAL_LINE_KEYS,
    category,
    category_report,
    eval_line_stats,
    is_one,
    summarize,
    warn_grading,
)
from reasoning_core.runtime.metrics import MetricsWriter, write_generations, write_json_atomic
from reasoning_core.runtime.rollout import RolloutEngine, SamplingParams


class EvalResult(NamedTuple):
    """``(summary, records)``; unpacks as a pair.

    ``summary`` keys: ``accuracy`` (= mean answer reward), ``answer_reward``,
    ``format_reward``, ``reward``, ``num_examples``, ``num_responses``, ``response_length``
    (mean tokens), ``response_length_correct`` / ``response_length_incorrect`` (mean tokens of
    the responses with answer reward 1 / the others; None when none), ``finish_length_fraction``
    (share cut at ``max_tokens``), one count per category (``correct``, ``wrong_answer``,
    ``bad_format``), ``grade/timeouts`` and ``grade/errors`` (responses that scored 0 because
    grading timed out or raised; a warning goes to stderr when either is non-zero);
    wall-clock under ``time/generate`` and ``time/grade``.
    """

    summary: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def metrics(self) -> dict[str, Any]:
        return self.summary


def evaluate_policy(
    engine: RolloutEngine,
    examples: list[Any],
    task: Any,
    template: str,
    params: SamplingParams,
    *,
    batch_size: int | None = None,
    reward_fn: Any = None,
    grade_timeout: float | None = None,
    num_workers: int | None = None,
    progress: bool = False,
) -> EvalResult:
    """Sample ``params.n`` responses per example and grade them.

    Args:
        engine: any rollout engine (its current weights are evaluated; sync before calling).
        examples: ``envs.Example`` objects (``id``, ``question``, ``ground_truth``).
        task: the ``envs.Task`` that formats prompts (and supplies the reward function).
        template: prompt template name (``r1_zero``, ``question_only``, ``countdown``).
        params: sampling settings (the handout's eval: temperature 1, top_p 1, 1024 tokens,
            stop at ``</answer>`` kept).
        batch_size: prompts per ``engine.generate`` call (all at once when None).
        reward_fn: overrides ``task.reward_fn(template)``.
        grade_timeout, num_workers: passed to ``envs.grade_batch`` (its defaults when None).
        progress: show a progress bar over examples (stderr).
    """
    t0 = time.perf_counter()
    prompts = [task.format_prompt(ex, template) for ex in examples]
    step = batch_size or max(1, len(prompts))
    completions = []
    bar = None
    if progress:
        bar = tqdm(total=len(prompts), desc="generate", unit="ex", file=sys.stderr)
    for start in range(0, len(prompts), step):
        chunk = prompts[start : start + step]
        completions.extend(engine.generate(chunk, params))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()

    records: list[dict[str, Any]] = []
    for ex, prompt, outs in zip(examples, prompts, completions, strict=True):
        for j, c in enumerate(outs):
            record = {"id": ex.id}
            if params.n > 1:
                record["sample"] = j
            record.update(
                prompt=prompt,
                response=c.text,
                ground_truth=ex.ground_truth,
                response_length=len(c.token_ids),
                finish_reason=c.finish_reason,
            )
            records.append(record)

    t1 = time.perf_counter()
    fn = reward_fn if reward_fn is not None else task.reward_fn(template)
    grade_kwargs: dict[str, Any] = {}
    if grade_timeout is not None:
        grade_kwargs["timeout"] = grade_timeout
    if num_workers is not None:
        grade_kwargs["num_workers"] = num_workers
    scores = envs.grade_batch(
        fn, [r["response"] for r in records], [r["ground_truth"] for r in records], **grade_kwargs
    )
    for record, score in zip(records, scores, strict=True):
        record["reward"] = float(score["reward"])
        record["format_reward"] = float(score["format_reward"])
        record["answer_reward"] = float(score["answer_reward"])
        record["category"] = category(record)
    summary = summarize(records, num_examples=len(examples))
    summary.update(scores.metrics())  # keep `scores` a GradeResults: list() drops the counts
    warn_grading(summary)
    summary["time/generate"] = t1 - t0
    summary["time/grade"] = time.perf_counter() - t1
    return EvalResult(summary, records)


# ---------------------------------------------------------------------------------------------
# rrl eval


@dataclass
class EvalConfig:
    """Settings of ``rrl eval`` (section ``eval`` of a config file)."""

    model_path: str
    task: str = "math"
    split: str = "test"
    template: str = "r1_zero"
    data_path: str | None = None  # read the split from this JSONL instead of the vendored data
    limit: int | None = None  # evaluate only the first `limit` examples
    engine: Literal["vllm", "hf", "static"] = "vllm"
    # hf and static engines only (vLLM places itself): "auto" takes the CUDA GPU when there is one.
    device: str = "auto"
    dtype: str = "float32"  # model dtype (bfloat16 on a GPU)
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    min_tokens: int = 0
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    include_stop_str_in_output: bool = True
    seed: int = 0
    batch_size: int = 256  # prompts per generate call
    max_model_len: int | None = None  # vLLM only
    kv_cache_memory_bytes: int | None = None  # vLLM only (default 1 GiB on CPU)
    gpu_memory_utilization: float = 0.85  # vLLM on a GPU only
    grade_timeout: float = 10.0
    # summary.json lists the first N responses of each category in eval order (handout: >= 10).
    examples_per_category: int = 10

    def validate(self) -> None:
        if self.task not in envs.task_names():
            raise ConfigError(
                f"setting 'task' must be one of {envs.task_names()}, got {self.task!r}"
            )
        try:
            task = envs.get_task(self.task)
            task.check_template(self.template)
            task.check_split(self.split)
        except ValueError as exc:
            raise ConfigError(f"setting 'template'/'split': {exc}") from None
        if self.examples_per_category < 0:
            raise ConfigError(
                f"setting 'examples_per_category' must be >= 0, got {self.examples_per_category}"
            )
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"setting 'limit' must be >= 1, got {self.limit}")
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
        check_model_folder(self.model_path)  # last: the cheap settings are named first

    def sampling_params(self) -> SamplingParams:
        return SamplingParams(
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            min_tokens=self.min_tokens,
            stop=list(self.stop),
            include_stop_str_in_output=self.include_stop_str_in_output,
            seed=self.seed,
        )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def build_engine(cfg: EvalConfig) -> RolloutEngine:
    if cfg.engine in ("hf", "static"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = cfg.device
        if device == "auto":
            device = "cuda" if _cuda_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(
            cfg.model_path, dtype=getattr(torch, cfg.dtype)
        )
        tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
        return make_engine(cfg.engine, model.to(device), tokenizer)
    return make_engine(
        "vllm",
        cfg.model_path,
        None,
        dtype=cfg.dtype,
        seed=cfg.seed,
        max_model_len=cfg.max_model_len,
        kv_cache_memory_bytes=cfg.kv_cache_memory_bytes,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
    )


def run_eval(cfg: EvalConfig, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Run the evaluation described by ``cfg`` into folder ``out``; returns ``done.json``'s data."""
    out = Path(out)
    if (out / "done.json").is_file():
        print(f"[eval] {out} is already complete (done.json)", file=sys.stderr)
        return json.loads((out / "done.json").read_text())
    t0 = time.perf_counter()
    task = envs.get_task(cfg.task)
    try:  # before anything is written, so a bad data file leaves no run folder behind
        examples = task.load(cfg.split, path=cfg.data_path, limit=cfg.limit)
    except ValueError as exc:  # envs.DataError (names file and line) or an unknown split
        setting = "data_path" if cfg.data_path else "split"
        raise ConfigError(f"setting {setting!r}: {exc}") from None
    if not examples:
        raise ConfigError(f"task {cfg.task!r} split {cfg.split!r} has no examples")
    save_config(cfg, out)
    engine = build_engine(cfg)
    t1 = time.perf_counter()
    summary, records = evaluate_policy(
        engine,
        examples,
        task,
        cfg.template,
        cfg.sampling_params(),
        batch_size=cfg.batch_size,
        grade_timeout=cfg.grade_timeout,
        progress=progress,
    )
    t2 = time.perf_counter()
    write_generations(out, 0, records)
    report = {
        "task": cfg.task,
        "split": cfg.split,
        "template": cfg.template,
        "model_path": cfg.model_path,
        "metrics": summary,
        "categories": category_report(records, cfg.examples_per_category),
    }
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
                "time/elapsed": t2 - t0,
                "time/startup": t1 - t0,
                "time/rollout": summary["time/generate"],
                "time/grade": summary["time/grade"],
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
    }
    close = getattr(engine, "close", None)
    if callable(close):
        close()
    write_json_atomic(out / "done.json", done)
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
        f"{cfg.task}/{cfg.split}: accuracy {done['eval_accuracy']:.4f}, format reward "
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
    "is_one",
    "main",
    "run_eval",
    "summarize",
    "warn_grading",
]

if __name__ == "__main__":
    sys.exit(main())
