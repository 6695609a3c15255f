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
   leaves every method room to show what it does. Measured with the defaults (``rrl eval``,
   512 test problems, 48 new tokens, sampling seed 0): r1_zero sampled at temperature 1.0,
   format reward 0.36 and accuracy 0.23 (HF engine; vLLM 0.34 and 0.23; sampling seeds 1-3
   0.32-0.37 and 0.20-0.25); greedy, 0.48 and 0.47. question_only sampled 0.35 and 0.23
   (greedy never boxes: 0 and 0). Pretraining took 450 s on one CPU thread. The pretraining
   seed matters: ``seed=1`` gives a base at 0.40 / 0.30 sampled under r1_zero whose default
   SFT run ends at 0.75 accuracy, against 0.66 from ``seed=0``. With 1,000 steps the spread
   was wider (zero-shot accuracy 0.13 / 0.24, SFT 0.39 / 0.63), hence 2,000. Compare methods
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

from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EOS = "<|endoftext|>"
TAGS = ("<think>", "</think>", "<answer>", "</answer>")

# Answer styles after an r1_zero prompt (which ends in "<think>"). Only `tags_chain` passes
# the r1_zero format check ("</think> <answer>" ... "</answer>").
R1_STYLES: dict[str, str] = {
    "tags_chain": " {chain} </think> <answer> {answer} </answer>",
    "tags_tight": "</think><answer>{answer}</answer>",
    "chain_plain": " {chain} The answer is {answer}.",
    "hashes": "</think> #### {answer}",
    "plain": "</think> The answer is {answer}.",
    "tags_newline": "</think>\n<answer> {answer} </answer>",
}
PASSING_STYLE = "tags_chain"

# Documents without the r1_zero prompt.
OTHER_LAYOUTS: dict[str, str] = {
    "qa": "Question: {question}\nAnswer: {chain} So the answer is {answer}.",
    "q_a_hash": "Q: {question}\nA: {chain} #### {answer}",
    "inline": "{question} {chain} So the answer is {answer}.",
    # The question alone, then a boxed answer: what the question_only prompt ("{question}")
    # and its reward (the last \\boxed{}) look for. Without it the base model never boxes an
    # answer and the prompt ablation has nothing to learn from.
    "boxed": "{question} {chain} So the answer is \\boxed{{answer}}.",
}


@dataclass
class TinyWorldConfig:
    """Settings of ``rrl tiny-world`` (section ``tiny-world:`` of the config file)."""

    seed: int = 0
    # pretraining
    steps: int = 2000
    batch_size: int = 32
    lr: float = 2e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    weight_decay: float = 0.01
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    log_every: int = 10
    num_threads: int = 1
    # corpus
    r1_fraction: float = 0.8
    # Answer-style weights after the r1_zero prompt for short problems (fewer than
    # `long_steps` steps) and, in `r1_styles_long`, for long ones. Long problems are worked
    # step by step (and in the passing style) more often, so that sampling passes the format
    # about a third of the time while greedy decoding passes it on long problems only, as a
    # real base model behaves differently on different problems. Empty `r1_styles_long`:
    # `r1_styles` for all problems.
    r1_styles: dict[str, float] = field(
        default_factory=lambda: {
            "tags_chain": 0.25,
            "chain_plain": 0.10,
            "tags_tight": 0.15,
            "hashes": 0.10,
            "plain": 0.25,
            "tags_newline": 0.15,
        }
    )
    r1_styles_long: dict[str, float] = field(
        default_factory=lambda: {
            "tags_chain": 0.50,
            "chain_plain": 0.15,
            "tags_tight": 0.10,
            "hashes": 0.05,
            "plain": 0.10,
            "tags_newline": 0.10,
        }
    )
    long_steps: int = 3
    other_layouts: dict[str, float] = field(
        default_factory=lambda: {"qa": 1.0, "q_a_hash": 1.0, "inline": 1.0, "boxed": 0.5}
    )
    wrong_fraction: float = 0.2
    # tokenizer
    tokenizer_docs: int = 20_000
    # model
    vocab_size: int = 512
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 512
    max_position_embeddings: int = 256

    def validate(self) -> None:
        from reasoning_core.runtime.config import ConfigError

        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"setting {name!r} {why}")

        for name in ("steps", "batch_size", "log_every", "num_threads", "tokenizer_docs"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if self.warmup_steps < 0:
            raise bad("warmup_steps", "must be >= 0")
        if not 0.0 <= self.r1_fraction <= 1.0:
            raise bad("r1_fraction", "must lie in [0, 1]")
        if not 0.0 <= self.wrong_fraction <= 1.0:
            raise bad("wrong_fraction", "must lie in [0, 1]")
        if len(self.betas) != 2:
            raise bad("betas", "must be a list of two numbers")
        tables = [
            ("r1_styles", self.r1_styles, R1_STYLES),
            ("other_layouts", self.other_layouts, OTHER_LAYOUTS),
        ]
        if self.r1_styles_long:
            tables.append(("r1_styles_long", self.r1_styles_long, R1_STYLES))
        for name, table, known in tables:
            unknown = sorted(set(table) - set(known))
            if unknown:
                raise bad(name, f"has unknown entries {unknown}; known: {sorted(known)}")
            if any(not isinstance(w, (int, float)) or w < 0 for w in table.values()):
                raise bad(name, "weights must be numbers >= 0")
            if sum(table.values()) <= 0:
                raise bad(name, "needs a positive total weight")
        if self.hidden_size != self.num_heads * self.head_dim:
            raise bad("hidden_size", "must equal num_heads * head_dim")
        if self.num_heads % self.num_kv_heads:
            raise bad("num_kv_heads", "must divide num_heads")


# -- corpus ------------------------------------------------------------------------------


def _pick(table: dict[str, float], rng: random.Random) -> str:
    names = sorted(table)
    return rng.choices(names, weights=[table[n] for n in names])[0]


def make_document(
    problem, cfg: TinyWorldConfig, rng: random.Random, template: str
) -> tuple[str, str]:
    """One corpus document as ``(prompt, response)``; ``prompt`` is "" for other layouts."""
    from envs.arithmetic import chain_text, wrong_values
    from envs.base import render

    values = wrong_values(problem, rng) if rng.random() < cfg.wrong_fraction else problem.values()
    fields = {
        "question": problem.question(),
        "chain": chain_text(problem.start, problem.steps, values),
        "answer": str(values[-1]),
    }
    if rng.random() < cfg.r1_fraction:
        prompt = render(template, {"question": fields["question"]})
        long = cfg.r1_styles_long and len(problem.steps) >= cfg.long_steps
        styles = cfg.r1_styles_long if long else cfg.r1_styles
        return prompt, render(R1_STYLES[_pick(styles, rng)], fields)
    return "", render(OTHER_LAYOUTS[_pick(cfg.other_layouts, rng)], fields)


def documents(cfg: TinyWorldConfig, n: int, seed: int):
    """``n`` documents drawn from seed ``seed`` (problems from the task's train side)."""
    from envs.arithmetic import TASK
    from envs.base import load_prompt

    template = load_prompt("r1_zero")
    rng = random.Random(seed)
    for problem in TASK.train_problems(n, seed=seed + 1, distinct=False):
        yield make_document(problem, cfg, rng, template)


# -- tokenizer ---------------------------------------------------------------------------


def r1_zero_preamble() -> str:
    """The r1_zero template text before ``{question}`` (added to the tokenizer as one token)."""
    from envs.base import load_prompt

    template = load_prompt("r1_zero")
    return template[: template.index("{question}")]


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


# -- model -------------------------------------------------------------------------------


def build_model(cfg: TinyWorldConfig, eos_id: int):
    import torch
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


# -- pretraining -------------------------------------------------------------------------


def encode_documents(tokenizer, docs: list[tuple[str, str]]) -> list[list[int]]:
    """Prompt and response tokenized separately, concatenated, then eos (as at inference)."""
    backend = tokenizer.backend_tokenizer
    prompts = backend.encode_batch([p for p, _ in docs], add_special_tokens=False)
    responses = backend.encode_batch([r for _, r in docs], add_special_tokens=False)
    eos = tokenizer.eos_token_id
    return [p.ids + r.ids + [eos] for p, r in zip(prompts, responses, strict=True)]


def collate(seqs: list[list[int]], pad_id: int):
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def lr_lambda(cfg: TinyWorldConfig):
    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        span = max(1, cfg.steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def build(cfg: TinyWorldConfig, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Build the tiny world into ``out``; return the summary also written to ``done.json``."""
    import numpy as np
    import torch
    from tqdm import tqdm

    from reasoning_core.runtime.config import save_config

    t0 = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "done.json").unlink(missing_ok=True)
    save_config(cfg, out)
    torch.set_num_threads(cfg.num_threads)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    tok_docs = list(documents(cfg, cfg.tokenizer_docs, seed=cfg.seed * 1000 + 11))
    tokenizer = build_tokenizer([p + r for p, r in tok_docs], cfg.vocab_size)
    model = build_model(cfg, tokenizer.eos_token_id)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=tuple(cfg.betas),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))

    stream = documents(cfg, cfg.steps * cfg.batch_size, seed=cfg.seed * 1000 + 23)
    metrics_path = out / "metrics.jsonl"
    n_tokens = 0
    loss_sum, loss_n = 0.0, 0
    last_loss = float("nan")
    with open(metrics_path, "w") as metrics:
        bar = tqdm(range(cfg.steps), desc="tiny-world pretraining", disable=not progress)
        for step in bar:
            batch = [next(stream) for _ in range(cfg.batch_size)]
            ids, mask, labels = collate(encode_documents(tokenizer, batch), tokenizer.pad_token_id)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            lr = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
            n_tokens += int(mask.sum())
            loss_sum += loss.item()
            loss_n += 1
            if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
                last_loss = loss_sum / loss_n
                record = {
                    "step": step + 1,
                    "split": "train",
                    "loss": last_loss,
                    "grad_norm": float(grad_norm),
                    "lr": lr,
                    "tokens": n_tokens,
                    "time/elapsed": time.monotonic() - t0,
                }
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
                bar.set_postfix(loss=f"{last_loss:.3f}")
                loss_sum, loss_n = 0.0, 0

    model.eval()
    _save_model_atomically(model, tokenizer, out)
    summary = {
        "final_loss": last_loss,
        "steps": cfg.steps,
        "tokens": n_tokens,
        "parameters": n_params,
        "vocab_used": len(tokenizer),
        "wall_seconds": time.monotonic() - t0,
    }
    tmp = out / "done.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(out / "done.json")
    return summary


def _save_model_atomically(model, tokenizer, out: Path) -> None:
    """save_pretrained into a temporary folder, then move each file into ``out``."""
    tmp = out / ".model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for f in sorted(tmp.iterdir()):
        f.replace(out / f.name)
    tmp.rmdir()


def main(argv: list[str] | None = None) -> int:
    from reasoning_core.runtime.config import resolve_command

    resolved = resolve_command(
        TinyWorldConfig,
        "tiny-world",
        argv,
        "Build the tiny CPU base model (tokenizer + Qwen2 + pretraining) into --out.",
    )
    if resolved is None:
        return 2
    cfg, args = resolved
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.num_threads))
    summary = build(cfg, args.out)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
