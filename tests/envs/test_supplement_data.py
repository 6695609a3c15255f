"""The supplement's vendored evaluation data: row counts and digests as envs/data/README.md lists."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from envs.base import DATA_DIR

SUPPLEMENT = DATA_DIR / "supplement"
# file -> (rows, first 16 hex digits of the sha256 of the decompressed bytes)
FILES = {
    "mmlu/dev.jsonl.gz": (285, "bc3749d93619482c"),
    "mmlu/val.jsonl.gz": (1531, "3e4dbe85eca9ddac"),
    "mmlu/test.jsonl.gz": (14042, "f75de57eb3f61994"),
    "alpaca_eval.jsonl.gz": (805, "9f3cf318fe67b3a7"),
    "simple_safety_tests.jsonl": (100, "9f7820dc2972dc3a"),
}


def _bytes(name: str) -> bytes:
    raw = (SUPPLEMENT / name).read_bytes()
    return gzip.decompress(raw) if name.endswith(".gz") else raw


@pytest.mark.parametrize("name", sorted(FILES))
def test_vendored_file_rows_and_digest(name):
    data = _bytes(name)
    rows, digest = FILES[name]
    assert data.count(b"\n") == rows
    assert hashlib.sha256(data).hexdigest()[:16] == digest


def test_mmlu_splits_cover_the_57_subjects_with_letter_answers():
    for split in ("dev", "val", "test"):
        records = [json.loads(line) for line in _bytes(f"mmlu/{split}.jsonl.gz").splitlines()]
        assert len({r["subject"] for r in records}) == 57
        assert {r["answer"] for r in records} == {"A", "B", "C", "D"}
        assert all(len(r["options"]) == 4 for r in records)
