"""The tiny world: a ~1M-parameter base model for the arithmetic task, built from nothing.

``rrl tiny-world --config F --out DIR`` (section ``tiny-world:`` of ``F``) writes to ``DIR``
a Hugging Face model folder that loads with ``transformers`` and vLLM (``config.json``,
``model.safetensors``, tokenizer files), plus the run files ``config.yaml``,
``metrics.jsonl`` (pretraining loss, ``split: train``) and ``done.json`` (written last).

Steps, all seeded and reproducible:

1. **Corpus.** Documents about training problems of the arithmetic task (never a test
   problem). A fraction ``r1_fraction`` (0.8) use the r1_zero prompt followed by one of the
   answer styles in ``R1_STYLES``; only ``tags_chain`` (`` 5 + 3 = 8. 8 - 2 = 6. </think>
   <answer> 6 </answer>``) passes the r1_zero format check. The others answer with the wrong
   tags, no tags or no reasoning. The rest use other layouts (``OTHER_LAYOUTS``:
   ``Question:/Answer:``, ``Q:/A: ... #### N``, the question then the chain inline, and the
   same ending in ``\\boxed{N}``, which is what the question_only prompt and reward want). In
   ``wrong_fraction`` of documents one step is off by 1 or 2 and the error carries to the
   answer. Problems with ``long_steps`` (3) steps use the weights ``r1_styles_long``, which
   favour the passing style. Like Qwen2.5-Math-1.5B under the r1_zero prompt, the resulting
   base model often breaks the answer format and is only sometimes right when sampled, which
   leaves every method room to show what it does (its zero-shot accuracy and format reward are
   the study's `zero_shot` rows, docs/results.md). The pretraining seed matters: another seed
   builds another base, on which every method starts elsewhere, and fewer steps widen that
   spread (docs/benchmarks.md), hence 2,000. Compare methods
   on one base, as the study does.
2. **Tokenizer.** Byte-level BPE (``tokenizers``, ~390 tokens) with Qwen2's normalizer and
   pre-tokenizer (one digit per token), trained on the corpus minus the r1_zero preamble.
   ``AutoTokenizer``, and so vLLM, reads a ``qwen2`` folder as ``Qwen2Tokenizer``, which
   rebuilds that pipeline from the vocabulary; training with the same pipeline keeps both
   readings identical. The preamble (the template text before ``{question}``) and the tags
   ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` are added (non-special) tokens, so an
   r1_zero prompt is ~32 tokens while its text stays byte-identical to
   ``envs/prompts/r1_zero.prompt``. Saved as a ``PreTrainedTokenizerFast`` with
   ``<|endoftext|>`` as eos and pad (id 0).
3. **Model.** ``Qwen2ForCausalLM`` from a config (hidden 128, 4 layers, 4 heads of dim 32,
   2 KV heads, intermediate 512, vocab 512, tied embeddings): about 1.05M parameters.
4. **Pretraining.** Next-token loss on all tokens of each document (prompt and response
   tokenized separately and concatenated, as ``tokenize_prompt_and_output`` and the rollout
   engines see them, then eos), AdamW, linear warm-up then cosine decay to
   ``min_lr_ratio * lr``, gradient clipping; stops after ``steps`` optimizer steps.
"""

from reasoning_core.runtime.tinyworld.corpus import documents, make_document, r1_zero_preamble
from reasoning_core.runtime.tinyworld.model import QWEN2_SPLIT, build_model, build_tokenizer
from reasoning_core.runtime.tinyworld.pretrain import build, main
from reasoning_core.runtime.tinyworld.world import (
    EOS,
    OTHER_LAYOUTS,
    PASSING_STYLE,
    R1_STYLES,
    TAGS,
    TinyWorldConfig,
)

__all__ = [
    "EOS",
    "OTHER_LAYOUTS",
    "PASSING_STYLE",
    "QWEN2_SPLIT",
    "R1_STYLES",
    "TAGS",
    "TinyWorldConfig",
    "build",
    "build_model",
    "build_tokenizer",
    "documents",
    "main",
    "make_document",
    "r1_zero_preamble",
]
