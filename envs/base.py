"""The task abstraction shared by every task in `envs`.

A task bundles three things:

* a loader, `Task.load(split, path=None, limit=None) -> list[Example]`, which reads (or, for
  synthetic tasks, generates) validated examples;
* prompt templates, `Task.format_prompt(example, template)`, where a template is a named data
  file in `envs/prompts/` (`r1_zero`, `question_only`, `countdown`);
* reward functions, `Task.reward_fn(template) -> fn(response, ground_truth) -> dict`, returning
  `{"reward", "format_reward", "answer_reward"}` as floats (docs/contract.md).

A task that can supply reasoning traces for SFT implements `Task.traces(split, ...)`, yielding
`Trace(question, reasoning, answer, ground_truth)`; `envs.sft_data` turns them into r1_zero
examples.

Record validation helpers (`read_jsonl`, `require`) live here too, so that every loader reports
a bad record the same way: a `DataError` naming the file, the line number and the field.

Example of a minimal task::

    class Echo(Task):
        name = "echo"
        splits = ("test",)

        def load(self, split, path=None, limit=None):
            self.check_split(split)
            return [Example(id="0", question="1+1", ground_truth="2")][:limit]

    Echo().format_prompt(Echo().load("test")[0], "question_only")  # -> "1+1"
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

DATA_DIR = Path(__file__).parent / "data"
PROMPT_DIR = Path(__file__).parent / "prompts"

RewardFn = Callable[[str, str], dict]


@dataclass(frozen=True)
class Example:
    """One task instance.

    `id` is stable across runs (e.g. MATH `unique_id`, or `"{split}/{line}"`); `question` is the
    text that fills a template's `{question}`; `ground_truth` is what the reward function
    compares against; `extra` holds anything else (solution text, subject, level, ...).
    """

    id: str
    question: str
    ground_truth: str
    extra: dict[str, Any] = field(default_factory=dict)


class Trace(NamedTuple):
    """A worked solution for SFT: `reasoning` goes inside `<think>`, `answer` inside `<answer>`.

    The reasoning or answer may be wrong on purpose (synthetic traces); `ground_truth` is
    what a grader checks the answer against, so that wrong traces can be filtered out.
    """

    question: str
    reasoning: str
    answer: str
    ground_truth: str


class DataError(ValueError):
    """A malformed data file: the message names the file, the line and the field."""

    def __init__(self, path: str | Path, line: int | None, message: str):
        self.path = str(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


def open_text(path: str | Path):
    """Open a UTF-8 text file, transparently gunzipping `*.gz`."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield `(line_number, record)` for each non-blank line of a JSONL(.gz) file.

    Raises `DataError` for a missing file, an empty file, a line that is not UTF-8 text or not
    JSON, or a record that is not a JSON object. Line numbers start at 1.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "file not found")
    count = 0
    # Bytes, decoded line by line: a bad byte is then named by its line (a text stream decodes
    # in blocks and reports an offset into one of them, with no file or line).
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    path,
                    lineno,
                    f"not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                    "save the file as UTF-8",
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(path, lineno, f"invalid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise DataError(path, lineno, "record is not a JSON object")
            count += 1
            yield lineno, record
    if count == 0:
        raise DataError(path, None, "empty file (no records)")


def require(
    record: dict,
    key: str,
    types: type | tuple[type, ...],
    path: str | Path,
    lineno: int,
    *,
    nonempty: bool = False,
) -> Any:
    """Return `record[key]`, or raise `DataError` naming file, line and field.

    `types` is checked with `isinstance` (bools are rejected where ints are expected);
    `nonempty` additionally rejects empty or all-whitespace strings and empty lists.
    """
    if key not in record:
        raise DataError(path, lineno, f"missing field {key!r}")
    value = record[key]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in _as_tuple(types))
    if not ok:
        names = "/".join(t.__name__ for t in _as_tuple(types))
        raise DataError(path, lineno, f"field {key!r} must be {names}, got {type(value).__name__}")
    if nonempty and (
        (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value)
    ):
        raise DataError(path, lineno, f"field {key!r} is empty")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


@cache
def load_prompt(name: str) -> str:
    """The text of `envs/prompts/{name}.prompt`, byte for byte (no stripping)."""
    path = PROMPT_DIR / f"{name}.prompt"
    if not path.is_file():
        known = sorted(p.stem for p in PROMPT_DIR.glob("*.prompt"))
        raise ValueError(f"unknown prompt template {name!r}; known: {known}")
    return path.read_bytes().decode("utf-8")


def render(template_text: str, fields: dict[str, Any]) -> str:
    """Replace `{name}` placeholders by `str(fields[name])`.

    Plain substitution, not `str.format`: questions are full of LaTeX braces, and only the
    named placeholders are touched.
    """
    out = template_text
    for key, value in fields.items():
        out = out.replace("{" + key + "}", str(value))
    return out


class Task:
    """Base class of a task. Subclasses set the class attributes and implement `load`.

    Class attributes:
        name: the registry name (`envs.get_task(name)`).
        splits: the split names `load` accepts.
        templates: the prompt templates this task supports; the first is the default.
    """

    name: str = ""
    splits: tuple[str, ...] = ()
    templates: tuple[str, ...] = ("r1_zero", "question_only")

    def load(self, split: str, path: str | Path | None = None, limit: int | None = None):
        """Return `list[Example]` for `split` (from `path` when given), at most `limit` of them."""
        raise NotImplementedError

    def available(self, split: str, path: str | Path | None = None) -> int:
        """How many examples `load(split, path)` can give at most: a setting that asks for
        more is refused by name before a run starts. Loads the split (a missing or malformed
        file raises `DataError`); a task that generates its data overrides this."""
        return len(self.load(split, path=path))

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(f"task {self.name!r} has no split {split!r}; known: {self.splits}")

    def check_split_pair(self, train_split: str, eval_split: str) -> None:
        """Raise `ValueError` if training on `train_split` contaminates `eval_split`.

        Both names must be valid splits. The default has no overlapping pairs.
        """
        self.check_split(train_split)
        self.check_split(eval_split)

    def check_template(self, template: str) -> None:
        if template not in self.templates:
            raise ValueError(
                f"task {self.name!r} does not support template {template!r}; "
                f"known: {self.templates}"
            )

    def prompt_fields(self, example: Example) -> dict[str, Any]:
        """The placeholder values a template may use; `question` at least."""
        return {"question": example.question}

    def format_prompt(self, example: Example, template: str = "r1_zero") -> str:
        """Fill the named template with this example's fields."""
        self.check_template(template)
        return render(load_prompt(template), self.prompt_fields(example))

    def reward_fn(self, template: str = "r1_zero") -> RewardFn:
        """The reward function matching a template's answer format."""
        self.check_template(template)
        from envs import rewards

        if template in ("question_only", "qwen_math"):  # the last \boxed{} is the answer
            return rewards.question_only_reward_fn
        return rewards.r1_zero_reward_fn

    def traces(self, split: str = "train", **kwargs) -> Iterator[Trace]:
        """Worked solutions for SFT. Tasks without traces raise `NotImplementedError`.

        Data-backed tasks accept `path=` (and `limit=`); `envs.sft_data.build_examples` passes
        `path` only when given and takes the first N traces itself.
        """
        raise NotImplementedError(f"task {self.name!r} has no SFT traces")

    def __repr__(self) -> str:
        return f"<Task {self.name!r} splits={self.splits}>"
