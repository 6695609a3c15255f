"""``log_generations``: the handout's in-the-loop logging of generations.

Per example: prompt, response, ground truth, the three rewards and the mean token entropy of
the policy over the response; overall, the mean response length of all, correct and incorrect
responses. Writing the records is the caller's job (the trainers' evaluations write theirs
with :func:`reasoning_core.runtime.run.metrics.write_generations`).

:func:`response_entropy_sums` is the no-gradient forward both use: per response, the sum of
the policy's token entropy over its tokens and their count. :func:`mean_response_entropy`
turns it into the token-weighted mean that every ``eval`` metrics line carries as ``entropy``.
:func:`completion_entropy_sums` gives the same sums without a forward, from the entropies the
hf and static engines return with each sampled token (:class:`~.rollout.Completion`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import envs
from reasoning_core import get_response_log_probs, masked_normalize, tokenize_prompt_and_output
from reasoning_core.runtime.engines.rollout import Completion
from reasoning_core.runtime.evaluation.summary import is_one
from reasoning_core.runtime.training.batching import MicroBatchSize


@torch.no_grad()
def response_entropy_sums(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    responses: list[str],
    *,
    micro_batch_size: MicroBatchSize | None = None,
) -> tuple[list[float], list[int]]:
    r"""Per response ``i``: ``(S_i, n_i)``, the sum of the policy's token entropy over its
    ``n_i`` response tokens and that count.

    .. math:: S_i = \sum_{t \in \mathrm{resp}(i)} H_t, \qquad
              H_t = -\sum_v p_\theta(v \mid x_{<t}) \log p_\theta(v \mid x_{<t})

    The pure core does the work: :func:`~reasoning_core.tokenize_prompt_and_output` (prompt and
    response tokenized apart, so a response's tokens are the ones its text re-tokenizes to),
    :func:`~reasoning_core.get_response_log_probs` with ``return_token_entropy`` on ``model``
    itself (eager, never the compiled training forward: eval shapes vary), and
    :func:`~reasoning_core.masked_normalize` with constant 1 (the masked sum) per row. Rows go
    in order, ``micro_batch_size`` at a time (None: 8, no back-off), each micro batch padded to
    its own longest row; the :class:`MicroBatchSize` redoes the pass smaller on CUDA
    out-of-memory. Runs in eval mode
    (restored after) under ``torch.no_grad``; the forward draws no random numbers, so no
    random stream of the run moves."""
    if len(prompts) != len(responses):
        raise ValueError("prompts and responses must have the same length")

    was_training = model.training
    model.eval()
    try:
        micro = micro_batch_size or MicroBatchSize(8, backoff=False)
        return micro.call(score_entropy_sums, model, tokenizer, prompts, responses)
    finally:
        model.train(was_training)


def score_entropy_sums(
    size: int, model: Any, tokenizer: Any, prompts: list[str], responses: list[str]
) -> tuple[list[float], list[int]]:
    """:func:`response_entropy_sums` in micro batches of ``size``."""
    device = next(model.parameters()).device
    sums: list[float] = []
    counts: list[int] = []
    for start in range(0, len(prompts), size):
        batch = tokenize_prompt_and_output(
            prompt_strs=list(prompts[start : start + size]),
            output_strs=list(responses[start : start + size]),
            tokenizer=tokenizer,
        )
        out = get_response_log_probs(
            model=model,
            input_ids=batch["input_ids"].to(device),
            labels=batch["labels"].to(device),
            return_token_entropy=True,
        )
        mask = batch["response_mask"].to(device)
        row_sums = masked_normalize(out["token_entropy"].float(), mask, 1.0, dim=-1)
        sums.extend(row_sums.tolist())
        counts.extend(int(c) for c in mask.sum(-1).tolist())
    return sums, counts


def response_token_count(tokenizer: Any, completion: Completion) -> int:
    """How many of ``completion.token_ids`` make up its ``text``: the shortest prefix whose
    decoded text (``skip_special_tokens``, as the engines decode) starts with ``text``.

    This drops what the response text does not contain, so that the tokens counted are the
    ones :func:`response_entropy_sums` scores (it re-tokenizes the text): a trailing EOS, and
    the tokens past the cut when a stop string is left out of the text. The token that
    completes a kept stop string stays, even when its text runs past the stop string."""
    ids, text = completion.token_ids, completion.text
    k = len(ids)
    while k > 0 and tokenizer.decode(ids[: k - 1], skip_special_tokens=True).startswith(text):
        k -= 1
    return k


def completion_entropy_sums(
    tokenizer: Any, completions: list[Completion]
) -> tuple[list[float], list[int]] | None:
    r"""Per completion ``i``: ``(S_i, n_i)`` as :func:`response_entropy_sums` gives them, but
    from the engine's per-token ``entropies`` (no forward): ``n_i`` is
    :func:`response_token_count` and ``S_i`` the sum of the first ``n_i`` entropies. None when
    any completion has no ``entropies`` (the vLLM engine).

    It differs from the forward's value only where the two score different tokens or round
    differently: the sampled ids are scored, not the re-tokenized text (the same ids whenever
    the sampled ones are the text's canonical tokenization; a random model's often are not),
    and the engine's entropies come from a KV-cache decode, the forward's from one full pass
    (float rounding only: at most 4e-6 per token in float32 on the test model)."""
    if any(c.entropies is None for c in completions):
        return None
    sums: list[float] = []
    counts: list[int] = []
    for c in completions:
        k = response_token_count(tokenizer, c)
        sums.append(sum(c.entropies[:k]))
        counts.append(k)
    return sums, counts


def sampled_entropy(
    tokenizer: Any, completions: list[Completion], forward: Callable[[], float | None]
) -> float | None:
    """Token-weighted mean entropy of the completions' responses under the policy that sampled
    them: from the engine's per-token entropies when every completion carries them
    (:func:`completion_entropy_sums`, hf and static engines; None when no response has a
    token), else ``forward()`` (a no-gradient forward, for engines that return none: vLLM)."""
    engine_sums = completion_entropy_sums(tokenizer, completions)
    if engine_sums is None:
        return forward()
    sums, counts = engine_sums
    return sum(sums) / sum(counts) if sum(counts) else None


def mean_response_entropy(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    responses: list[str],
    *,
    micro_batch_size: MicroBatchSize | None = None,
) -> float | None:
    r"""Mean token entropy of the responses under ``model``, token-weighted over all of them:
    :math:`\sum_i S_i / \sum_i n_i` (:func:`response_entropy_sums`), i.e. every response token
    counts once, so a long response weighs more than a short one (``log_generations``'s
    ``mean_token_entropy`` is instead the mean of per-response means). In nats, within
    ``[0, log V]``. None when no response has a token."""
    sums, counts = response_entropy_sums(
        model, tokenizer, prompts, responses, micro_batch_size=micro_batch_size
    )
    total = sum(counts)
    return sum(sums) / total if total else None


def log_generations(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    responses: list[str],
    ground_truths: list[str],
    rewards: list[dict[str, float]] | None = None,
    *,
    reward_fn: Any = None,
    micro_batch_size: int = 8,
) -> dict[str, Any]:
    """In-the-loop generation logging; returns records, the caller writes them.

    For each (prompt, response, ground truth): the format/answer/total reward (from ``rewards``,
    or graded with ``reward_fn`` through ``envs.grade_batch``) and the mean entropy of the
    model's next-token distribution over the response tokens. Also the mean response length
    (tokens) over all responses, over correct ones (answer reward 1) and over incorrect ones
    (None when there are none).

    Returns ``{"records": [...], "mean_response_length", "mean_response_length_correct",
    "mean_response_length_incorrect", "mean_token_entropy"}``.
    """
    if not len(prompts) == len(responses) == len(ground_truths):
        raise ValueError("prompts, responses and ground_truths must have the same length")
    if rewards is None:
        if reward_fn is None:
            raise ValueError("log_generations needs rewards or a reward_fn")
        rewards = list(envs.grade_batch(reward_fn, list(responses), list(ground_truths)))
    micro = MicroBatchSize(micro_batch_size, backoff=False)
    sums, lengths = response_entropy_sums(
        model, tokenizer, list(prompts), list(responses), micro_batch_size=micro
    )
    entropies = [total / max(1, count) for total, count in zip(sums, lengths, strict=True)]

    records = []
    for i in range(len(prompts)):
        r = rewards[i]
        records.append(
            {
                "prompt": prompts[i],
                "response": responses[i],
                "ground_truth": ground_truths[i],
                "reward": float(r["reward"]),
                "format_reward": float(r["format_reward"]),
                "answer_reward": float(r["answer_reward"]),
                "mean_token_entropy": entropies[i],
                "response_length": lengths[i],
            }
        )

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    correct = [rec["response_length"] for rec in records if is_one(rec["answer_reward"])]
    wrong = [rec["response_length"] for rec in records if not is_one(rec["answer_reward"])]
    return {
        "records": records,
        "mean_response_length": mean([float(x) for x in lengths]),
        "mean_response_length_correct": mean([float(x) for x in correct]),
        "mean_response_length_incorrect": mean([float(x) for x in wrong]),
        "mean_token_entropy": mean(entropies),
    }
