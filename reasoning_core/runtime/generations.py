"""``log_generations`` (SPEC section 1): the handout's in-the-loop logging of generations.

Per example: prompt, response, ground truth, the three rewards and the mean token entropy of
the policy over the response; overall, the mean response length of all, correct and incorrect
responses. Writing the records is the caller's job (the trainers' evaluations write theirs
with :func:`reasoning_core.runtime.metrics.write_generations`).
"""

from __future__ import annotations

from typing import Any

import torch

import envs
from reasoning_core import get_response_log_probs, tokenize_prompt_and_output
from reasoning_core.runtime.evaluate import is_one


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
    device = next(model.parameters()).device
    entropies: list[float] = []
    lengths: list[int] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(prompts), micro_batch_size):
                sl = slice(start, start + micro_batch_size)
                batch = tokenize_prompt_and_output(
                    prompt_strs=list(prompts[sl]),
                    output_strs=list(responses[sl]),
                    tokenizer=tokenizer,
                )
                out = get_response_log_probs(
                    model=model,
                    input_ids=batch["input_ids"].to(device),
                    labels=batch["labels"].to(device),
                    return_token_entropy=True,
                )
                mask = batch["response_mask"].to(device).float()
                count = mask.sum(-1)
                ent = (out["token_entropy"].float() * mask).sum(-1) / count.clamp(min=1)
                entropies.extend(ent.tolist())
                lengths.extend(int(c) for c in count.tolist())
    finally:
        model.train(was_training)

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
