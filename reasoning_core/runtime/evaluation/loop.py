"""Evaluating a policy: sample with any rollout engine, grade in batch, measure the entropy.

:func:`evaluate_policy` is what the trainers' periodic evaluation and ``rrl eval``
(:mod:`~reasoning_core.runtime.evaluation.evaluate`, which re-exports it) both run: format a task's
prompts, sample, grade with ``envs.grade_batch``, summarize (:mod:`.eval_report`) and, given
the policy's Hugging Face module, the mean token entropy of the responses under it: from the
entropies the engine returned with the tokens (hf, static) or, when it returned none (vLLM),
from a second, no-gradient forward.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time
from collections.abc import Generator
from functools import partial
from typing import Any, NamedTuple

from tqdm import tqdm

import envs
from reasoning_core.runtime.engines.rollout import RolloutEngine, SamplingParams
from reasoning_core.runtime.evaluation.generations import mean_response_entropy, sampled_entropy
from reasoning_core.runtime.evaluation.summary import category, summarize, warn_grading
from reasoning_core.runtime.training.batching import MicroBatchSize


def chat_prompt(tokenizer: Any, text: str) -> str:
    """``text`` as the user's turn of ``tokenizer``'s chat template, the assistant's turn
    opened (``add_generation_prompt``), as a string: the engines tokenize it without adding
    special tokens, so a template that opens with a BOS token writes it itself. Raises
    ``ValueError`` when the tokenizer has no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )


def chunk_seed(seed: int | None, index: int) -> int | None:
    """Sampling seed of the ``index``-th engine call of one evaluation.

    The first call samples with ``seed`` itself (an evaluation in one call is what the engine
    gives for that seed); call ``k >= 1`` with a 31-bit seed hashed from ``(seed, k)``, so no
    two calls of one evaluation, nor of evaluations with nearby seeds, start from the same
    random stream. None (unseeded) stays None."""
    if seed is None or index == 0:
        return seed
    digest = hashlib.sha256(f"eval-chunk:{int(seed)}:{int(index)}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class EvalResult(NamedTuple):
    """``(summary, records)``; unpacks as a pair.

    ``summary`` keys: ``accuracy`` (= mean answer reward), ``answer_reward``,
    ``format_reward``, ``reward``, ``num_examples``, ``num_responses``, ``entropy`` (mean token
    entropy of the responses under the policy, token-weighted: every response token of every
    response counts once; None when no model was given), ``response_length``
    (mean tokens), ``response_length_correct`` / ``response_length_incorrect`` (mean tokens of
    the responses with answer reward 1 / the others; None when none), ``truncated`` (= ``finish_length_fraction``: the share the engine stopped at ``max_tokens``
    without the stop string or EOS), one count per category (``correct``, ``wrong_answer``,
    ``bad_format``), ``grade/timeouts`` and ``grade/errors`` (responses that scored 0 because
    grading timed out or raised; a warning goes to stderr when either is non-zero);
    wall-clock under ``time/generate``, ``time/grade`` and ``time/entropy`` (near 0 when the
    engine returned the entropies).
    """

    summary: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def metrics(self) -> dict[str, Any]:
        return self.summary


def evaluate_policy(*args: Any, **kwargs: Any) -> EvalResult:
    """Sample, grade and summarize in one call: :func:`evaluation_steps` run to its end (the
    same arguments)."""
    return finish_steps(evaluation_steps(*args, **kwargs))


def finish_steps(steps: Generator[None, None, Any]) -> Any:
    """Run a generator of steps (such as :func:`evaluation_steps`) to its end; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def evaluation_steps(
    engine: RolloutEngine,
    examples: list[Any],
    task: Any,
    template: str,
    params: SamplingParams,
    *,
    batch_size: int | None = None,
    reward_fn: Any = None,
    grade_timeout: float | None = None,
    num_workers: int | None = None,
    progress: bool = False,
    model: Any = None,
    tokenizer: Any = None,
    entropy_micro_batch_size: MicroBatchSize | None = None,
    chat_tokenizer: Any = None,
) -> Generator[None, None, EvalResult]:
    r"""Sample ``params.n`` responses per example and grade them, as a generator that
    pauses after each engine call (one batch of prompts) and returns the :class:`EvalResult`:
    a caller can do other work with the engine between two batches (a rollout worker
    samples training batches between them), so long as the engine holds the evaluated
    weights again before the next step.

    Args:
        engine: any rollout engine (its current weights are evaluated; sync before calling).
        examples: ``envs.Example`` objects (``id``, ``question``, ``ground_truth``).
        task: the ``envs.Task`` that formats prompts (and supplies the reward function).
        template: prompt template name (``r1_zero``, ``question_only``, ``countdown``).
        params: sampling settings (the handout's eval: temperature 1, top_p 1, 1024 tokens,
            stop at ``</answer>`` kept).
        batch_size: prompts per ``engine.generate`` call (all at once when None); each call
            samples with its own seed, :func:`chunk_seed` of ``params.seed`` and its index.
        reward_fn: overrides ``task.reward_fn(template)``.
        grade_timeout, num_workers: passed to ``envs.grade_batch`` (its defaults when None).
        progress: show a progress bar over examples (stderr).
        model, tokenizer: the Hugging Face policy being evaluated (the engine's weights) and
            its tokenizer; when given, ``entropy`` is the token-weighted mean entropy of the
            responses, :math:`\sum_i S_i / \sum_i n_i` (None when no response has a token).
            When every completion carries ``entropies`` (hf, static engines) the sums are
            :func:`~reasoning_core.runtime.evaluation.generations.completion_entropy_sums` (no forward;
            the same response tokens, EOS excluded; it differs from the forward's value only
            where the sampled ids are not the text's re-tokenization, and by float rounding);
            otherwise :func:`~reasoning_core.runtime.evaluation.generations.mean_response_entropy` (one
            no-gradient forward, ``entropy_micro_batch_size`` responses at a time, None: 8
            without back-off; it draws no
            random numbers). Without them ``entropy`` is None.
        chat_tokenizer: when given, each formatted prompt is put in this tokenizer's chat
            template as the user's turn (:func:`chat_prompt`), the format an instruct model was
            tuned on; the records keep the prompt as sent.
    """
    t0 = time.perf_counter()
    paused = 0.0
    prompts = [task.format_prompt(ex, template) for ex in examples]
    if chat_tokenizer is not None:
        prompts = [chat_prompt(chat_tokenizer, p) for p in prompts]
    step = batch_size or max(1, len(prompts))
    completions = []
    bar = None
    if progress:
        bar = tqdm(total=len(prompts), desc="generate", unit="ex", file=sys.stderr)
    for index, start in enumerate(range(0, len(prompts), step)):
        chunk = prompts[start : start + step]
        chunk_params = dataclasses.replace(params, seed=chunk_seed(params.seed, index))
        completions.extend(engine.generate(chunk, chunk_params))
        if bar is not None:
            bar.update(len(chunk))
        if start + step < len(prompts):
            paused_at = time.perf_counter()
            yield  # between two engine calls; time/generate leaves the pause out
            paused += time.perf_counter() - paused_at
    if bar is not None:
        bar.close()

    records: list[dict[str, Any]] = []
    for ex, prompt, outs in zip(examples, prompts, completions, strict=True):
        for j, c in enumerate(outs):
            record = {"id": ex.id}
            if params.n > 1:
                record["sample"] = j
            record.update(
                prompt=prompt,
                response=c.text,
                ground_truth=ex.ground_truth,
                response_length=len(c.token_ids),
                finish_reason=c.finish_reason,
            )
            records.append(record)

    t1 = time.perf_counter()
    fn = reward_fn if reward_fn is not None else task.reward_fn(template)
    grade_kwargs: dict[str, Any] = {}
    if grade_timeout is not None:
        grade_kwargs["timeout"] = grade_timeout
    if num_workers is not None:
        grade_kwargs["num_workers"] = num_workers
    scores = envs.grade_batch(
        fn, [r["response"] for r in records], [r["ground_truth"] for r in records], **grade_kwargs
    )
    for record, score in zip(records, scores, strict=True):
        record["reward"] = float(score["reward"])
        record["format_reward"] = float(score["format_reward"])
        record["answer_reward"] = float(score["answer_reward"])
        record["category"] = category(record)
    summary = summarize(records, num_examples=len(examples))
    summary.update(scores.metrics())  # keep `scores` a GradeResults: list() drops the counts
    warn_grading(summary)
    t2 = time.perf_counter()
    summary["entropy"] = None
    if model is not None:
        summary["entropy"] = sampled_entropy(
            tokenizer,
            [c for outs in completions for c in outs],
            partial(records_entropy, model, tokenizer, records, entropy_micro_batch_size),
        )
    summary["time/generate"] = t1 - t0 - paused
    summary["time/grade"] = t2 - t1
    summary["time/entropy"] = time.perf_counter() - t2
    return EvalResult(summary, records)


def records_entropy(
    model: Any, tokenizer: Any, records: list[dict], micro_batch_size: MicroBatchSize | None = None
) -> float | None:
    """Token-weighted mean entropy of the records' responses under ``model``
    (:func:`~reasoning_core.runtime.evaluation.generations.mean_response_entropy`)."""
    prompts, responses = [r["prompt"] for r in records], [r["response"] for r in records]
    return mean_response_entropy(
        model, tokenizer, prompts, responses, micro_batch_size=micro_batch_size
    )
