"""A tiny Qwen2 model and byte-level BPE tokenizer built in-process for engine tests.

Nothing is downloaded: the tokenizer is trained on a few strings, the model has random
weights. The folder written by :func:`save_tiny_model` loads with both
``transformers.AutoModelForCausalLM`` and ``vllm.LLM`` (head dim 32, vLLM's minimum on CPU).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

EOS = "<|endoftext|>"

TRAIN_TEXT = [
    "<think> 2 + 3 = 5 </think> <answer> 5 </answer>",
    "User: what is 12 * 4? Assistant: <think> 12 * 4 = 48 </think> <answer> 48 </answer>",
    "The answer is \\boxed{7}. Let x = 3, then x + 4 = 7.",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 +-*/=()<>{}[]",
]


def build_tokenizer(vocab_size: int = 320) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAIN_TEXT * 20, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)


def build_model(
    vocab_size: int,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=0,
        bos_token_id=0,
        pad_token_id=0,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    # Larger-than-default output weights so that sampling is not nearly uniform and greedy
    # decoding has clear winners (near-ties would make greedy comparisons flaky).
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.3)
    return model.eval()


def save_tiny_model(path: str | Path, *, seed: int = 0, **model_kwargs) -> Path:
    """Write tokenizer + model (safetensors) to ``path`` and return it."""
    path = Path(path)
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), seed=seed, **model_kwargs)
    assert tokenizer.convert_tokens_to_ids(EOS) == 0
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_eos_lover(
    model: Qwen2ForCausalLM, eos_id: int = 0, strength: float = 4.0
) -> Qwen2ForCausalLM:
    """A copy of ``model`` that puts most probability on EOS at every position: a constant
    direction is written into every token embedding and EOS's output row reads it out."""
    import copy

    eos_model = copy.deepcopy(model)
    with torch.no_grad():
        emb = eos_model.model.embed_tokens.weight
        emb[:, 0] = 1.0
        eos_model.model.norm.weight[0] = strength
        eos_model.lm_head.weight[eos_id, 0] = strength
    return eos_model


# Words that are one token each and one pre-token each (a space, then letters or punctuation)
# for both the in-process tokenizer and the Qwen2 one a saved folder loads as (it splits
# digits apart): any sequence of them re-tokenizes to the same ids.
CANONICAL_WORDS = [" x", " is", " +", " =", " *", " <"]


def make_canonical_sampler(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, strength: float = 8.0
) -> Qwen2ForCausalLM:
    """A copy of ``model`` that samples only EOS and :data:`CANONICAL_WORDS`, so that a
    response's text re-tokenizes to exactly its sampled ids (a random model's samples mostly
    do not: byte pieces, odd splits). As in :func:`make_eos_lover`, a constant direction is
    written into every token embedding; every other token's output row reads it out with
    weight ``-strength``, which puts those tokens' logits ~400 below (probability exactly 0
    in float32, so they are never drawn); the allowed rows ignore it."""
    import copy

    allowed = [int(tokenizer.eos_token_id)]
    for word in CANONICAL_WORDS:
        (token_id,) = tokenizer.encode(word, add_special_tokens=False)
        allowed.append(token_id)
    sampler = copy.deepcopy(model)
    with torch.no_grad():
        sampler.model.embed_tokens.weight[:, 0] = 1.0
        sampler.model.norm.weight[0] = strength
        column = sampler.lm_head.weight[:, 0]
        column.fill_(-strength)
        column[allowed] = 0.0
    return sampler


def save_canonical_model(path: str | Path, *, seed: int = 0) -> Path:
    """Write tokenizer + :func:`make_canonical_sampler` of the tiny model to ``path``."""
    path = Path(path)
    tokenizer = build_tokenizer()
    model = make_canonical_sampler(build_model(len(tokenizer), seed=seed), tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@torch.no_grad()
def reference_logprobs(model, prompt_ids: list[int], completion_ids: list[int]) -> torch.Tensor:
    """log p(completion token | prefix) from one plain forward pass (no cache)."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    start = len(prompt_ids) - 1
    positions = torch.arange(start, start + len(completion_ids))
    return logp[positions, torch.tensor(completion_ids)]


def ascii_stop_from(text: str, start: int = 3, length: int = 2) -> str:
    """A printable-ASCII substring of ``text`` at or after ``start`` (to use as a stop string)."""
    for i in range(start, len(text) - length + 1):
        piece = text[i : i + length]
        if piece.isascii() and piece.isprintable() and piece.strip():
            return piece
    raise AssertionError(f"no ASCII stop candidate in {text!r}")


PROMPTS = [
    "User: what is 12 * 4? Assistant: <think>",
    "x = 3",
    "The answer is \\boxed{",
]
LONG_PROMPT = "Let x = 3, then x + 4 = 7. " * 12  # > 200 tokens with this tokenizer


def count_tokenizer_loads(monkeypatch) -> list[str]:
    """The folders ``AutoTokenizer.from_pretrained`` loads from while the test runs, in order
    (each load still happens)."""
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained
    loads: list[str] = []

    def counted(path, *args, **kwargs):
        loads.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", counted)
    return loads
