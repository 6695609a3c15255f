"""Packed instruction-tuning data (the supplement's SFT on `{prompt, response}` pairs).

Each pair is one Alpaca document (`envs.alpaca.alpaca_document`: the tokenizer's BOS where it
adds one, the template filled with the pair, the EOS token right after the response), as the
handout's reference packing has it: `...response<|end_of_text|><|begin_of_text|>Below is...`
with the Llama 3 tokenizer. All documents (shuffled first when asked) form one token stream,
cut into consecutive non-overlapping chunks of `seq_length`; the tail that does not fill a
chunk is dropped. `labels` are the inputs shifted by one, across chunk boundaries: chunk `i`
holds `stream[i*L : (i+1)*L]` as inputs and `stream[i*L+1 : (i+1)*L+1]` as labels.

`iterate_batches` walks one epoch in batches and keeps the last partial batch; `len()` of it
is the number of batches. Each batch is a mapping with `input_ids` and `labels`, as the
handout's training loop reads it (`batch["input_ids"]`); the same tensors are attributes
(`batch.input_ids`), and `size` is its number of sequences.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch.utils.data import Dataset

from envs.alpaca import alpaca_document
from envs.base import DataError, read_jsonl


def read_pairs(path: str | Path) -> list[tuple[str, str]]:
    """`(prompt, response)` of each record of a JSONL(.gz) file; a bad record raises DataError."""
    pairs = []
    for line, record in read_jsonl(path):
        for field in ("prompt", "response"):
            if not isinstance(record.get(field), str):
                raise DataError(path, line, f"field {field!r} missing or not a string")
        pairs.append((record["prompt"], record["response"]))
    return pairs


def pack_tokens(stream: list[int], seq_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(input_ids, labels)`, each `(n_chunks, seq_length)`, from one token stream."""
    if seq_length < 1:
        raise ValueError(f"seq_length must be >= 1, got {seq_length}")
    n = max(len(stream) - 1, 0) // seq_length
    tokens = torch.tensor(stream[: n * seq_length + 1], dtype=torch.long)
    if n == 0:
        empty = torch.empty((0, seq_length), dtype=torch.long)
        return empty, empty.clone()
    inputs = tokens[: n * seq_length].view(n, seq_length)
    labels = tokens[1 : n * seq_length + 1].view(n, seq_length)
    return inputs, labels


class PackedSFTDataset(Dataset):
    """Fixed-length chunks of the concatenated, EOS-delimited Alpaca documents of a JSONL."""

    def __init__(
        self, tokenizer, dataset_path: str | Path, seq_length: int, shuffle: bool, seed: int = 0
    ):
        pairs = read_pairs(dataset_path)
        if shuffle:
            random.Random(seed).shuffle(pairs)
        stream: list[int] = []
        for prompt, response in pairs:
            stream.extend(alpaca_document(tokenizer, prompt, response).ids)
        self.seq_length = seq_length
        self.n_tokens = len(stream)
        self.input_ids, self.labels = pack_tokens(stream, seq_length)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"chunk {i} out of range for {len(self)} chunks")
        return {"input_ids": self.input_ids[i], "labels": self.labels[i]}


@dataclass
class Batch(Mapping):
    """One batch of chunks: `input_ids` and `labels` are `(size, seq_length)`, read as keys
    (`batch["labels"]`, `dict(batch)`) or as attributes."""

    input_ids: torch.Tensor
    labels: torch.Tensor

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    @classmethod
    def _keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @property
    def size(self) -> int:
        """Number of sequences in this batch (smaller than the batch size only for the last)."""
        return self.input_ids.shape[0]


class iterate_batches:
    """One epoch over `dataset` in batches of `batch_size`, the last partial batch kept."""

    def __init__(self, dataset: Dataset, batch_size: int, shuffle: bool, seed: int = 0):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset, self.batch_size, self.shuffle, self.seed = dataset, batch_size, shuffle, seed

    def __len__(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed).shuffle(order)
        for start in range(0, len(order), self.batch_size):
            items = [self.dataset[i] for i in order[start : start + self.batch_size]]
            yield Batch(
                input_ids=torch.stack([it["input_ids"] for it in items]),
                labels=torch.stack([it["labels"] for it in items]),
            )
