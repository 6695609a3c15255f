"""The tiny world's tokenizer (byte-level BPE read identically by transformers and vLLM) and
its Qwen2 model."""

from __future__ import annotations

import torch
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from reasoning_core.runtime.tinyworld.corpus import r1_zero_preamble
from reasoning_core.runtime.tinyworld.world import EOS, TAGS, TinyWorldConfig

# The pre-tokenizer split of Qwen2's tokenizer (one digit per piece, a space before a word
# joins it). `AutoTokenizer` (and so vLLM) loads a folder whose config says `qwen2` as
# `Qwen2Tokenizer`, which rebuilds the pipeline from the vocabulary with this split, NFC and
# ByteLevel(use_regex=False); training with the same pipeline makes both readings identical.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def build_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE with single digits; the r1_zero preamble and tags as added tokens.

    The normalizer, pre-tokenizer and decoder are Qwen2's (see ``QWEN2_SPLIT``), so the
    saved folder tokenizes the same whether read as ``tokenizer.json`` or as
    ``Qwen2Tokenizer``.
    """
    from transformers import PreTrainedTokenizerFast

    preamble = r1_zero_preamble()
    added = [preamble, *TAGS]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(added),
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([t.replace(preamble, "") for t in texts], trainer=trainer)
    tok.add_tokens([AddedToken(a, special=False, normalized=False) for a in added])
    if tok.get_vocab_size() > vocab_size:
        raise ValueError(f"tokenizer has {tok.get_vocab_size()} tokens > vocab_size {vocab_size}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=EOS,
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )


def build_model(cfg: TinyWorldConfig, eos_id: int):
    """The Qwen2 of the settings (tied embeddings, eos as bos and pad), seeded init."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        torch_dtype="float32",
    )
    torch.manual_seed(cfg.seed)
    return Qwen2ForCausalLM(config)
