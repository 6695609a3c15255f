"""The supplement's evaluations: MMLU and GSM8K as graded tasks, and the data and output formats
of AlpacaEval and SimpleSafetyTests (data vendored in `envs/data/supplement/`, provenance in
`envs/data/README.md`).

* `mmlu` (splits `dev`, `val`, `test`): the handout's question format (`mmlu_question`); the
  prediction is `parse_mmlu`'s letter, right when it equals the gold letter. A response with no
  letter scores format 0. `mmlu_report` gives accuracy, the unparsed count with examples and
  the accuracy of each subject.
* `gsm8k_supplement` (splits `train`, `test`, the vendored GSM8K files): the handout's
  `{question}\\nAnswer:` format; the prediction is the last number of the response
  (`parse_gsm8k`), compared with the gold answer as an exact number. No number: format 0.

Both take the templates `zero_shot_system_prompt` (the default: the evaluations' system prompt
with the question as its `{instruction}`; the handout decodes greedily and stops at `# Query:`)
and `alpaca_sft` (the instruction-tuning template with an empty response, for a model tuned
on it).

AlpacaEval and SimpleSafetyTests are not graded here: `load_alpaca_eval` and
`load_simple_safety_tests` read their prompts, and `write_alpaca_eval` /
`write_simple_safety_tests` write a model's generations in the formats their judges read (a
JSON array for the `alpaca_eval` command; a JSONL of `prompts_final` and `output` for
`rrl safety-judge`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from envs.alpaca import alpaca_prompt
from envs.base import (
    DATA_DIR,
    DataError,
    Example,
    RewardFn,
    Task,
    load_prompt,
    read_jsonl,
    render,
    require,
)
from envs.supplement_parsing import LETTERS, gsm8k_question, mmlu_question, parse_gsm8k, parse_mmlu
from envs.tasks import _take, data_file, gsm8k_final_answer

SUPPLEMENT_DIR = DATA_DIR / "supplement"
SUPPLEMENT_TEMPLATES = ("zero_shot_system_prompt", "alpaca_sft")


def _result(parsed: bool, right: bool) -> dict[str, float]:
    answer = 1.0 if (parsed and right) else 0.0
    return {"reward": answer, "format_reward": 1.0 if parsed else 0.0, "answer_reward": answer}


def mmlu_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """1 when `parse_mmlu(response)` is the gold letter; format 0 when it finds no letter."""
    letter = parse_mmlu(response)
    return _result(letter is not None, letter == ground_truth)


def gsm8k_number_reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    """1 when the last number of the response equals the gold number exactly; format 0 when the
    response holds no number."""
    predicted = parse_gsm8k(response)
    if predicted is None:
        return _result(False, False)
    try:
        right = Fraction(predicted) == Fraction(ground_truth)
    except (ValueError, ZeroDivisionError):
        right = False
    return _result(True, right)


# grade_batch decides these in-process: neither needs math-verify
mmlu_reward_fn.fast = mmlu_reward_fn
gsm8k_number_reward_fn.fast = gsm8k_number_reward_fn


def instruction_prompt(instruction: str, template: str = "zero_shot_system_prompt") -> str:
    """`instruction` in one of the two supplement templates; `alpaca_sft` is the Alpaca
    document's head (`envs.alpaca.alpaca_prompt`: the response follows `### Response:` and its
    newline directly, as in training)."""
    if template not in SUPPLEMENT_TEMPLATES:
        raise ValueError(f"unknown supplement template {template!r}; known: {SUPPLEMENT_TEMPLATES}")
    if template == "alpaca_sft":
        return alpaca_prompt(instruction)
    return render(load_prompt(template), {"instruction": instruction})


class _SupplementTask(Task):
    """A task whose question is an instruction for the two supplement templates."""

    templates = SUPPLEMENT_TEMPLATES

    def format_prompt(self, example: Example, template: str = "zero_shot_system_prompt") -> str:
        """`instruction_prompt` of the question."""
        self.check_template(template)
        return instruction_prompt(example.question, template)


class MMLUTask(_SupplementTask):
    """MMLU (Hendrycks et al. 2021), 57 subjects. `question` is the handout's full question
    text; `ground_truth` the gold letter; `extra` keeps `subject`, the raw `question` and the
    four `options`."""

    name = "mmlu"
    splits = ("dev", "val", "test")

    def load(self, split: str, path: str | Path | None = None, limit: int | None = None):
        self.check_split(split)
        path = Path(path) if path is not None else data_file("supplement/mmlu", split)
        return _take(self._iter(split, path), limit)

    def reward_fn(self, template: str = "zero_shot_system_prompt") -> RewardFn:
        self.check_template(template)
        return mmlu_reward_fn

    def report(self, examples: Sequence[Example], responses: Sequence[str]) -> dict[str, Any]:
        """`mmlu_report` (`rrl eval` writes it to summary.json as `task_report`)."""
        return mmlu_report(examples, responses)

    def _iter(self, split: str, path: Path) -> Iterator[Example]:
        for lineno, rec in read_jsonl(path):
            subject = require(rec, "subject", str, path, lineno, nonempty=True)
            question = require(rec, "question", str, path, lineno, nonempty=True)
            options = require(rec, "options", list, path, lineno)
            if len(options) != 4 or not all(isinstance(o, str) for o in options):
                raise DataError(path, lineno, "field 'options' must be a list of 4 strings")
            answer = require(rec, "answer", str, path, lineno)
            if answer not in LETTERS:
                raise DataError(path, lineno, f"field 'answer' must be one of A-D, got {answer!r}")
            yield Example(
                id=f"mmlu/{split}/{lineno}",
                question=mmlu_question(subject, question, options),
                ground_truth=answer,
                extra={"subject": subject, "question": question, "options": options},
            )


class GSM8KSupplementTask(_SupplementTask):
    """GSM8K with the supplement's prompt (`{question}\\nAnswer:`) and last-number grading; the
    data is the vendored GSM8K of `envs/data/gsm8k/`. `extra["question"]` is the raw question."""

    name = "gsm8k_supplement"
    splits = ("train", "test")

    def load(self, split: str, path: str | Path | None = None, limit: int | None = None):
        self.check_split(split)
        path = Path(path) if path is not None else data_file("gsm8k", split)
        return _take(self._iter(split, path), limit)

    def reward_fn(self, template: str = "zero_shot_system_prompt") -> RewardFn:
        self.check_template(template)
        return gsm8k_number_reward_fn

    def _iter(self, split: str, path: Path) -> Iterator[Example]:
        for lineno, rec in read_jsonl(path):
            question = require(rec, "question", str, path, lineno, nonempty=True)
            answer = require(rec, "answer", str, path, lineno, nonempty=True)
            final = gsm8k_final_answer(answer)
            try:
                Fraction(final or "")
            except (ValueError, ZeroDivisionError):
                raise DataError(
                    path, lineno, "field 'answer' must end with a line '#### N' (N a number)"
                ) from None
            yield Example(
                id=f"gsm8k/{split}/{lineno}",
                question=gsm8k_question(question),
                ground_truth=final,
                extra={"question": question},
            )


def mmlu_report(
    examples: Sequence[Example], responses: Sequence[str], *, max_examples: int = 5
) -> dict[str, Any]:
    """MMLU scores of `responses` (one per example, in order): `accuracy`, `n`, `unparsed`
    (how many gave no letter), `unparsed_examples` (the first `max_examples` of them, with id
    and response) and `per_subject` (subject -> {"n", "accuracy"}). Unparsed counts as wrong."""
    if len(examples) != len(responses):
        raise ValueError(f"{len(examples)} examples but {len(responses)} responses")
    right = 0
    unparsed: list[dict[str, str]] = []
    n_unparsed = 0
    subjects: dict[str, list[int]] = {}
    for ex, response in zip(examples, responses, strict=True):
        letter = parse_mmlu(response)
        ok = letter is not None and letter == ex.ground_truth
        right += ok
        tally = subjects.setdefault(ex.extra["subject"], [0, 0])
        tally[0] += 1
        tally[1] += ok
        if letter is None:
            n_unparsed += 1
            if len(unparsed) < max_examples:
                unparsed.append({"id": ex.id, "response": response})
    n = len(examples)
    return {
        "n": n,
        "accuracy": right / n if n else 0.0,
        "unparsed": n_unparsed,
        "unparsed_examples": unparsed,
        "per_subject": {
            s: {"n": t[0], "accuracy": t[1] / t[0]} for s, t in sorted(subjects.items())
        },
    }


# ----------------------------------------------------------------------------- AlpacaEval


def load_alpaca_eval(path: str | Path | None = None, limit: int | None = None) -> list[dict]:
    """AlpacaEval's records (`instruction`, `dataset`, and the reference `output` and
    `generator`), in file order; `limit` keeps the first N."""
    path = Path(path) if path is not None else SUPPLEMENT_DIR / "alpaca_eval.jsonl.gz"
    rows = []
    for lineno, rec in read_jsonl(path):
        if limit is not None and len(rows) >= limit:
            break
        require(rec, "instruction", str, path, lineno, nonempty=True)
        require(rec, "dataset", str, path, lineno)
        rows.append(rec)
    return rows


def alpaca_eval_records(
    instructions: Sequence[dict], outputs: Sequence[str], generator: str
) -> list[dict[str, str]]:
    """The `alpaca_eval` command's input: one `{instruction, output, generator, dataset}` per
    instruction record (as `load_alpaca_eval` returns them), `output` the model's response."""
    if len(instructions) != len(outputs):
        raise ValueError(f"{len(instructions)} instructions but {len(outputs)} outputs")
    if not generator:
        raise ValueError("generator (the model's name) must not be empty")
    return [
        {
            "instruction": rec["instruction"],
            "output": output,
            "generator": generator,
            "dataset": rec["dataset"],
        }
        for rec, output in zip(instructions, outputs, strict=True)
    ]


def write_alpaca_eval(
    path: str | Path, instructions: Sequence[dict], outputs: Sequence[str], generator: str
) -> Path:
    """Write `alpaca_eval_records(...)` to `path` as one JSON array; returns the path."""
    path = Path(path)
    records = alpaca_eval_records(instructions, outputs, generator)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- SimpleSafetyTests


def load_simple_safety_tests(
    path: str | Path | None = None, limit: int | None = None
) -> list[dict]:
    """SimpleSafetyTests' records (`id`, `harm_area`, `counter`, `category`, `prompts_final`)."""
    path = Path(path) if path is not None else SUPPLEMENT_DIR / "simple_safety_tests.jsonl"
    rows = []
    for lineno, rec in read_jsonl(path):
        if limit is not None and len(rows) >= limit:
            break
        require(rec, "prompts_final", str, path, lineno, nonempty=True)
        rows.append(rec)
    return rows


def write_simple_safety_tests(
    path: str | Path, prompts: Sequence[str], outputs: Sequence[str]
) -> Path:
    """Write one `{"prompts_final", "output"}` object a line (the judge's input); returns the
    path."""
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for prompt, output in zip(prompts, outputs, strict=True):
            f.write(json.dumps({"prompts_final": prompt, "output": output}, ensure_ascii=False))
            f.write("\n")
    return path


def read_safety_outputs(path: str | Path) -> list[dict[str, str]]:
    """The `{prompts_final, output}` records of a file `write_simple_safety_tests` wrote;
    a `DataError` names the line of a record without them."""
    path = Path(path)
    return [
        {
            "prompts_final": require(rec, "prompts_final", str, path, lineno, nonempty=True),
            "output": require(rec, "output", str, path, lineno),
        }
        for lineno, rec in read_jsonl(path)
    ]


MMLU = MMLUTask()
GSM8K_SUPPLEMENT = GSM8KSupplementTask()
