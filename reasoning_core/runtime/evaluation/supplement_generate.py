"""``rrl supplement-generate``: a model's responses to AlpacaEval's or SimpleSafetyTests'
prompts, written in the format each one's judge reads (the supplement's ``alpaca_eval_baseline``
and ``sst_baseline`` (a), and their after-SFT counterparts).

Each prompt goes into the zero-shot system prompt (a base model) or the Alpaca template (a
model tuned on it: the engine is prompted with the Alpaca document's prompt ids,
:func:`envs.alpaca.alpaca_prompt_ids`, the tokenizer's BOS included where it adds one, on
every engine); decoding is greedy and stops at ``# Query:`` by default, as the handout
asks. ``rrl supplement-generate --config F --out DIR`` writes ``config.yaml``, the outputs
(``alpaca_eval.json``: the JSON array the ``alpaca_eval`` command reads;
``simple_safety_tests.jsonl``: the input of ``rrl safety-judge``), ``summary.json`` (count,
generation time and throughput in examples/s) and, last, ``done.json``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from envs.alpaca import engine_prompt
from envs.base import DataError
from envs.supplement import (
    instruction_prompt,
    load_alpaca_eval,
    load_simple_safety_tests,
    write_alpaca_eval,
    write_simple_safety_tests,
)
from reasoning_core.runtime.engines import ENGINE_DEFAULT
from reasoning_core.runtime.engines.rollout import RolloutEngine
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation import evaluate
from reasoning_core.runtime.run.checkpoint import check_model_folder
from reasoning_core.runtime.run.metrics import finished_run, write_json_atomic
from reasoning_core.runtime.run.ownership import lock_run_folder, release_run_folder
from reasoning_core.runtime.settings.config import check_count, resolve_command, save_config
from reasoning_core.runtime.training.rollouts import EVAL_RENAMED, eval_params

OUTPUT_FILES = {
    "alpaca_eval": "alpaca_eval.json",
    "simple_safety_tests": "simple_safety_tests.jsonl",
}


@dataclass
class SupplementGenerateConfig:
    """Settings of ``rrl supplement-generate`` (section ``supplement-generate``); the
    evaluation settings have ``rrl eval``'s names (``eval_examples``, ``eval_max_tokens``,
    ``eval_batch_size``)."""

    RENAMED: ClassVar[dict[str, str]] = {
        old: EVAL_RENAMED[old] for old in ("limit", "max_tokens", "batch_size")
    }
    # Decoding is greedy and unseeded, as the handout asks: fixed, so no settings, under the
    # names sampling.eval_params reads.
    eval_temperature: ClassVar[float] = 0.0
    eval_top_p: ClassVar[float] = 1.0
    seed: ClassVar[int | None] = None
    eval_seed: ClassVar[int | None] = None

    model_path: str
    """Hugging Face model folder whose responses are written."""
    dataset: Literal["alpaca_eval", "simple_safety_tests"] = "alpaca_eval"
    """Prompts to answer: alpaca_eval (805 instructions) or simple_safety_tests (100)."""
    template: Literal["zero_shot_system_prompt", "alpaca_sft"] = "zero_shot_system_prompt"
    """The prompt around each instruction: the evaluations' zero-shot system prompt (a base
    model) or the Alpaca template (a model tuned on it)."""
    data_path: str | None = None
    """Read the prompts from this JSONL file instead of the vendored data."""
    eval_examples: int | None = None
    """Answer only the first N prompts (null: all; more than the data set holds is
    refused)."""
    generator: str = ""
    """AlpacaEval's generator field, the model's name ("": the model folder's name)."""
    engine: Literal["auto", "vllm", "hf", "static"] = ENGINE_DEFAULT
    """Sampling engine (as rrl eval's)."""
    device: str = "auto"
    """Where the hf and static engines run: auto, cpu, cuda or cuda:N."""
    dtype: str = "bfloat16"
    """Dtype of the model's weights."""
    eval_max_tokens: int = 1024
    """Most new tokens per response."""
    stop: list[str] = field(default_factory=lambda: ["# Query:"])
    """Strings that end a response (not kept in it)."""
    eval_batch_size: int = 256
    """Prompts per engine call."""
    max_model_len: int | None = None
    """vLLM only: longest prompt + response in tokens (null: the model's)."""
    gpu_memory_utilization: float = 0.85
    """vLLM on a GPU only: the share of the GPU's memory vLLM may take."""

    def validate(self) -> None:
        for name in ("eval_max_tokens", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"setting {name!r} must be >= 1, got {getattr(self, name)}")
        if self.eval_examples is not None and self.eval_examples < 1:
            raise ConfigError(f"setting 'eval_examples' must be >= 1, got {self.eval_examples}")
        if self.device != "auto" and not self.device.startswith(("cpu", "cuda")):
            raise ConfigError(
                f"setting 'device' must be auto, cpu, cuda or cuda:N, got {self.device!r}"
            )
        # The prompts read at start (hundreds of lines): a missing file, or more asked than
        # the data set holds, is named before the model loads.
        setting = "data_path" if self.data_path else "dataset"
        try:
            held = len(load_prompts(dataclasses.replace(self, eval_examples=None)))
        except DataError as exc:
            raise ConfigError(f"setting {setting!r}: {exc}") from None
        check_count("eval_examples", self.eval_examples, held, self.data_path or self.dataset)
        check_model_folder(self.model_path)


def eval_config(cfg: SupplementGenerateConfig) -> evaluate.EvalConfig:
    """The ``rrl eval`` settings of the same model and placement."""
    return evaluate.EvalConfig(
        model_path=cfg.model_path,
        engine=cfg.engine,
        device=cfg.device,
        dtype=cfg.dtype,
        max_model_len=cfg.max_model_len,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
    )


def build_engine(cfg: SupplementGenerateConfig) -> RolloutEngine:
    """The engine ``rrl eval`` would build for the same model and placement settings."""
    eval_cfg = eval_config(cfg)
    print(f"[supplement-generate] engine: {evaluate.engine_kind(eval_cfg)}", file=sys.stderr)
    return evaluate.build_engine(eval_cfg)


def load_prompts(cfg: SupplementGenerateConfig) -> list[dict]:
    if cfg.dataset == "alpaca_eval":
        return load_alpaca_eval(cfg.data_path, cfg.eval_examples)
    return load_simple_safety_tests(cfg.data_path, cfg.eval_examples)


def run_generate(cfg: SupplementGenerateConfig, out: str | Path) -> dict[str, Any]:
    """Answer ``cfg.dataset``'s prompts into folder ``out``; returns ``done.json``'s data."""
    out = Path(out)
    if (done := finished_run(out, "supplement-generate", cfg)) is not None:
        return done
    t0 = time.perf_counter()
    records = load_prompts(cfg)  # DataError names the file and line
    key = "instruction" if cfg.dataset == "alpaca_eval" else "prompts_final"
    instructions = [rec[key] for rec in records]
    lock_run_folder(out, "supplement-generate")
    save_config(cfg, out)
    engine = build_engine(cfg)
    params = eval_params(cfg, include_stop_str_in_output=False)
    # vLLM adds the tokenizer's BOS itself; the hf and static engines read it from the text.
    vllm = evaluate.engine_kind(eval_config(cfg)) == "vllm"
    tokenizer = evaluate.engine_tokenizer(engine, cfg.model_path)
    prompts = [
        engine_prompt(tokenizer, instruction_prompt(text, cfg.template), engine_adds_bos=vllm)
        for text in instructions
    ]
    t1 = time.perf_counter()
    outputs: list[str] = []
    for start in range(0, len(prompts), cfg.eval_batch_size):
        batch = engine.generate(prompts[start : start + cfg.eval_batch_size], params)
        outputs += [completions[0].text for completions in batch]
    seconds = time.perf_counter() - t1
    evaluate.close_engine(engine)
    path = out / OUTPUT_FILES[cfg.dataset]
    if cfg.dataset == "alpaca_eval":
        generator = cfg.generator or Path(cfg.model_path).resolve().name
        write_alpaca_eval(path, records, outputs, generator)
    else:
        write_simple_safety_tests(path, instructions, outputs)
    summary = {
        "dataset": cfg.dataset,
        "template": cfg.template,
        "model_path": cfg.model_path,
        "num_examples": len(outputs),
        "time/generate": seconds,
        "throughput": len(outputs) / seconds if seconds > 0 else None,
        "outputs": path.name,
    }
    write_json_atomic(out / "summary.json", summary)
    done = {**summary, "wall_seconds": time.perf_counter() - t0}
    write_json_atomic(out / "done.json", done)
    release_run_folder(out)
    return done


def main(argv: list[str] | None = None) -> int:
    resolved = resolve_command(
        SupplementGenerateConfig,
        "supplement-generate",
        argv,
        "Answer AlpacaEval's or SimpleSafetyTests' prompts in the format each judge reads.",
    )
    if resolved is None:
        return 2
    cfg, args = resolved
    done = run_generate(cfg, args.out)
    rate = done["throughput"]
    print(
        f"{done['dataset']}: {done['num_examples']} responses in {done['outputs']}"
        + (f", {rate:.3f} examples/s" if rate is not None else "")
    )
    return 0
