"""Where the DPO trainer's pairs come from: a JSONL file, Anthropic HH, or verified pairs.

Verified pairs (:func:`verified_pairs`): ``group_size`` responses sampled per training
question with the rollout engine and graded; within each question, the i-th correct response
(reward 1) is paired with the i-th incorrect one, up to ``pairs_per_question`` pairs (a
question whose responses are all right or all wrong gives none). :func:`sample_verified_pairs`
is one round of that from the current policy (the questions and the sampling seed keyed by the
round, as EI and GRPO key theirs by step).

Each pair is ``{"prompt", "chosen", "rejected"}`` with the prompt as the policy sees it
(``pair_template: alpaca`` wraps a bare instruction first). :func:`split_validation` holds
out a seeded set of pairs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envs import DataError
from envs.pairs import load_hh, read_pairs
from reasoning_core.runtime.config import ConfigError
from reasoning_core.runtime.metrics import write_json_atomic
from reasoning_core.runtime.pair_logprobs import alpaca_prompt
from reasoning_core.runtime.rng import Stream, step_rng
from reasoning_core.runtime.sampling import RolloutBatch, Rollouts, reward_means, sample_and_grade


def verified_pairs(batch: RolloutBatch, group_size: int, pairs_per_question: int) -> list[dict]:
    """Correct-against-incorrect pairs of a graded rollout batch (``group_size`` consecutive
    responses per question), in question order; see the module docstring."""
    pairs = []
    for start in range(0, len(batch.responses), group_size):
        group = range(start, start + group_size)
        right = [i for i in group if batch.scores[i]["reward"] >= 1.0]
        wrong = [i for i in group if batch.scores[i]["reward"] < 1.0]
        for w, r in list(zip(right, wrong, strict=False))[:pairs_per_question]:
            pairs.append(
                {
                    "prompt": batch.prompts[w],
                    "chosen": batch.responses[w],
                    "rejected": batch.responses[r],
                    "ground_truth": batch.ground_truths[w],
                }
            )
    return pairs


def sample_verified_pairs(
    engine: Any, model: Any, rollouts: Rollouts, *, round_: int, count: int, pairs_per_question: int
) -> tuple[list[dict], dict[str, Any]]:
    """Round ``round_``'s verified pairs from ``model`` and the facts of its rollouts for the
    round's metrics line (rewards, sampled responses, questions with a pair, pairs)."""
    batch = sample_and_grade(engine, model, rollouts, step=round_, count=count)
    pairs = verified_pairs(batch, rollouts.params.n, pairs_per_question)
    line = {
        **reward_means(batch.scores),
        **batch.grade_metrics,
        "sampled_responses": len(batch.responses),
        "pairs": len(pairs),
        "rollout/response_length": batch.mean_length,
        "rollout/truncated": batch.truncated,
        **batch.seconds,
    }
    return pairs, line


def load_pairs(cfg: Any) -> tuple[list[dict], dict[str, Any]]:
    """The pairs of ``pairs: jsonl`` (``train_pairs``) or ``pairs: hh`` (``hh_dir``), prompts
    wrapped by ``pair_template``; and counts for ``done.json``."""
    try:
        if cfg.pairs == "jsonl":
            pairs, info = read_pairs(cfg.train_pairs), {}
        else:
            pairs, info = load_hh(cfg.hh_dir)
    except DataError as exc:
        setting = "train_pairs" if cfg.pairs == "jsonl" else "hh_dir"
        raise ConfigError(f"setting {setting!r}: {exc}") from None
    return [templated(cfg, p) for p in pairs], info


def templated(cfg: Any, pair: dict) -> dict:
    """``pair`` with its prompt in ``cfg.pair_template`` (``none``: as it is)."""
    if cfg.pair_template == "alpaca":
        return {**pair, "prompt": alpaca_prompt(pair["prompt"])}
    return pair


def split_validation(pairs: list[dict], n_val: int, seed: int) -> tuple[list[dict], list[dict]]:
    """``(train, validation)``: ``n_val`` pairs drawn with the run's seed (stream ``DPO_VAL``)
    held out, both in their original order. ConfigError when fewer than ``n_val + 1`` pairs."""
    if len(pairs) <= n_val:
        raise ConfigError(
            f"setting 'val_pairs' ({n_val}) leaves no training pair of the {len(pairs)} pairs"
        )
    held = set(step_rng(seed, Stream.DPO_VAL).permutation(len(pairs))[:n_val].tolist())
    train = [p for i, p in enumerate(pairs) if i not in held]
    val = [p for i, p in enumerate(pairs) if i in held]
    return train, val


def write_pairs(pairs: list[dict], path: Path) -> None:
    """The pairs as JSONL, written whole or not at all (a round's pairs, read back on resume)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    tmp.replace(path)


def read_saved(path: Path) -> tuple[list[dict], dict] | None:
    """A round's saved pairs and metrics line (None when not saved yet)."""
    facts = path.with_suffix(".json")
    if not path.is_file() or not facts.is_file():
        return None
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return pairs, json.loads(facts.read_text(encoding="utf-8"))


def save_round(pairs: list[dict], line: dict, path: Path) -> None:
    write_pairs(pairs, path)
    write_json_atomic(path.with_suffix(".json"), line)
