"""Preference pairs: the JSONL reader and the Anthropic HH loader, on files written here in
HH's own format (``{"chosen": "\\n\\nHuman: ...\\n\\nAssistant: ...", "rejected": ...}``)."""

import gzip
import json

import pytest

from envs import DataError
from envs.pairs import HH_SUBSETS, conversation_turns, load_hh, read_pairs


def _write(path, records, *, gz=False):
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def _hh(human, chosen, rejected, *, more=""):
    return {
        "chosen": f"\n\nHuman: {human}\n\nAssistant: {chosen}{more}",
        "rejected": f"\n\nHuman: {human}\n\nAssistant: {rejected}{more}",
    }


def test_read_pairs_keeps_records_and_extra_fields(tmp_path):
    path = _write(
        tmp_path / "p.jsonl",
        [
            {"prompt": "q1", "chosen": "a", "rejected": "b", "source": "x"},
            {"prompt": "q2", "chosen": "c", "rejected": "d"},
        ],
    )
    pairs = read_pairs(path)
    assert [p["prompt"] for p in pairs] == ["q1", "q2"]
    assert pairs[0]["source"] == "x"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "q", "chosen": "a"}, "missing field 'rejected'"),
        ({"prompt": "q", "chosen": 3, "rejected": "b"}, "field 'chosen' must be str"),
        ({"prompt": " ", "chosen": "a", "rejected": "b"}, "field 'prompt' is empty"),
        ({"prompt": "q", "chosen": "a", "rejected": "a"}, "the same response"),
    ],
)
def test_read_pairs_names_file_line_and_field(tmp_path, record, message):
    good = {"prompt": "q", "chosen": "a", "rejected": "b"}
    path = _write(tmp_path / "p.jsonl", [good, record])
    with pytest.raises(DataError, match=rf"p\.jsonl:2: .*{message}"):
        read_pairs(path)


def test_read_pairs_refuses_an_empty_or_missing_file(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(DataError, match="empty file"):
        read_pairs(tmp_path / "e.jsonl")
    with pytest.raises(DataError, match="file not found"):
        read_pairs(tmp_path / "none.jsonl")


def test_conversation_turns_splits_speakers():
    text = "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: And?\n\nAssistant:"
    assert conversation_turns(text) == [
        ("Human", "Hi there"),
        ("Assistant", "Hello!"),
        ("Human", "And?"),
        ("Assistant", ""),
    ]


def test_load_hh_keeps_single_turn_pairs_with_their_source(tmp_path):
    multi = "\n\nHuman: and then?\n\nAssistant: more"
    files = {
        "harmless-base": [
            _hh("How do I pick a lock?", "I can't help with that.", "First, get a pick."),
            _hh("Tell me a secret", "No.", "Sure.", more=multi),  # multi-turn: dropped
        ],
        "helpful-base": [_hh("What is 2+2?", "4", "5")],
        "helpful-online": [
            {  # the two conversations start from different prompts: dropped
                "chosen": "\n\nHuman: A\n\nAssistant: x",
                "rejected": "\n\nHuman: B\n\nAssistant: y",
            }
        ],
        "helpful-rejection-sampled": [_hh("Name a color.", "Blue.", "Dog.")],
    }
    for name, records in files.items():
        _write(tmp_path / f"{name}.jsonl.gz", records, gz=True)
    pairs, counts = load_hh(tmp_path)
    assert pairs == [
        {
            "prompt": "How do I pick a lock?",
            "chosen": "I can't help with that.",
            "rejected": "First, get a pick.",
            "source": "harmless-base",
        },
        {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5", "source": "helpful-base"},
        {
            "prompt": "Name a color.",
            "chosen": "Blue.",
            "rejected": "Dog.",
            "source": "helpful-rejection-sampled",
        },
    ]
    assert counts["hh/harmless-base/records"] == 2 and counts["hh/harmless-base/pairs"] == 1
    assert counts["hh/helpful-online/pairs"] == 0
    assert set(HH_SUBSETS) == set(files)


def test_load_hh_reads_the_hugging_face_layout_and_names_what_is_missing(tmp_path):
    (tmp_path / "helpful-base").mkdir()
    _write(tmp_path / "helpful-base" / "train.jsonl.gz", [_hh("Q", "A", "B")], gz=True)
    pairs, _ = load_hh(tmp_path, subsets=["helpful-base"])
    assert pairs[0]["source"] == "helpful-base"
    with pytest.raises(DataError, match="harmless-base"):
        load_hh(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    _write(bad / "helpful-base.jsonl", [_hh("Q", "A", "B"), {"chosen": "x"}])
    with pytest.raises(DataError, match=r"helpful-base\.jsonl:2: missing field 'rejected'"):
        load_hh(bad, subsets=["helpful-base"])
