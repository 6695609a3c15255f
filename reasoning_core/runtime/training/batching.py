"""Batches: tokenize once, cut into micro batches, back off on CUDA out-of-memory.

* :func:`tokenize_pairs` tokenizes a whole batch of (prompt, response) pairs once into a
  :class:`TokenBatch` (:func:`token_batch` lays out pairs already tokenized the same way); :func:`micro_batches` cuts chosen rows of it into :class:`MicroBatch`
  slices, each trimmed to its own longest row (padding past it is never computed).
* :class:`MicroBatchSize` is the micro-batch size of every training or scoring pass: on
  ``torch.OutOfMemoryError`` it redoes the pass with a divisor of the size
  (:func:`smaller_micro_batch`) and keeps that size; with ``backoff=False`` it is a plain size.
  An optimizer step is the same batch mean either way; only the accumulation is split finer.
* :func:`policy_log_probs` is every training and scoring forward: response log-probs (and
  token entropy) of a micro batch under the policy.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import torch

from reasoning_core import (
    get_response_log_probs,
    log_probs_from_logits,
    tokenize_prompt_and_output,
)
from reasoning_core._typing import Bool, Int, Tensor
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.training.policy import training_forward

T = TypeVar("T")


class TokenBatch(NamedTuple):
    """A batch of (prompt, response) pairs tokenized once (:func:`tokenize_pairs`): prompt and
    response tokens of a row side by side, right-padded; ``lengths`` is one past each row's
    last response token (what of the row is ever computed)."""

    input_ids: Int[Tensor, "batch seq"]
    labels: Int[Tensor, "batch seq"]
    response_mask: Bool[Tensor, "batch seq"]
    lengths: Int[Tensor, " batch"]

    @property
    def rows(self) -> int:
        return self.input_ids.shape[0]


class MicroBatch(NamedTuple):
    """Rows ``rows`` (indices into the :class:`TokenBatch`) of a token batch, the columns
    trimmed to the slice's longest row (:func:`micro_batches`)."""

    rows: Int[Tensor, " micro"]
    input_ids: Int[Tensor, "micro width"]
    labels: Int[Tensor, "micro width"]
    response_mask: Bool[Tensor, "micro width"]


def tokenize_pairs(prompts: list[str], responses: list[str], tokenizer: Any) -> TokenBatch:
    """``tokenize_prompt_and_output`` on the whole batch, plus each row's used length."""
    batch = tokenize_prompt_and_output(
        prompt_strs=prompts, output_strs=responses, tokenizer=tokenizer
    )
    mask = batch["response_mask"].bool()
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    # Used length of a row = one past its last response token (responses end the sequence).
    lengths = torch.where(mask, positions + 1, torch.zeros_like(positions)).amax(dim=1)
    return TokenBatch(batch["input_ids"], batch["labels"], mask, lengths)


def token_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> TokenBatch:
    """A :class:`TokenBatch` of pairs already tokenized (prompt ids, response ids), laid out as
    :func:`tokenize_pairs` lays out the ids ``tokenize_prompt_and_output`` makes: each row is
    the prompt's ids then the response's, right-padded with ``pad_id``, shifted by one into
    ``input_ids`` and ``labels``; ``response_mask`` marks the labels that are response ids."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    sequences = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
    width = max((len(s) for s in sequences), default=1)
    ids = torch.full((len(sequences), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(sequences), max(width - 1, 0)), dtype=torch.bool)
    for row, (prompt, seq) in enumerate(zip(prompts, sequences, strict=True)):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        # labels[j] is seq[j + 1]: a response id when len(prompt) <= j + 1 < len(seq).
        mask[row, max(len(prompt) - 1, 0) : len(seq) - 1] = True
    lengths = torch.tensor([len(seq) - 1 for seq in sequences], dtype=torch.long)
    lengths = torch.where(mask.any(dim=1), lengths, torch.zeros_like(lengths))
    return TokenBatch(ids[:, :-1], ids[:, 1:], mask, lengths)


def micro_batches(
    batch: TokenBatch, rows: list[int] | torch.Tensor, size: int
) -> Iterator[MicroBatch]:
    """Slices of ``rows`` of ``size`` rows each (in the given order); columns trimmed to the
    longest row of the slice."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    for start in range(0, len(rows), size):
        idx = rows[start : start + size]
        width = max(1, int(batch.lengths[idx].max()))
        yield MicroBatch(
            idx,
            batch.input_ids[idx, :width],
            batch.labels[idx, :width],
            batch.response_mask[idx, :width],
        )


def policy_log_probs(
    model: Any,
    micro: MicroBatch,
    device: torch.device,
    *,
    with_entropy: bool = True,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and token entropy) of ``micro``'s labels under ``model``, on ``device``,
    through :func:`~reasoning_core.runtime.training.policy.training_forward`; each (batch, seq).

    ``share_prompts``: :func:`shared_prompt_log_probs` (each distinct prompt computed once);
    its values at prompt and padding positions are 0, the response positions' are the same up
    to float rounding."""
    forward = training_forward(model)
    input_ids, labels = micro.input_ids.to(device), micro.labels.to(device)
    if share_prompts:
        mask = micro.response_mask.to(device)
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

    GRPO's ``group_size`` responses to one question share its prompt. Here the rows that share
    a prompt are *packed* into one sequence: the prompt, then each response in turn, each with
    its own positions (``len(prompt) + j``) and a 4D attention mask by which a response token
    sees the prompt and the earlier tokens of its own response only. One forward over the
    packed rows gives every response token the logits the full forward gives it (the first
    token of each response is scored by the prompt's last logits), and the prompt's
    activations get the summed gradient of all its responses: the same loss and gradient up to
    float rounding (summation order), without the prompt repeated and with padding only
    between packed rows.

    Needs an attention implementation that takes a 4D float mask (``sdpa`` or ``eager``; see
    :func:`check_packable`). Returns (batch, seq) log-probs and entropies (None unless
    ``with_entropy``) laid out as ``labels``: response positions filled, every other position 0
    (the callers mask them). A row's prompt is its tokens before its first response token; rows
    without response tokens score nothing.

    A multi-turn episode's row has tokens that are not scored between its response tokens (a
    tool's results, :func:`~reasoning_core.runtime.training.episodes.episode_batch`): its
    packed segment runs from its first response token to its last, the tokens between them
    included as context, and only the response tokens are scored."""
    rows, width = labels.shape
    dev = labels.device
    if not response_mask.any():
        zeros = torch.zeros(rows, width, device=dev)
        return zeros, (zeros.clone() if with_entropy else None)
    # Row i's prompt is input_ids[i, :p_i], p_i = 1 + the label index of its first response
    # token (labels[t] is token t + 1 of the sequence); its segment is labels[i, p_i - 1:][:c_i],
    # c_i reaching its last response token; scored: the segment's response tokens.
    first = response_mask.float().argmax(dim=1)
    last = width - 1 - response_mask.flip(dims=[1]).float().argmax(dim=1)
    starts = (first + 1).tolist()
    counts = torch.where(response_mask.any(dim=1), last - first + 1, 0).tolist()
    scores = response_mask.tolist()
    ids, labels_l = input_ids.tolist(), labels.tolist()
    groups: dict[tuple[int, ...], list[int]] = {}  # prompt -> the rows that share it
    for i, (p, c) in enumerate(zip(starts, counts, strict=True)):
        if c > 0:
            groups.setdefault(tuple(ids[i][:p]), []).append(i)
    # One packed sequence per prompt: its tokens, position ids and segments (0: the prompt,
    # k: its k-th response); and per response token (pack, position scoring it, row, column).
    seqs: list[tuple[list[int], list[int], list[int]]] = []
    scored: list[tuple[int, int, int, int]] = []
    for u, (prompt, members) in enumerate(groups.items()):
        p = len(prompt)
        tokens, pos, seg = list(prompt), list(range(p)), [0] * p
        for k, i in enumerate(members, start=1):
            at, c = len(tokens), counts[i]
            tokens += labels_l[i][p - 1 : p - 1 + c]
            pos += range(p, p + c)
            seg += [k] * c
            sources = [p - 1, *range(at, at + c - 1)]  # the first token: the prompt's last
            scored += [
                (u, src, i, p - 1 + j) for j, src in enumerate(sources) if scores[i][p - 1 + j]
            ]
        seqs.append((tokens, pos, seg))
    n, longest = len(seqs), max(len(tokens) for tokens, _, _ in seqs)
    packed = torch.zeros(n, longest, dtype=torch.long)
    position = torch.zeros(n, longest, dtype=torch.long)
    segment = torch.full((n, longest), -1, dtype=torch.long)  # -1: padding
    for u, (tokens, pos, seg) in enumerate(seqs):
        packed[u, : len(tokens)] = torch.tensor(tokens)
        position[u, : len(tokens)] = torch.tensor(pos)
        segment[u, : len(tokens)] = torch.tensor(seg)
    segment = segment.to(dev)
    query, key_ = segment[:, :, None], segment[:, None, :]
    sees = (key_ >= 0) & ((key_ == 0) | (key_ == query))
    sees &= torch.ones(longest, longest, dtype=torch.bool, device=dev).tril()
    sees |= torch.eye(longest, dtype=torch.bool, device=dev)  # a padding query sees itself
    dtype = next(model.parameters()).dtype
    bias = torch.zeros(n, 1, longest, longest, dtype=dtype, device=dev)
    bias.masked_fill_(~sees[:, None], torch.finfo(dtype).min)
    logits = model(
        input_ids=packed.to(dev),
        attention_mask=bias,
        position_ids=position.to(dev),
        use_cache=False,
    ).logits
    pack_at, source, row_at, col_at = torch.tensor(scored, device=dev).unbind(dim=1)
    out = log_probs_from_logits(
        logits[pack_at, source], labels[row_at, col_at], return_entropy=with_entropy
    )
    at = (row_at, col_at)
    entropy = laid_out(out["token_entropy"], rows, width, at) if with_entropy else None
    return laid_out(out["log_probs"], rows, width, at), entropy


def laid_out(
    compact: torch.Tensor, rows: int, width: int, at: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """``compact`` (one value per scored token) put at positions ``at`` (rows, columns) of a
    (rows, width) tensor of zeros."""
    return compact.new_zeros(rows, width).index_put(at, compact)


PACKABLE_ATTENTION = ("sdpa", "eager")


def check_packable(model: Any) -> None:
    """Raise ConfigError unless ``model``'s attention takes the 4D float mask that
    :func:`shared_prompt_log_probs` packs with (FlashAttention kernels take none)."""
    kind = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if kind not in PACKABLE_ATTENTION:
        raise ConfigError(
            f"setting 'share_prompts' packs each prompt with its responses under a 4D attention "
            f"mask, which attention implementation {kind!r} does not take; set "
            f"attn_implementation to one of {list(PACKABLE_ATTENTION)} or turn share_prompts off"
        )


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

    :meth:`call` runs ``fn(size, *args)``. When that raises ``torch.OutOfMemoryError`` (a CUDA
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

    def metrics(self) -> dict[str, int]:
        """``{"micro_batch_size": n}`` once an out-of-memory back-off changed the size, else {}:
        train lines carry the key only after a back-off."""
        return {"micro_batch_size": self.size} if self.changed else {}

    def call(
        self,
        fn: Callable[..., T],
        *args: Any,
        reset: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> T:
        """``fn(size, *args, **kwargs)``, redone with a smaller size on CUDA out-of-memory (see
        the class); ``reset`` drops the partial work of a failed pass (the accumulated
        gradients)."""
        while True:
            size = self.size
            try:
                return fn(size, *args, **kwargs)
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
