"""Prompt/response tokenization for causal-LM training."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ._typing import Bool, Int, Tensor

__all__ = ["tokenize_prompt_and_output"]


def _encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    if not texts:
        return []
    encoded = tokenizer(list(texts), add_special_tokens=False)
    ids = encoded["input_ids"]
    return [list(map(int, row)) for row in ids]


def tokenize_prompt_and_output(
    prompt_strs: Sequence[str],
    output_strs: Sequence[str],
    tokenizer: Any,
) -> dict[str, Int[Tensor, "batch seq"] | Bool[Tensor, "batch seq"]]:
    """Tokenize prompts and outputs separately, concatenate, right-pad, and shift.

    Each prompt and output is tokenized on its own without special tokens (so the boundary
    between them is exact, at the price of possibly differing from tokenizing the joined
    string), the two id lists are concatenated, and every sequence is right-padded with
    ``tokenizer.pad_token_id`` to the longest length ``L``. Then, for next-token
    prediction, ``input_ids = ids[:, :-1]`` and ``labels = ids[:, 1:]``, and
    ``response_mask`` is True exactly where ``labels`` holds an output token (never on the
    prompt or on padding).

    Args:
        prompt_strs: ``B`` prompts.
        output_strs: ``B`` outputs (responses), one per prompt.
        tokenizer: anything called as ``tokenizer(list_of_str, add_special_tokens=False)``
            returning a mapping with ``"input_ids"`` (a Hugging Face tokenizer), with a
            ``pad_token_id``.

    Returns:
        ``{"input_ids", "labels"}`` (int64) and ``"response_mask"`` (bool), each
        ``(B, L - 1)``.

    Raises:
        ValueError: if the two lists differ in length or the tokenizer has no pad id.
    """
    if len(prompt_strs) != len(output_strs):
        raise ValueError(
            f"prompt_strs ({len(prompt_strs)}) and output_strs ({len(output_strs)}) differ in length"
        )
    pad_id = getattr(tokenizer, "pad_token_id", None)
    if pad_id is None:
        raise ValueError("tokenizer.pad_token_id is None; set a pad token before tokenizing")
    prompts = _encode(tokenizer, prompt_strs)
    outputs = _encode(tokenizer, output_strs)
    sequences = [p + o for p, o in zip(prompts, outputs, strict=True)]
    length = max((len(s) for s in sequences), default=1)
    ids = torch.full((len(sequences), length), int(pad_id), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    prompt_len = torch.tensor([len(p) for p in prompts], dtype=torch.long).unsqueeze(-1)
    total_len = torch.tensor([len(s) for s in sequences], dtype=torch.long).unsqueeze(-1)
    # labels[:, j] is ids[:, j + 1]: an output token when prompt_len <= j + 1 < total_len.
    position = torch.arange(1, length, dtype=torch.long).unsqueeze(0)
    response_mask = (position >= prompt_len) & (position < total_len)
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": response_mask}
