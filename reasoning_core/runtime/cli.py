"""The ``rrl`` command line: one subcommand per workflow rule.

Subcommands are imported lazily so that ``rrl summary`` does not pay for importing vLLM.
Each target module exposes ``main(argv: list[str]) -> int``.

Errors in what the user gave (a setting, a data file, a damaged saved state) that reach this
level are printed as ``rrl <command>: <message>`` (the message names the file, line or
setting) with exit status 2, not as a traceback; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "tiny-world": ("reasoning_core.runtime.tinyworld", "build the tiny CPU base model"),
    "eval": ("reasoning_core.runtime.evaluate", "zero-shot evaluation of a model on a task"),
    "eval-suite": (
        "reasoning_core.runtime.eval_suite",
        "the five-benchmark suite under several templates, beside published numbers",
    ),
    "sft": ("reasoning_core.runtime.sft", "supervised fine-tuning on reasoning traces"),
    "instruction-sft": (
        "reasoning_core.runtime.instruction_sft",
        "instruction tuning on packed {prompt, response} data (the supplement's SFT)",
    ),
    "ei": ("reasoning_core.runtime.ei", "expert iteration"),
    "grpo": ("reasoning_core.runtime.grpo", "GRPO and its policy-gradient relatives"),
    "dpo": ("reasoning_core.runtime.dpo", "direct preference optimization on pairs"),
    "supplement-generate": (
        "reasoning_core.runtime.supplement_generate",
        "a model's AlpacaEval or SimpleSafetyTests responses, in each judge's format",
    ),
    "safety-judge": (
        "reasoning_core.runtime.safety_judge",
        "a judge model's safe share of SimpleSafetyTests responses",
    ),
    "plot": ("reasoning_core.runtime.report", "plot curves from metrics.jsonl files"),
    "summary": ("reasoning_core.runtime.report", "aggregate runs into results/summary.tsv"),
    "seeds": ("reasoning_core.runtime.report", "one run across seeds: mean, std, 95% interval"),
    "ablations": (
        "reasoning_core.runtime.report",
        "each ablation against its baseline, with bands",
    ),
    "robustness": (
        "reasoning_core.runtime.report",
        "which comparisons hold on every base model",
    ),
    "sft-data": ("envs.sft_data", "build r1_zero SFT examples from a task's own solutions"),
    "gpu-check": ("reasoning_core.runtime.gpu_check", "prepared GPU readiness check"),
    "docs": ("reasoning_core.runtime.settings_doc", "write docs/configuration.md from the code"),
}


def _usage() -> str:
    lines = ["usage: rrl <command> [options]", "", "commands:"]
    width = max(map(len, SUBCOMMANDS))
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"rrl: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    entry = getattr(module, "main_" + name.replace("-", "_"), None) or module.main
    try:
        return int(entry(rest) or 0)
    except _user_errors() as exc:
        print(f"rrl {name}: {exc}", file=sys.stderr)
        return 2


def _user_errors() -> tuple[type[Exception], ...]:
    """Exceptions whose message is written for the user (see the module docstring).

    Imported here, not at the top, for the same reason as the subcommands: the checkpoint
    module imports torch, which ``rrl plot`` and ``rrl summary`` do without."""
    from envs.base import DataError
    from reasoning_core.runtime.checkpoint import StateError
    from reasoning_core.runtime.config import ConfigError

    return (ConfigError, DataError, StateError)


if __name__ == "__main__":
    sys.exit(main())
