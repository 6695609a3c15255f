"""Where the DPO trainer's pairs come from: a JSONL file, Anthropic HH, or verified pairs.

Verified pairs (:func:`verified_pairs`): ``group_size`` responses sampled per training
question with the rollout engine and graded; within each question, the i-th correct response
(reward 1) is paired with the i-th incorrect one, up to ``pairs_per_question`` pairs (a
question whose responses are all right or all wrong gives none). :func:`sample_verified_pairs`
is one round of that from the current policy (the questions and the sampling seed keyed by the
round, as EI and GRPO key theirs by step).

Each pair is ``{"prompt", "chosen", "rejected"}`` with the prompt as the policy sees it
(``pair_template: alpaca`` wraps a bare instruction first, keeping it as ``instruction``: the
trainer scores such a pair as two Alpaca documents, :func:`envs.alpaca.alpaca_document`). :func:`split_validation` holds
out a seeded set of pairs.

Round 1's verified pairs can be sampled apart (:func:`sample_first_round`, ``rrl dpo --set
sample_only=true``: the workflow's rule ``dpo_pairs``) and read by any run whose settings agree
outside :data:`TRAINING_SETTINGS` (:func:`read_first_round`, setting ``first_round_pairs``), so
runs that differ only in how they train share one set of sampled pairs. Later rounds sample
from the policy the round before trained, so the trainer samples them itself.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml

from envs import DataError
from envs.alpaca import alpaca_prompt
from envs.pairs import load_hh, read_pairs
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.metrics import write_json_atomic
from reasoning_core.runtime.run.resume import RESUME_MAY_CHANGE
from reasoning_core.runtime.run.rng import Stream, step_rng
from reasoning_core.runtime.settings import provenance
from reasoning_core.runtime.settings.config import save_config
from reasoning_core.runtime.trainers import lifecycle as run_lifecycle
from reasoning_core.runtime.training.policy import load_policy
from reasoning_core.runtime.training.rollouts import (
    RolloutBatch,
    Rollouts,
    load_questions,
    reward_means,
    sample_and_grade,
)

# Settings of `rrl dpo` that do not change round 1's sampled pairs (how the policy trains, is
# evaluated and saved, where it runs): a run may read pairs sampled under other values of these.
TRAINING_SETTINGS = frozenset(
    {
        "lr", "weight_decay", "betas", "adam_eps", "lr_scheduler", "warmup_steps",
        "min_lr_ratio", "max_grad_norm", "eval_examples", "eval_every", "eval_at_start",
        "eval_temperature", "eval_top_p", "eval_max_tokens", "eval_seed", "eval_batch_size",
        "save_every", "save_checkpoint", "reference_path", "reference_device", "beta",
        "nll_weight", "val_pairs", "val_every", "n_dpo_rounds", "epochs", "batch_size",
        "gradient_accumulation_steps", "optimizer", "sample_only", "first_round_pairs",
        *RESUME_MAY_CHANGE,
    }
)  # fmt: skip
FIRST_ROUND = Path("pairs") / "round_0.jsonl"


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


def sample_first_round(cfg: Any, out: str | Path, task: Any) -> dict[str, Any]:
    """``sample_only``: round 1's verified pairs from ``model_path`` (as :func:`train` of
    :mod:`~reasoning_core.runtime.trainers.dpo` samples them) saved in ``out/pairs/round_0.jsonl`` with
    the round's facts, then ``done.json``; no training, no evaluation."""
    out = Path(out)
    save_config(cfg, out)
    message = f"setting 'dpo_questions' ({cfg.dpo_questions}) exceeds the {{n}} training questions"
    rollouts = Rollouts.from_config(
        cfg, task, load_questions(cfg, task, cfg.dpo_questions, message)
    )
    model, tokenizer = load_policy(cfg)
    # Looked up when called, as setup_training does, so one seam builds every run's engine.
    engine = run_lifecycle.make_rollout_engine(cfg, model, tokenizer)
    pairs, line = sample_verified_pairs(
        engine, model, rollouts, round_=0, count=cfg.dpo_questions,
        pairs_per_question=cfg.pairs_per_question,
    )  # fmt: skip
    save_round(pairs, line, out / FIRST_ROUND)
    done = {"method": "dpo_pairs", "model_path": cfg.model_path, "pairs": len(pairs),
            "sampled_responses": line["sampled_responses"], "reward": line.get("reward")}  # fmt: skip
    write_json_atomic(out / "done.json", done)
    print(f"[dpo] {len(pairs)} pairs from {done['sampled_responses']} responses -> {out}")
    return done


def read_first_round(cfg: Any) -> tuple[list[dict], dict]:
    """The pairs and facts a ``sample_only`` run saved in ``first_round_pairs``. ConfigError
    when the folder holds no finished one, or when it sampled under other settings than
    ``cfg``'s outside :data:`TRAINING_SETTINGS` (the model, the seed, the questions...)."""
    folder = Path(cfg.first_round_pairs)
    saved = read_saved(folder / FIRST_ROUND)
    if saved is None or not (folder / "done.json").is_file():
        raise ConfigError(
            f"setting 'first_round_pairs': {folder} holds no finished sample_only run "
            f"({FIRST_ROUND} and done.json)"
        )
    try:
        old = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"setting 'first_round_pairs': {folder}/config.yaml: {exc}") from None
    new = yaml.safe_load(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    ignored = TRAINING_SETTINGS | {provenance.KEY}
    changes = [
        f"{key} {old[key]!r} there, {new[key]!r} here"
        for key in sorted(set(old) & set(new))
        if key not in ignored and old[key] != new[key]
    ]
    if changes:
        raise ConfigError(
            f"setting 'first_round_pairs': the pairs in {folder} were sampled with other "
            f"settings: {'; '.join(changes)}"
        )
    return saved


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
    """``pair`` with its prompt in ``cfg.pair_template`` (``none``: as it is; ``alpaca``: the
    Alpaca head, the bare prompt kept as ``instruction``)."""
    if cfg.pair_template == "alpaca":
        return {**pair, "instruction": pair["prompt"], "prompt": alpaca_prompt(pair["prompt"])}
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
