"""Pretraining the tiny world and writing its folder: ``rrl tiny-world``."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from reasoning_core.runtime.run.checkpoint import write_checksums
from reasoning_core.runtime.run.ownership import claim_run_folder, release_run_folder
from reasoning_core.runtime.settings.config import resolve_command, save_config
from reasoning_core.runtime.tinyworld.corpus import documents
from reasoning_core.runtime.tinyworld.model import build_model, build_tokenizer
from reasoning_core.runtime.tinyworld.world import TinyWorldConfig

COMMAND = "tiny-world"


def encode_documents(tokenizer, docs: list[tuple[str, str]]) -> list[list[int]]:
    """Prompt and response tokenized separately, concatenated, then eos (as at inference)."""
    backend = tokenizer.backend_tokenizer
    prompts = backend.encode_batch([p for p, _ in docs], add_special_tokens=False)
    responses = backend.encode_batch([r for _, r in docs], add_special_tokens=False)
    eos = tokenizer.eos_token_id
    return [p.ids + r.ids + [eos] for p, r in zip(prompts, responses, strict=True)]


def collate(seqs: list[list[int]], pad_id: int):
    """Right-padded ``(input_ids, attention_mask, labels)``; padding labelled -100."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def length_bucketed(
    stream: Iterator[tuple[str, str]],
    tokenizer,
    batch_size: int,
    buckets: int,
    rng: random.Random,
) -> Iterator[list[list[int]]]:
    """Encoded batches of ``batch_size`` documents from ``stream``: ``buckets`` batches' worth
    at a time, sorted by length (stable), cut into batches and yielded in a shuffled order.
    ``buckets`` 1 yields the stream's batches as they come (no shuffle drawn)."""
    while True:
        pool = encode_documents(tokenizer, list(itertools.islice(stream, batch_size * buckets)))
        if not pool:
            return
        if buckets > 1:
            pool.sort(key=len)
        cut = [pool[i : i + batch_size] for i in range(0, len(pool), batch_size)]
        if buckets > 1:
            rng.shuffle(cut)
        yield from cut


def lr_lambda(cfg: TinyWorldConfig):
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio``."""

    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        span = max(1, cfg.steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def make_optimizer(model: torch.nn.Module, cfg: TinyWorldConfig) -> torch.optim.AdamW:
    """AdamW with ``weight_decay`` on the matrices (embeddings included) and none on the
    vectors (norms, biases)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=tuple(cfg.betas),
    )


def build(cfg: TinyWorldConfig, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Build the tiny world into ``out``; return the summary also written to ``done.json``.

    ``out`` is claimed as the trainers claim theirs (:mod:`reasoning_core.runtime.run.ownership`):
    a tiny world finished there with the same settings is kept and its summary returned; a
    folder of another command, files no run wrote, or a second writer are refused."""
    t0 = time.monotonic()
    out = Path(out)
    done = claim_run_folder(out, COMMAND, cfg, may_change={"num_threads"})
    if done is not None:
        return done
    try:
        return _build(cfg, out, progress=progress, t0=t0)
    finally:
        release_run_folder(out)


def _build(cfg: TinyWorldConfig, out: Path, *, progress: bool, t0: float) -> dict[str, Any]:
    torch.set_num_threads(cfg.num_threads)
    save_config(cfg, out)  # after the thread count, which its provenance records
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    tok_docs = list(documents(cfg, cfg.tokenizer_docs, seed=cfg.seed * 1000 + 11))
    tokenizer = build_tokenizer([p + r for p, r in tok_docs], cfg.vocab_size)
    model = build_model(cfg, tokenizer.eos_token_id)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())

    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))

    stream = documents(cfg, cfg.steps * cfg.batch_size, seed=cfg.seed * 1000 + 23)
    batches = length_bucketed(
        stream, tokenizer, cfg.batch_size, cfg.length_buckets, random.Random(cfg.seed + 29)
    )
    metrics_path = out / "metrics.jsonl"
    n_tokens = 0
    loss_sum, loss_n = 0.0, 0
    last_loss = float("nan")
    with open(metrics_path, "w") as metrics:
        bar = tqdm(range(cfg.steps), desc="tiny-world pretraining", disable=not progress)
        for step in bar:
            ids, mask, labels = collate(next(batches), tokenizer.pad_token_id)
            attention_mask = mask if cfg.attention == "padding" else None
            loss = model(input_ids=ids, attention_mask=attention_mask, labels=labels).loss
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
    names = sorted(f.name for f in tmp.iterdir())
    for name in names:
        (tmp / name).replace(out / name)
    tmp.rmdir()
    # What a copy of the base can be checked against (the study checks a shipped base with it).
    write_checksums(out, names)


def main(argv: list[str] | None = None) -> int:
    resolved = resolve_command(
        TinyWorldConfig,
        COMMAND,
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
