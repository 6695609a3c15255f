"""The data-backed tasks: MATH, GSM8K and Countdown (vendored data in `envs/data/`).

Every loader takes `path=` to read another file of the same schema (`.jsonl` or `.jsonl.gz`),
validates every record (a `DataError` names file, line and field) and refuses an empty file.
`limit` keeps the first N examples in file order.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from envs.base import DATA_DIR, DataError, Example, RewardFn, Task, Trace, read_jsonl, require

log = logging.getLogger(__name__)


def data_file(task: str, stem: str) -> Path:
    """The vendored file `envs/data/{task}/{stem}.jsonl[.gz]`; `DataError` naming the file
    (and the folder, when that is gone) when it is missing."""
    for suffix in (".jsonl", ".jsonl.gz"):
        p = DATA_DIR / task / f"{stem}{suffix}"
        if p.is_file():
            return p
    folder = DATA_DIR / task
    where = "" if folder.is_dir() else f" (the folder {folder} is missing)"
    raise DataError(
        f"{folder / stem}.jsonl[.gz]",
        None,
        f"no such data file{where}; the repository ships it: restore it with "
        f"git checkout -- {folder}",
    )


def _take(examples: Iterator[Example], limit: int | None) -> list[Example]:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    out: list[Example] = []
    for ex in examples:
        if limit is not None and len(out) >= limit:
            break
        out.append(ex)
    return out


class _VendoredTask(Task):
    """A task whose splits are vendored JSONL files, `envs/data/{name}/{stem}.jsonl[.gz]`
    (`stem`: `_files[split]`, default the split's name); `_iter` parses one file's rows."""

    _files: dict[str, str] = {}

    def load(self, split: str, path: str | Path | None = None, limit: int | None = None):
        self.check_split(split)
        stem = self._files.get(split, split)
        path = Path(path) if path is not None else data_file(self.name, stem)
        return _take(self._iter(split, path), limit)

    def _iter(self, split: str, path: Path) -> Iterator[Example]:
        raise NotImplementedError


# ----------------------------------------------------------------------------- MATH


class MathTask(_VendoredTask):
    """MATH (Hendrycks et al. 2021) with the PRM800K / MATH-500 schema.

    Splits:
        train: the 7,500 original train problems (`unique_id` starting `train/`) of the 12k
            file, minus the two with an empty answer.
        train12k: all 12,000 rows (7.5k train + the 4,500 test problems outside MATH-500);
            only valid with `math500` evaluation (`check_split_pair`).
        test: the full 5,000-problem test set (the handout's validation set).
        math500: the 500-problem PRM800K subset of `test`.

    Rows with an empty `answer` are dropped (MATH has two, whose solutions box nothing), since
    a grader could otherwise reward an empty answer.
    """

    name = "math"
    splits = ("train", "train12k", "test", "math500")
    _files = {"train": "train", "train12k": "train", "test": "test", "math500": "math500"}
    # Pairs (train split, eval split) that share problems.
    _overlaps = {
        ("train12k", "test"): "the 12k train file holds 4,500 of the 5k test problems",
        ("test", "math500"): "MATH-500 is a subset of the 5k test set",
        ("math500", "test"): "MATH-500 is a subset of the 5k test set",
    }

    def check_split_pair(self, train_split: str, eval_split: str) -> None:
        super().check_split_pair(train_split, eval_split)
        reason = self._overlaps.get((train_split, eval_split))
        if reason is None and train_split == eval_split:
            reason = "they are the same split"
        if reason is not None:
            allowed = "train12k only with math500" if train_split == "train12k" else ""
            raise ValueError(
                f"MATH: training on {train_split!r} and evaluating on {eval_split!r} overlap "
                f"({reason}); use train with test or math500{', ' + allowed if allowed else ''}"
            )

    def _iter(self, split: str, path: Path) -> Iterator[Example]:
        kept = dropped = 0
        for lineno, rec in read_jsonl(path):
            uid = require(rec, "unique_id", str, path, lineno, nonempty=True)
            problem = require(rec, "problem", str, path, lineno, nonempty=True)
            answer = require(rec, "answer", str, path, lineno)
            solution = require(rec, "solution", str, path, lineno)
            subject = rec.get("subject")
            level = rec.get("level")
            if subject is not None and not isinstance(subject, str):
                raise DataError(path, lineno, "field 'subject' must be str or null")
            if level is not None and (not isinstance(level, int) or isinstance(level, bool)):
                raise DataError(path, lineno, "field 'level' must be int or null")
            if split == "train" and not uid.startswith("train/"):
                continue
            if not answer.strip():
                dropped += 1
                continue
            kept += 1
            yield Example(
                id=uid,
                question=problem,
                ground_truth=answer.strip(),
                extra={"solution": solution, "subject": subject, "level": level},
            )
        if dropped:
            log.info("MATH %s: dropped %d rows with an empty answer (%s)", split, dropped, path)
        if kept == 0:
            hint = " (split 'train' keeps unique_id starting 'train/')" if split == "train" else ""
            raise DataError(path, None, f"no usable MATH rows for split {split!r}{hint}")

    def traces(self, split: str = "train", path: str | Path | None = None, limit=None, **_):
        """The human-written solutions as SFT traces (reasoning = solution, answer = answer)."""
        for ex in self.load(split, path=path, limit=limit):
            yield Trace(ex.question, ex.extra["solution"].strip(), ex.ground_truth, ex.ground_truth)


# ----------------------------------------------------------------------------- GSM8K

_GSM8K_FINAL_RE = re.compile(r"####\s*(.+?)\s*$")
_GSM8K_CALC_RE = re.compile(r"<<[^<>]*>>")
_NUMBER_RE = re.compile(r"^-?\d+(\.\d+)?(/\d+)?$")


def gsm8k_final_answer(answer: str) -> str | None:
    """The number after the final `#### `, thousands commas removed (None when absent)."""
    lines = answer.rstrip().splitlines()
    if not lines:
        return None
    m = _GSM8K_FINAL_RE.search(lines[-1])
    if m is None:
        return None
    return m.group(1).replace(",", "").strip() or None


class GSM8KTask(_VendoredTask):
    """GSM8K (Cobbe et al. 2021). Ground truth: the final `#### N`, thousands commas removed.

    `extra["solution"]` is the worked solution without the `#### N` line and without the
    calculator annotations `<<48/2=24>>`.
    """

    name = "gsm8k"
    splits = ("train", "test")

    def _iter(self, split: str, path: Path) -> Iterator[Example]:
        for lineno, rec in read_jsonl(path):
            question = require(rec, "question", str, path, lineno, nonempty=True)
            answer = require(rec, "answer", str, path, lineno, nonempty=True)
            final = gsm8k_final_answer(answer)
            if final is None or not _NUMBER_RE.match(final):
                raise DataError(
                    path, lineno, "field 'answer' must end with a line '#### N' (N a number)"
                )
            body = "\n".join(answer.rstrip().splitlines()[:-1])
            yield Example(
                id=f"gsm8k/{split}/{lineno}",
                question=question,
                ground_truth=final,
                extra={"solution": _GSM8K_CALC_RE.sub("", body).strip()},
            )

    def traces(self, split: str = "train", path: str | Path | None = None, limit=None, **_):
        for ex in self.load(split, path=path, limit=limit):
            yield Trace(ex.question, ex.extra["solution"], ex.ground_truth, ex.ground_truth)


# ----------------------------------------------------------------------------- Countdown


def countdown_question(nums: list[int], target: int) -> str:
    return (
        f"Using the numbers {nums}, create an equation that equals {target}. You can use basic "
        "arithmetic operations (+, -, *, /) and each number can only be used once."
    )


def countdown_ground_truth(nums: list[int], target: int) -> str:
    """The ground-truth string of docs/contract.md: JSON `{"nums": [...], "target": N}`."""
    return json.dumps({"nums": list(nums), "target": target})


class CountdownTask(_VendoredTask):
    """Countdown (TinyZero): reach `target` with + - * / using each number exactly once.

    Templates: `countdown` (default; r1 style with an answer example) and `r1_zero`; both are
    graded by `countdown_reward_fn`. `extra` keeps the reference `solution` and reasoning.
    """

    name = "countdown"
    splits = ("train", "test")
    templates = ("countdown", "r1_zero")

    def reward_fn(self, template: str = "countdown") -> RewardFn:
        self.check_template(template)
        from envs.rewards import countdown_reward_fn

        return countdown_reward_fn

    def format_prompt(self, example: Example, template: str = "countdown") -> str:
        return super().format_prompt(example, template)

    def _iter(self, split: str, path: Path) -> Iterator[Example]:
        for lineno, rec in read_jsonl(path):
            nums = require(rec, "nums", list, path, lineno, nonempty=True)
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in nums):
                raise DataError(path, lineno, "field 'nums' must be a list of integers >= 0")
            target = require(rec, "target", int, path, lineno)
            solution = rec.get("solution")
            if solution is not None and not isinstance(solution, str):
                raise DataError(path, lineno, "field 'solution' must be str or absent")
            reasoning = rec.get("answer")
            if isinstance(reasoning, str) and "</think>" in reasoning:
                reasoning = reasoning.split("</think>", 1)[0].strip()
            else:
                reasoning = None
            index = rec.get("index", lineno)
            yield Example(
                id=f"countdown/{split}/{index}",
                question=countdown_question(nums, target),
                ground_truth=countdown_ground_truth(nums, target),
                extra={
                    "nums": nums,
                    "target": target,
                    "solution": solution,
                    "reasoning": reasoning,
                },
            )

    def traces(self, split: str = "train", path: str | Path | None = None, limit=None, **_):
        """Reference solutions (reasoning = the worked steps, answer = the equation)."""
        for ex in self.load(split, path=path, limit=limit):
            if ex.extra["solution"] and ex.extra["reasoning"]:
                yield Trace(
                    ex.question, ex.extra["reasoning"], ex.extra["solution"], ex.ground_truth
                )


MATH = MathTask()
GSM8K = GSM8KTask()
COUNTDOWN = CountdownTask()
