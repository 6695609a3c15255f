"""SFT data in the r1_zero format, from any task's reasoning traces.

An example is a dict::

    {"prompt": <r1_zero prompt ending in "Assistant: <think>">,
     "response": " <reasoning> </think> <answer> <answer> </answer>",
     "ground_truth": <what the task's reward function checks>}

Traces come from `Task.traces(split, ...)` (`envs.base.Trace`: question, reasoning, answer,
ground_truth): MATH and GSM8K use their human-written solutions, Countdown its reference
solutions, the arithmetic task its synthetic traces (some deliberately wrong). Any other
iterable of `Trace` works with `examples_from_traces`.

`filter_correct` keeps the examples whose response grades correct (`envs.grade_batch`).
`read_examples` loads such a file back (the handout's `sft.jsonl` layout), validating every
record: a bad one raises `envs.DataError` naming the file, the line and the field.
`check_examples_file` runs the same checks without keeping the records; the workflow calls it
on the user's `sft_data` file while it plans the study, so a bad file stops the study before
any job runs.

Command line (also `rrl sft-data`; the workflow's `sft_data` rule runs it with `--no-filter`,
leaving the filtering to the filtered SFT run, which records how many examples it kept)::

    python -m envs.sft_data --task math --out math_sft.jsonl [--split train] [--limit N]
        [--template r1_zero] [--no-filter]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from envs.base import RewardFn, Task, Trace, load_prompt, read_jsonl, render, require


def r1_zero_response(reasoning: str, answer: str) -> str:
    """The response that continues a prompt ending in `Assistant: <think>`."""
    return f" {reasoning.strip()} </think> <answer> {answer.strip()} </answer>"


def examples_from_traces(traces: Iterable[Trace], template: str = "r1_zero") -> list[dict]:
    """Turn traces into `{"prompt", "response", "ground_truth"}` dicts (template: r1 style)."""
    text = load_prompt(template)
    if not text.endswith("<think>"):
        raise ValueError(f"template {template!r} does not end in '<think>'; not an r1 template")
    return [
        {
            "prompt": render(text, {"question": t.question}),
            "response": r1_zero_response(t.reasoning, t.answer),
            "ground_truth": t.ground_truth,
        }
        for t in traces
    ]


def build_examples(
    task: str | Task,
    split: str = "train",
    *,
    limit: int | None = None,
    path: str | Path | None = None,
    template: str = "r1_zero",
    **trace_kwargs,
) -> list[dict]:
    """SFT examples from the first `limit` traces of a task (before filtering).

    `path` (when given) and `trace_kwargs` are passed to `task.traces`.
    """
    if isinstance(task, str):
        from envs import get_task

        task = get_task(task)
    if path is not None:
        trace_kwargs["path"] = path
    traces = task.traces(split, **trace_kwargs)
    return examples_from_traces(itertools.islice(traces, limit), template)


def filter_correct(
    examples: list[dict],
    reward_fn: RewardFn | None = None,
    *,
    timeout: float | None = None,
    num_workers: int | None = None,
) -> tuple[list[dict], dict]:
    """Keep the examples whose `response` earns reward 1 against its `ground_truth`.

    Returns `(kept, stats)`; stats has `total`, `kept` and the grader's counters.
    """
    from envs.grader import DEFAULT_TIMEOUT, grade_batch
    from envs.rewards import r1_zero_reward_fn

    fn = reward_fn or r1_zero_reward_fn
    scores = grade_batch(
        fn,
        [e["response"] for e in examples],
        [e["ground_truth"] for e in examples],
        timeout=timeout or DEFAULT_TIMEOUT,
        num_workers=num_workers,
    )
    kept = [e for e, s in zip(examples, scores, strict=True) if s["reward"] == 1.0]
    stats = {"total": len(examples), "kept": len(kept), **scores.stats.as_dict()}
    return kept, stats


def read_examples(path: str | Path) -> list[dict]:
    """The `{"prompt", "response", "ground_truth"}` records of a JSONL(.gz) file, in order.

    Raises `envs.DataError` ("FILE:LINE: ...") for a missing or empty file, a line that is not
    a JSON object, or a record whose `prompt`/`response` is not a non-empty string or whose
    `ground_truth` is not a string. Other fields are kept as they are.
    """
    return list(iter_examples(path))


def iter_examples(path: str | Path) -> Iterator[dict]:
    """The records of :func:`read_examples`, one at a time (same checks, same errors)."""
    for lineno, record in read_jsonl(path):
        require(record, "prompt", str, path, lineno, nonempty=True)
        require(record, "response", str, path, lineno, nonempty=True)
        require(record, "ground_truth", str, path, lineno)
        yield record


def check_examples_file(path: str | Path) -> int:
    """Validate a `{prompt, response, ground_truth}` JSONL(.gz) file; return its record count.

    Raises `envs.DataError` ("FILE:LINE: ...") exactly as :func:`read_examples` does.
    """
    return sum(1 for _ in iter_examples(path))


def write_jsonl(examples: Iterable[dict], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for e in examples:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None, prog: str = "python -m envs.sft_data") -> int:
    from envs import get_task, task_names

    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True, choices=task_names())
    ap.add_argument("--split", default="train")
    ap.add_argument("--out", required=True, help="output JSONL file")
    ap.add_argument("--limit", type=int, default=None, help="first N traces only")
    ap.add_argument("--path", default=None, help="read the task's data from this file")
    ap.add_argument("--template", default="r1_zero", help="an r1-style prompt template")
    ap.add_argument("--no-filter", action="store_true", help="keep traces that grade wrong")
    args = ap.parse_args(argv)

    task = get_task(args.task)
    try:
        examples = build_examples(
            task, args.split, limit=args.limit, path=args.path, template=args.template
        )
    # DataError (names file, line and field), an unknown split or template, a missing file
    except (ValueError, FileNotFoundError) as exc:
        print(f"{ap.prog}: {exc}", file=sys.stderr)
        return 2
    if args.no_filter:
        stats = {"total": len(examples), "kept": len(examples)}
    else:
        examples, stats = filter_correct(examples, task.reward_fn(args.template))
    write_jsonl(examples, args.out)
    print(json.dumps(stats), file=sys.stderr)
    return 0


def main_sft_data(argv: list[str] | None = None) -> int:
    """Entry point of `rrl sft-data` (the same command line)."""
    return main(argv, prog="rrl sft-data")


if __name__ == "__main__":
    raise SystemExit(main())
