"""Batches: tokenize once, cut into micro batches, back off on CUDA out-of-memory.

* :func:`tokenize_pairs` tokenizes a whole batch of (prompt, response) pairs once;
  :func:`micro_batches` cuts chosen rows of it into micro batches, each trimmed to its own
  longest row (padding past it is never computed).
* :class:`MicroBatchSize` is the micro-batch size of a run's training or scoring passes: on
  ``torch.OutOfMemoryError`` it redoes the pass with a divisor of the size
  (:func:`smaller_micro_batch`) and keeps that size. An optimizer step is the same batch mean
  either way; only the accumulation is split finer.
* :func:`policy_log_probs` is every training and scoring forward: response log-probs (and
  token entropy) of a micro batch under the policy.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from reasoning_core import (
    get_response_log_probs,
    log_probs_from_logits,
    tokenize_prompt_and_output,
)
from reasoning_core.runtime.policy import training_forward

T = TypeVar("T")


def tokenize_pairs(prompts: list[str], responses: list[str], tokenizer: Any) -> dict[str, Any]:
    """``tokenize_prompt_and_output`` on the whole batch, plus each row's used length.

    Returns ``input_ids``, ``labels`` (batch, seq) long, ``response_mask`` (batch, seq) bool
    and ``lengths`` (batch,): one past each row's last response token."""
    batch = tokenize_prompt_and_output(
        prompt_strs=prompts, output_strs=responses, tokenizer=tokenizer
    )
    mask = batch["response_mask"].bool()
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    # Used length of a row = one past its last response token (responses end the sequence).
    lengths = torch.where(mask, positions + 1, torch.zeros_like(positions)).amax(dim=1)
    batch["lengths"] = lengths
    batch["response_mask"] = mask
    return batch


def micro_batches(
    batch: dict[str, torch.Tensor], rows: list[int] | torch.Tensor, size: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Slices of ``rows`` of ``size`` rows each (in the given order); columns trimmed to the
    longest row of the slice. Each holds ``rows`` (its indices into ``batch``), ``input_ids``,
    ``labels`` and ``response_mask``."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    for start in range(0, len(rows), size):
        idx = rows[start : start + size]
        width = max(1, int(batch["lengths"][idx].max()))
        yield {
            "rows": idx,
            "input_ids": batch["input_ids"][idx, :width],
            "labels": batch["labels"][idx, :width],
            "response_mask": batch["response_mask"][idx, :width],
        }


def policy_log_probs(
    model: Any,
    micro: dict[str, torch.Tensor],
    device: torch.device,
    *,
    with_entropy: bool = True,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and token entropy) of ``micro``'s labels under ``model``, on ``device``,
    through :func:`~reasoning_core.runtime.policy.training_forward`; each (batch, seq).

    ``share_prompts``: :func:`shared_prompt_log_probs` (each distinct prompt computed once);
    its values at prompt and padding positions are 0, the response positions' are the same up
    to float rounding."""
    forward = training_forward(model)
    input_ids, labels = micro["input_ids"].to(device), micro["labels"].to(device)
    if share_prompts:
        mask = micro["response_mask"].to(device)
        return shared_prompt_log_probs(forward, input_ids, labels, mask, with_entropy=with_entropy)
    out = get_response_log_probs(
        model=forward, input_ids=input_ids, labels=labels, return_token_entropy=with_entropy
    )
    return out["log_probs"], out.get("token_entropy")


def shared_prompt_log_probs(
    model: Any,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """What ``get_response_log_probs`` gives at the response positions of a
    :func:`tokenize_pairs` batch, with each distinct prompt run through ``model`` once.

    GRPO's ``group_size`` responses to one question share its prompt, which is about half of
    each row in the tiny world. Here the distinct prompts go through the model once (right
    padded, with their KV cache), the cache is repeated for the rows that share each prompt,
    and the responses run on top of it with their own positions; the first response token is
    scored by the prompt's last logits. Gradients flow through both forwards, so a prompt's
    activations get the summed gradient of all its responses: the same loss and gradient as
    the full forward, up to float rounding (summation order), for fewer computed tokens.

    Returns (batch, seq) log-probs and entropies (None unless ``with_entropy``) laid out as
    ``labels``: response positions filled, every other position 0 (the callers mask them).
    A row's prompt is its tokens before its first response token; rows without response
    tokens score nothing."""
    rows, width = labels.shape
    dev = labels.device
    counts = response_mask.sum(dim=1)
    has = counts > 0
    if not bool(has.any()):
        zeros = torch.zeros(rows, width, device=dev)
        return zeros, (zeros.clone() if with_entropy else None)
    # The prompt of row i is input_ids[i, :p_i], p_i = 1 + the label index of its first
    # response token (labels[t] is token t + 1 of the sequence).
    starts = torch.where(has, response_mask.float().argmax(dim=1) + 1, torch.ones_like(counts))
    starts_l = starts.tolist()
    index: dict[tuple[int, ...], int] = {}
    group = []
    for i in range(rows):
        key = tuple(input_ids[i, : starts_l[i]].tolist())
        group.append(index.setdefault(key, len(index)))
    prompts = list(index)
    plen = torch.tensor([len(k) for k in prompts], device=dev)
    prompt_ids = torch.zeros(len(prompts), int(plen.max()), dtype=torch.long, device=dev)
    prompt_attn = torch.zeros_like(prompt_ids)
    for u, key in enumerate(prompts):
        prompt_ids[u, : len(key)] = torch.tensor(key, dtype=torch.long)
        prompt_attn[u, : len(key)] = 1
    from transformers import DynamicCache  # the shell's models are Hugging Face ones

    head = model(input_ids=prompt_ids, attention_mask=prompt_attn, use_cache=True)
    g = torch.tensor(group, dtype=torch.long, device=dev)
    cache = DynamicCache(
        ddp_cache_data=[
            (layer.keys.index_select(0, g), layer.values.index_select(0, g))
            for layer in head.past_key_values.layers
        ]
    )
    # Responses left-aligned in (rows, longest): token j of row i is labels[i, p_i - 1 + j].
    longest = int(counts.max())
    cols = torch.arange(longest, device=dev)
    valid = cols.unsqueeze(0) < counts.unsqueeze(1)
    at = torch.where(
        valid, (starts - 1).unsqueeze(1) + cols, torch.zeros_like(valid, dtype=torch.long)
    )
    responses = torch.where(valid, labels.gather(1, at), torch.zeros_like(at))
    body = model(
        input_ids=responses,
        attention_mask=torch.cat([prompt_attn.index_select(0, g), torch.ones_like(responses)], 1),
        position_ids=plen.index_select(0, g).unsqueeze(1) + cols,
        past_key_values=cache,
        use_cache=False,
    )
    first = head.logits[torch.arange(len(prompts), device=dev), plen - 1].index_select(0, g)
    logits = torch.cat([first.unsqueeze(1), body.logits[:, :-1]], dim=1)
    out = log_probs_from_logits(logits, responses, return_entropy=with_entropy)
    row_at, col_at = valid.nonzero(as_tuple=True)
    place = (row_at, at[row_at, col_at])

    def laid_out(compact: torch.Tensor) -> torch.Tensor:
        return compact.new_zeros(rows, width).index_put(place, compact[row_at, col_at])

    entropy = laid_out(out["token_entropy"]) if with_entropy else None
    return laid_out(out["log_probs"]), entropy


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor) -> tuple[float, int]:
    """(sum over masked tokens, token count) as Python numbers, for running means."""
    mask = mask.to(values.device, values.dtype)
    return float((values.detach() * mask).sum()), int(mask.sum())


def smaller_micro_batch(size: int) -> int:
    """The largest proper divisor of ``size`` (``size`` over its smallest prime factor): every
    batch the old size divided evenly, the new one divides too (8 -> 4, 6 -> 3, 5 -> 1)."""
    if size <= 1:
        raise ValueError(f"no micro batch smaller than {size}")
    factor = next((f for f in range(2, math.isqrt(size) + 1) if size % f == 0), size)
    return size // factor


class MicroBatchSize:
    """The micro-batch size of a run's training and scoring passes.

    :meth:`call` runs ``fn(size)``. When that raises ``torch.OutOfMemoryError`` (a CUDA
    allocation failed) and ``backoff`` is on, the partial work is dropped (``reset``, e.g. the
    accumulated gradients, then the CUDA cache is emptied) and ``fn`` runs again with
    :func:`smaller_micro_batch` of the size, which the run keeps from then on. The optimizer
    step is the same batch mean either way: only the accumulation is split finer. At micro
    batch 1 the error is raised with a note on what else frees memory.
    """

    def __init__(self, size: int, *, backoff: bool = True, name: str = "train") -> None:
        if size < 1:
            raise ValueError(f"micro batch size must be >= 1, got {size}")
        self.size = int(size)
        self.initial = int(size)
        self.backoff = backoff
        self.name = name
        self.failed_sizes: list[int] = []  # sizes that ran out of memory, in order

    @property
    def changed(self) -> bool:
        return self.size != self.initial

    def call(self, fn: Callable[[int], T], *, reset: Callable[[], None] | None = None) -> T:
        while True:
            size = self.size
            try:
                return fn(size)
            except torch.OutOfMemoryError as exc:
                if not self.backoff or size == 1:
                    exc.add_note(
                        f"[{self.name}] out of memory at micro batch {size}"
                        + ("" if self.backoff else " (setting 'oom_backoff' is off)")
                        + ": turn on 'gradient_checkpointing', lower 'sampling_max_tokens' or"
                        " the rollout engine's memory share (engine_kwargs.vllm."
                        "gpu_memory_utilization), or use a larger GPU"
                    )
                    raise
                reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                self.failed_sizes.append(size)
            # Outside the except block: the traceback, and the activations its frames held,
            # are gone before the cache is emptied.
            if reset is not None:
                reset()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.size = smaller_micro_batch(size)
            print(
                f"[{self.name}] CUDA out of memory at micro batch {size} ({reason}); redoing "
                f"this pass with micro batch {self.size}, kept for the rest of the run",
                file=sys.stderr,
                flush=True,
            )


def with_micro_batch(
    size: int | MicroBatchSize, fn: Callable[[int], T], *, reset: Callable[[], None] | None = None
) -> T:
    """``fn(size)`` for a plain size; through :meth:`MicroBatchSize.call` (out-of-memory
    back-off) for a :class:`MicroBatchSize`."""
    if isinstance(size, MicroBatchSize):
        return size.call(fn, reset=reset)
    return fn(size)


def backoff_metrics(size: int | MicroBatchSize) -> dict[str, int]:
    """``{"micro_batch_size": n}`` once an out-of-memory back-off changed the size, else {}:
    train lines carry the key only after a back-off."""
    if isinstance(size, MicroBatchSize) and size.changed:
        return {"micro_batch_size": size.size}
    return {}
