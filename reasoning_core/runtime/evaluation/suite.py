"""``rrl eval-suite``: one model on the five-benchmark suite, under several prompt templates.

The suite (AIME24, AMC23, MATH500, Minerva Math, OlympiadBench: ``envs.suite``) is what the
R1-Zero papers report, decoded greedily with 3,000 new tokens (protocol ``paper``); protocol
``handout`` samples at temperature 1.0 with 1,024 tokens, as the CS336 handout's evaluation;
``eval_temperature``, ``eval_top_p`` and ``eval_max_tokens`` override either (the evaluation
settings have ``rrl eval``'s names). ``r1_zero`` responses stop at
``</answer>``; the boxed templates (``question_only``, ``qwen_math``) have no stop string, the
model ends them with EOS (as the paper's evaluation does).

One engine is built and every (benchmark, template) pair is evaluated with it. Writes, under
``--out``: ``config.yaml``; ``{benchmark}/{template}/generations/step_000000.jsonl`` (what
``rrl eval`` writes per response); ``suite.tsv``, one row per benchmark x template
(:data:`TSV_COLUMNS`); with ``compare: published`` also ``compare.tsv``, our accuracy beside the
published one of the same model and template (``envs/data/eval_suite/published.csv``); and,
last, ``done.json``.

With ``samples_per_problem: k`` > 1, ``accuracy`` is the mean over all k samples of every
problem and ``pass_at_k`` the mean over problems of :func:`pass_at_k` (Chen et al. 2021).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import envs
from envs.base import DATA_DIR
from envs.suite import BENCHMARKS, SUITE_TEMPLATES
from reasoning_core.runtime.engines import ENGINE_DEFAULT
from reasoning_core.runtime.engines.rollout import SamplingParams
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation.evaluate import (
    EvalConfig,
    build_engine,
    close_engine,
    engine_kind,
)
from reasoning_core.runtime.evaluation.loop import evaluate_policy
from reasoning_core.runtime.run.checkpoint import check_model_folder
from reasoning_core.runtime.run.metrics import finished_run, write_generations, write_json_atomic
from reasoning_core.runtime.run.ownership import lock_run_folder, release_run_folder
from reasoning_core.runtime.settings.config import (
    available_examples,
    resolve_command,
    save_config,
)
from reasoning_core.runtime.training.rollouts import EVAL_RENAMED, eval_params

#: protocol -> (temperature, max new tokens)
PROTOCOLS = {"paper": (0.0, 3000), "handout": (1.0, 1024)}
TSV_COLUMNS = (
    "benchmark",
    "template",
    "protocol",
    "temperature",
    "max_tokens",
    "samples_per_problem",
    "examples",
    "accuracy",
    "format_rate",
    "pass_at_k",
    "mean_response_length",
    "truncated",
)
COMPARE_COLUMNS = ("benchmark", "template", "model", "ours", "published", "difference", "source")
PUBLISHED_CSV = DATA_DIR / "eval_suite" / "published.csv"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``n`` samples of which ``c`` are correct (Chen et
    al. 2021): the chance that k of the n, drawn without replacement, hold a correct one,
    ``1 - C(n - c, k) / C(n, k)``, computed exactly."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class EvalSuiteConfig:
    """Settings of ``rrl eval-suite`` (section ``eval-suite`` of a config file). The evaluation
    settings have ``rrl eval``'s names (``eval_examples``, ``eval_temperature``, ...)."""

    RENAMED: ClassVar[dict[str, str]] = {
        old: EVAL_RENAMED[old]
        for old in ("limit", "temperature", "top_p", "max_tokens", "batch_size")
    }

    model_path: str
    """Hugging Face model folder to evaluate (config.json, safetensors weights, tokenizer)."""
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    """Benchmarks of the suite to run: aime24, amc23, math500, minerva_math, olympiadbench."""
    templates: list[str] = field(default_factory=lambda: list(SUITE_TEMPLATES))
    """Prompt templates, each with its reward rule: r1_zero (the answer tags), question_only
    and qwen_math (the last \\boxed{})."""
    protocol: Literal["paper", "handout"] = "paper"
    """paper: greedy, 3000 new tokens (Liu et al. 2025); handout: temperature 1.0, 1024 tokens.
    eval_temperature, eval_top_p and eval_max_tokens, when set, override it."""
    eval_temperature: float | None = None
    """Sampling temperature (null: the protocol's)."""
    eval_top_p: float = 1.0
    """Nucleus-sampling top_p."""
    eval_max_tokens: int | None = None
    """Most new tokens per response (null: the protocol's)."""
    samples_per_problem: int = 1
    """Responses sampled per problem (k): accuracy is their mean, pass_at_k the unbiased
    pass@k (k > 1 only; use a temperature above 0)."""
    eval_examples: int | None = None
    """Evaluate only the first N problems of each benchmark (null: all; a benchmark with
    fewer, e.g. aime24's 30: all of its)."""
    seed: int = 0
    """Seed of the sampling unless eval_seed is set (each engine call draws from its own seed
    derived from it), and of the vLLM engine."""
    eval_seed: int | None = None
    """Seed of the sampling; null: seed (as rrl eval's eval_seed)."""
    compare: Literal["none", "published"] = "none"
    """published: also write compare.tsv, our accuracy beside the published one of model_name
    and the same template (envs/data/eval_suite/published.csv)."""
    model_name: str | None = None
    """The model's name in the published table (null: the model folder's name, e.g.
    Qwen2.5-Math-1.5B)."""
    engine: Literal["auto", "vllm", "hf", "static"] = ENGINE_DEFAULT
    """Sampling engine. auto: vllm when the vllm package imports and device is CUDA, else
    static on CUDA, else hf."""
    device: str = "auto"
    """Where the hf and static engines run (vLLM places itself): auto, cpu, cuda or cuda:N."""
    dtype: str = "bfloat16"
    """Dtype of the model's weights (float32 on CPU)."""
    eval_batch_size: int = 512
    """Problems per engine call."""
    max_model_len: int | None = None
    """vLLM only: longest prompt + response in tokens (null: the model's)."""
    kv_cache_memory_bytes: int | None = None
    """vLLM only: bytes of KV cache (null: 1 GiB on CPU, gpu_memory_utilization on a GPU)."""
    gpu_memory_utilization: float = 0.85
    """vLLM on a GPU only: the share of the GPU's memory vLLM may take."""
    grade_timeout: float = 10.0
    """Seconds per response the grader may take; a response that takes longer scores 0."""

    def validate(self) -> None:
        bad = [b for b in self.benchmarks if b not in BENCHMARKS]
        if bad or not self.benchmarks:
            raise ConfigError(
                f"setting 'benchmarks' must list some of {list(BENCHMARKS)}, got {bad}"
            )
        bad = [t for t in self.templates if t not in SUITE_TEMPLATES]
        if bad or not self.templates:
            raise ConfigError(f"setting 'templates' must list some of {SUITE_TEMPLATES}, got {bad}")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"setting 'protocol' must be paper or handout, got {self.protocol!r}")
        if self.samples_per_problem < 1:
            raise ConfigError(
                f"setting 'samples_per_problem' must be >= 1, got {self.samples_per_problem}"
            )
        if self.eval_examples is not None and self.eval_examples < 1:
            raise ConfigError(f"setting 'eval_examples' must be >= 1, got {self.eval_examples}")
        if self.compare not in ("none", "published"):
            raise ConfigError(f"setting 'compare' must be none or published, got {self.compare!r}")
        try:
            self.sampling_params("r1_zero")
        except ValueError as exc:
            raise ConfigError(f"sampling settings: {exc}") from exc
        self.engine_config().validate()
        # What the run reads besides the model, at start: each benchmark's problems and, to
        # compare, the published table (else a missing file stops the run after the work).
        for name in self.benchmarks:
            available_examples("benchmarks", envs.get_task(name), "test")
        if self.compare == "published":
            read_published()
        check_model_folder(self.model_path)

    def sampling(self) -> tuple[float, int]:
        """(temperature, max_tokens): the protocol's, with this config's overrides."""
        temperature, max_tokens = PROTOCOLS[self.protocol]
        if self.eval_temperature is not None:
            temperature = self.eval_temperature
        return temperature, self.eval_max_tokens if self.eval_max_tokens is not None else max_tokens

    def sampling_params(self, template: str) -> SamplingParams:
        """``template``'s sampling: r1_zero responses stop at ``</answer>`` (kept), the boxed
        templates' end with EOS."""
        temperature, max_tokens = self.sampling()
        protocol = dataclasses.replace(
            self, eval_temperature=temperature, eval_max_tokens=max_tokens
        )
        stop = ["</answer>"] if template == "r1_zero" else []
        return eval_params(protocol, n=self.samples_per_problem, stop=stop)

    def engine_config(self) -> EvalConfig:
        """The ``rrl eval`` settings that build and place the engine (shared code)."""
        return EvalConfig(
            model_path=self.model_path,
            task="math500",
            engine=self.engine,
            device=self.device,
            dtype=self.dtype,
            seed=self.seed,
            max_model_len=self.max_model_len,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            gpu_memory_utilization=self.gpu_memory_utilization,
            entropy=False,
        )

    def published_name(self) -> str:
        return self.model_name or Path(self.model_path.rstrip("/")).name


def suite_row(cfg: EvalSuiteConfig, benchmark: str, template: str, records: list[dict]) -> dict:
    """One TSV row from the graded records of a (benchmark, template) pair."""
    by_problem: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by_problem[r["id"]].append(r["answer_reward"])
    k = cfg.samples_per_problem
    n = len(records)
    temperature, max_tokens = cfg.sampling()
    pass_k = ""
    if k > 1:
        scores = [pass_at_k(len(v), sum(x >= 1.0 for x in v), k) for v in by_problem.values()]
        pass_k = sum(scores) / len(scores)
    return {
        "benchmark": benchmark,
        "template": template,
        "protocol": cfg.protocol,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "samples_per_problem": k,
        "examples": len(by_problem),
        "accuracy": sum(r["answer_reward"] for r in records) / n,
        "format_rate": sum(r["format_reward"] for r in records) / n,
        "pass_at_k": pass_k,
        "mean_response_length": sum(r["response_length"] for r in records) / n,
        "truncated": sum(r["finish_reason"] == "length" for r in records) / n,
    }


def read_published(path: Path | None = None) -> list[dict[str, str]]:
    """The published rows (model, template, benchmark, accuracy in percent, source) of
    ``path`` (None: :data:`PUBLISHED_CSV`); a missing file is a ConfigError naming it."""
    path = PUBLISHED_CSV if path is None else path
    if not path.is_file():
        raise ConfigError(
            f"setting 'compare' is published, but the table of published numbers {path} is "
            "missing (the repository ships it); restore it, or use compare: none"
        )
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for i, row in enumerate(rows, start=2):
        if set(row) != {"model", "template", "benchmark", "accuracy", "source"}:
            raise ConfigError(
                f"{path}:{i}: columns must be model,template,benchmark,accuracy,source"
            )
    return rows


def compare_rows(model: str, rows: list[dict], published: list[dict[str, str]]) -> list[dict]:
    """Our accuracy (percent) beside the published one of ``model`` and the same template, per
    benchmark and for the average over the benchmarks both have (empty where none)."""
    table = {(p["model"], p["template"], p["benchmark"]): p for p in published}
    out = []
    by_template: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_template[row["template"]].append(row)
    for template, group in by_template.items():
        both = []
        for row in group:
            ours = 100.0 * row["accuracy"]
            pub = table.get((model, template, row["benchmark"]))
            if pub is not None:
                both.append((ours, float(pub["accuracy"])))
            out.append(_compared(row["benchmark"], template, model, ours, pub))
        if both and len(group) > 1:
            mean_ours = sum(o for o, _ in both) / len(both)
            mean_pub = sum(p for _, p in both) / len(both)
            source = next(p for p in published if p["model"] == model)["source"]
            average = {"accuracy": f"{mean_pub}", "source": source}
            out.append(_compared("average", template, model, mean_ours, average))
    return out


def _compared(benchmark: str, template: str, model: str, ours: float, pub) -> dict:
    published = "" if pub is None else float(pub["accuracy"])
    return {
        "benchmark": benchmark,
        "template": template,
        "model": model,
        "ours": round(ours, 1),
        "published": "" if pub is None else round(published, 1),
        "difference": "" if pub is None else round(ours - published, 1),
        "source": "" if pub is None else pub["source"],
    }


def write_tsv(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, columns, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def run_suite(cfg: EvalSuiteConfig, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Run the suite described by ``cfg`` into folder ``out``; returns ``done.json``'s data."""
    out = Path(out)
    if (done := finished_run(out, "eval-suite", cfg)) is not None:
        return done
    t0 = time.perf_counter()
    data = {b: envs.get_task(b).load("test", limit=cfg.eval_examples) for b in cfg.benchmarks}
    published = read_published() if cfg.compare == "published" else []
    lock_run_folder(out, "eval-suite")
    save_config(cfg, out)
    engine_cfg = cfg.engine_config()
    kind = engine_kind(engine_cfg)
    print(f"[eval-suite] rollout engine: {kind} (engine: {cfg.engine})", file=sys.stderr)
    engine = build_engine(engine_cfg)
    rows = []
    try:
        for benchmark, examples in data.items():
            task = envs.get_task(benchmark)
            for template in cfg.templates:
                result = evaluate_policy(
                    engine,
                    examples,
                    task,
                    template,
                    cfg.sampling_params(template),
                    batch_size=cfg.eval_batch_size,
                    grade_timeout=cfg.grade_timeout,
                    progress=progress,
                )
                write_generations(out / benchmark / template, 0, result.records)
                rows.append(suite_row(cfg, benchmark, template, result.records))
                print(
                    f"[eval-suite] {benchmark} / {template}: accuracy "
                    f"{rows[-1]['accuracy']:.4f}, truncated {rows[-1]['truncated']:.3f}",
                    file=sys.stderr,
                )
    finally:
        close_engine(engine)
    write_tsv(out / "suite.tsv", TSV_COLUMNS, rows)
    if cfg.compare == "published":
        write_tsv(
            out / "compare.tsv",
            COMPARE_COLUMNS,
            compare_rows(cfg.published_name(), rows, published),
        )
    done = {
        "rows": len(rows),
        "engine": kind,
        "wall_seconds": time.perf_counter() - t0,
    }
    write_json_atomic(out / "done.json", done)
    release_run_folder(out)
    return done


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--compare" in argv:  # `--compare published` is the setting `compare`
        i = argv.index("--compare")
        if i + 1 >= len(argv):
            print("rrl eval-suite: --compare needs a value (published)", file=sys.stderr)
            return 2
        argv[i : i + 2] = ["--set", f"compare={argv[i + 1]}"]
    resolved = resolve_command(
        EvalSuiteConfig,
        "eval-suite",
        argv,
        "The five-benchmark suite (AIME24, AMC23, MATH500, Minerva, OlympiadBench) under "
        "several templates: suite.tsv, generations, and compare.tsv beside published numbers.\n\n"
        "  --compare published   also write compare.tsv, our accuracy beside the published one\n"
        "                        (the same as --set compare=published)",
    )
    if resolved is None:
        return 2
    cfg, args = resolved
    try:
        done = run_suite(cfg, args.out)
    except ConfigError as exc:
        print(f"rrl eval-suite: {exc}", file=sys.stderr)
        return 2
    print(f"eval-suite: {done['rows']} rows in {Path(args.out) / 'suite.tsv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
