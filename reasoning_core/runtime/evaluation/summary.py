"""Reading graded evaluation records: the handout's categories, summary means, warnings.

Pure functions over the records :func:`reasoning_core.runtime.evaluation.loop.evaluate_policy` makes
(one dict per response with ``format_reward``, ``answer_reward``, ``reward``,
``response_length``, ``finish_reason``); :mod:`~reasoning_core.runtime.evaluation.evaluate` re-exports
them.

- :func:`category`: ``correct`` (format 1 and answer 1), ``wrong_answer`` (format 1, answer 0),
  ``bad_format`` (format 0);
- :func:`summarize`: means, response lengths overall / correct / incorrect, category counts;
- :func:`category_report`: counts, fractions and the first 10 records of each category in eval
  order (``rrl eval``'s ``summary.json``);
- :func:`eval_line_stats`, :func:`warn_grading`: what every ``eval`` metrics line carries
  besides the rewards (entropy, response lengths, grading failures), and the stderr warning when grading timed out or raised;
- :func:`load_eval_examples`, :func:`eval_size_warnings`: the evaluation split, with a warning
  when ``eval_examples`` asks for more examples than it has or ``eval_max_tokens`` reaches
  past the model's context.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from reasoning_core.runtime.training.rollouts import truncated_share

CATEGORIES = ("correct", "wrong_answer", "bad_format")
CATEGORY_HELP = {
    "correct": "format reward 1 and answer reward 1",
    "wrong_answer": "format reward 1 and answer reward 0",
    "bad_format": "format reward 0",
}


def is_one(x: float) -> bool:
    return x >= 1.0 - 1e-9


def category(record: dict[str, Any]) -> str:
    """``correct`` / ``wrong_answer`` / ``bad_format`` from a record's rewards."""
    if not is_one(record["format_reward"]):
        return "bad_format"
    return "correct" if is_one(record["answer_reward"]) else "wrong_answer"


def warn_grading(summary: dict[str, Any], where: str = "eval") -> str | None:
    """Print (stderr) and return a warning when ``summary``'s ``grade/timeouts`` or
    ``grade/errors`` is non-zero: those responses scored 0 whatever they said."""
    timeouts = summary.get("grade/timeouts") or 0
    errors = summary.get("grade/errors") or 0
    if not (timeouts or errors):
        return None
    message = (
        f"[{where}] warning: grading timed out on {timeouts} and raised on {errors} of "
        f"{summary.get('num_responses')} responses; they scored 0 (see grade/timeouts, "
        "grade/errors)"
    )
    print(message, file=sys.stderr)
    return message


def summarize(records: list[dict[str, Any]], num_examples: int | None = None) -> dict[str, Any]:
    """Means over ``records`` (see :class:`EvalResult`); ``response_length_correct`` and
    ``response_length_incorrect`` are the mean tokens of the responses with answer reward 1
    and of the others (None when there are none), as ``log_generations`` reports them."""
    n = len(records)

    def mean(key: str) -> float:
        return sum(float(r[key]) for r in records) / n if n else 0.0

    summary: dict[str, Any] = {
        "accuracy": mean("answer_reward"),
        "answer_reward": mean("answer_reward"),
        "format_reward": mean("format_reward"),
        "reward": mean("reward"),
        "num_examples": n if num_examples is None else num_examples,
        "num_responses": n,
        "response_length": mean("response_length"),
        "finish_length_fraction": truncated_share([r["finish_reason"] for r in records]),
    }
    summary["truncated"] = summary["finish_length_fraction"]
    right = [r["response_length"] for r in records if is_one(r["answer_reward"])]
    wrong = [r["response_length"] for r in records if not is_one(r["answer_reward"])]
    summary["response_length_correct"] = sum(right) / len(right) if right else None
    summary["response_length_incorrect"] = sum(wrong) / len(wrong) if wrong else None
    for name in CATEGORIES:
        summary[name] = sum(category(r) == name for r in records)
    return summary


EVAL_LINE_KEYS = (
    "entropy",
    "truncated",
    "response_length",
    "response_length_correct",
    "response_length_incorrect",
    "grade/timeouts",
    "grade/errors",
)


def eval_line_stats(summary: dict[str, Any]) -> dict[str, Any]:
    """The ``summary`` values every ``eval`` metrics line carries besides the rewards: the mean
    token entropy of the responses (``entropy``, token-weighted; None when not computed), the
    share cut off at the token limit (``truncated``), response lengths (overall, correct,
    incorrect) and the grading's ``grade/timeouts`` /
    ``grade/errors``: what the handout's ``log_generations`` reports, for every evaluation."""
    return {key: summary[key] for key in EVAL_LINE_KEYS}


def category_report(records: list[dict[str, Any]], examples_per_category: int = 10) -> dict:
    """Counts, fractions and the first ``examples_per_category`` records of each category, in
    eval order (the order of ``records``): the same examples on every rerun. The handout asks
    users to read at least 10 bad-format and 10 wrong-answer cases, hence the default."""
    n = max(1, len(records))
    report = {}
    for name in CATEGORIES:
        members = [r for r in records if category(r) == name]
        report[name] = {
            "description": CATEGORY_HELP[name],
            "count": len(members),
            "fraction": len(members) / n,
            "examples": members[:examples_per_category],
        }
    return report


def eval_size_warnings(cfg: Any, loaded: int) -> list[str]:
    """What a run's evaluation settings ask for that the data or the model cannot give:
    ``eval_examples`` above the examples of ``eval_split`` (``loaded`` were read: all of them),
    ``eval_max_tokens`` at or past the model's context (``max_position_embeddings`` in the
    model folder's config.json)."""
    out = []
    data = f" of file {cfg.data_path}" if getattr(cfg, "data_path", None) else ""
    if cfg.eval_examples is not None and cfg.eval_examples > loaded:
        out.append(
            f"setting 'eval_examples' ({cfg.eval_examples}) exceeds the {loaded} examples of "
            f"split {cfg.eval_split!r}{data}: evaluating on those {loaded}"
        )
    try:
        model = json.loads((Path(cfg.model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        model = {}
    context = model.get("max_position_embeddings") if isinstance(model, dict) else None
    if isinstance(context, int) and cfg.eval_max_tokens >= context:
        out.append(
            f"setting 'eval_max_tokens' ({cfg.eval_max_tokens}) reaches past the model's context "
            f"of {context} tokens (max_position_embeddings in {cfg.model_path}/config.json): "
            "prompt and response together are cut at the context"
        )
    return out


def load_eval_examples(task: Any, cfg: Any, **kwargs: Any) -> list:
    """``task.load`` of the evaluation split (limit ``eval_examples``), each of
    :func:`eval_size_warnings` printed on stderr."""
    examples = task.load(cfg.eval_split, limit=cfg.eval_examples, **kwargs)
    for warning in eval_size_warnings(cfg, len(examples)):
        print(f"warning: {warning}", file=sys.stderr)
    return examples
