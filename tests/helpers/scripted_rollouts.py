"""Trainer runs whose rollout rewards are non-zero by construction, for plumbing tests.

The micro world the trainer tests train from writes near-random text: with the real grader its
rollouts earn a reward only by luck, and whether they do depends on the CPU's rounding (on an
AVX-512 machine a short GRPO run of the trainer tests never did). A test about
plumbing (outputs written, reproducible, resumable) then compared runs that never updated the
weights. :class:`OneCorrectPerGroup` takes the luck out: it wraps the rollout engine the
trainer builds and, in every rollout call (``params.n > 1``), replaces the first completion of
each prompt with a correct, well-formatted r1_zero answer, checked against the task's reward
function when the engine is built. The other completions, and every evaluation call
(``n == 1``), are the real engine's samples, and the real grader scores them all. So each
rollout batch of G samples per prompt has a mean reward of at least 1 / G, every GRPO group
whose sampled responses are wrong has non-zero advantages, and expert iteration keeps at least
one response per question.

In-process: :func:`install` (with pytest's ``monkeypatch``). In a subprocess (the
kill-and-resume tests): ``python tests/helpers/scripted_rollouts.py <rrl command> [options]``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository root


def correct_answer(ground_truth: str) -> str:
    """A response that the r1_zero reward scores 1 (the prompt ends with ``<think>``)."""
    return f" scripted </think> <answer> {ground_truth} </answer>"


class OneCorrectPerGroup:
    """A rollout engine around ``inner`` whose rollouts hold one correct answer per prompt.

    ``answers`` maps each training prompt (formatted as the trainer formats it) to its
    scripted response. Records ``replaced``, the number of completions it replaced.
    """

    def __init__(self, inner: Any, tokenizer: Any, answers: dict[str, str]) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.answers = answers
        self.replaced = 0

    @classmethod
    def for_config(cls, cfg: Any, inner: Any, tokenizer: Any) -> OneCorrectPerGroup:
        """Script the answers of ``cfg``'s training questions; refuse any that its reward
        function would not score 1 (verified here, before the run uses them)."""
        import envs

        task = envs.get_task(cfg.task)
        reward_fn = task.reward_fn(cfg.template)
        answers = {}
        for ex in task.load(cfg.train_split, limit=cfg.train_examples):
            text = correct_answer(ex.ground_truth)
            score = reward_fn(text, ex.ground_truth)
            if score["reward"] != 1.0:
                raise AssertionError(f"scripted answer {text!r} scored {score} for {ex.id}")
            answers[task.format_prompt(ex, cfg.template)] = text
        return cls(inner, tokenizer, answers)

    def sync_weights(self, model) -> None:
        self.inner.sync_weights(model)

    def generate(self, prompts: list[str], params) -> list[list[Any]]:
        from reasoning_core.runtime.engines.rollout import Completion

        outs = self.inner.generate(prompts, params)
        if params.n == 1:  # evaluation: the real samples
            return outs
        scripted = []
        for prompt, group in zip(prompts, outs, strict=True):
            text = self.answers[prompt]
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            # Not sampled, so no sampling log-probs: NaN, so that any use of them shows.
            first = Completion(text, ids, [math.nan] * len(ids), "stop")
            scripted.append([first, *group[1:]])
            self.replaced += 1
        return scripted

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


# The trainers' real engine factory while scripted_engine stands in for it (None: the one
# lifecycle holds, as in a rollout worker's fresh process, which imports this module anew).
_REAL = None


def scripted_engine(cfg, model, tokenizer):
    """``make_rollout_engine`` with scripted rollouts; a module-level function, so that a
    rollout worker process (``rollout_worker``) receives it by name and scripts its samples
    the same way."""
    from reasoning_core.runtime.trainers import lifecycle as run

    real = _REAL or run.make_rollout_engine
    engine = real(cfg, model, tokenizer)
    if not hasattr(cfg, "group_size"):  # SFT: no rollouts, evaluation only
        return engine
    return OneCorrectPerGroup.for_config(cfg, engine, tokenizer)


def install(monkeypatch) -> None:
    """Make the trainers started in this test build a :class:`OneCorrectPerGroup` engine."""
    from reasoning_core.runtime.trainers import lifecycle as run

    if run.make_rollout_engine is not scripted_engine:
        monkeypatch.setattr(sys.modules[__name__], "_REAL", run.make_rollout_engine)
    monkeypatch.setattr(run, "make_rollout_engine", scripted_engine)


def main(argv: list[str]) -> int:
    """``rrl`` with scripted rollouts (for subprocesses)."""
    sys.path.insert(0, str(ROOT))
    from reasoning_core.runtime import cli
    from reasoning_core.runtime.trainers import lifecycle as run

    global _REAL
    _REAL, run.make_rollout_engine = run.make_rollout_engine, scripted_engine
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
