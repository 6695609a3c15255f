"""Memory per GPU of a GRPO run sharded with FSDP2, from counted and measured figures.

An estimate, not a measurement: nothing here has run on several GPUs. What it is built from:

* **counted**: the parameters of the architecture in ``--config`` (the model is built on the
  meta device: no weights, no memory), its largest FSDP unit (a decoder layer or an embedding
  matrix) and its KV cache bytes per token (layers x 2 x KV heads x head size x 2 bytes);
* **measured**: the activation memory of one Qwen2.5-Math-1.5B sequence of 1,152 tokens in a
  training step on an H200 (docs/gpu.md, "Micro batch and memory": peaks of 12.4 GiB at micro
  batch 2 and 21.2 GiB at 16 with gradient checkpointing, 0.63 GiB a sequence; 3.77 GiB a
  sequence without);
* **arithmetic**: FSDP2 keeps float32 parameters, float32 gradients and AdamW's two float32
  moments sharded over the ranks (16 bytes a parameter / ranks); a rank gathers one unit's
  bf16 parameters at a time and prefetches the next (2 units); a sequence's activations scale
  with the hidden size (the 1.5B figure times hidden / 1,536, which over-counts the logits'
  share: their vocabulary is the same); vLLM colocated takes ``--vllm-share`` of the card for
  its full bf16 copy of the weights and its KV cache.

Run: ``python tools/memory_estimate.py --config workflow/config/models/qwen2.5-math-7b.json
--ranks 8 --micro-batch 4``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30
MEASURED_HIDDEN = 1536  # Qwen2.5-Math-1.5B, where the activation figures were measured
MEASURED_TOKENS = 1152  # 128 prompt + 1,024 response tokens a sequence
ACTIVATION_GIB = {True: 0.63, False: 3.77}  # a sequence, with / without gradient checkpointing
STATE_BYTES = 16  # float32 parameter, gradient and AdamW's two moments


@dataclass(frozen=True)
class Shape:
    parameters: int
    largest_unit: int
    hidden_size: int
    kv_bytes_per_token: int


def count(config_path: Path) -> Shape:
    """Parameters and sizes of the architecture in a Hugging Face config.json."""
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(**json.loads(config_path.read_text()))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    units = [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    units.append(model.get_input_embeddings().weight.numel())
    head_dim = config.hidden_size // config.num_attention_heads
    return Shape(
        parameters=sum(p.numel() for p in model.parameters()),
        largest_unit=max(units),
        hidden_size=config.hidden_size,
        kv_bytes_per_token=config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 2,
    )


def estimate(
    shape: Shape,
    *,
    ranks: int,
    micro_batch: int,
    tokens: int,
    checkpointing: bool,
    card_gib: float,
    vllm_share: float,
) -> dict[str, float]:
    """GiB per GPU, by part, and what is left of the card."""
    per_sequence = (
        ACTIVATION_GIB[checkpointing]
        * (shape.hidden_size / MEASURED_HIDDEN)
        * (tokens / MEASURED_TOKENS)
    )
    parts = {
        "sharded parameters, gradients, AdamW": STATE_BYTES * shape.parameters / ranks / GIB,
        "gathered bf16 units (2)": 2 * 2 * shape.largest_unit / GIB,
        f"activations ({micro_batch} x {tokens} tokens)": micro_batch * per_sequence,
        "vLLM share": vllm_share * card_gib,
    }
    total = sum(parts.values())
    vllm_weights = 2 * shape.parameters / GIB
    return {
        **parts,
        "total": total,
        "left on the card": card_gib - total,
        "vLLM weights (in its share)": vllm_weights,
        "vLLM KV tokens (in its share)": max(vllm_share * card_gib - vllm_weights, 0)
        * GIB
        / shape.kv_bytes_per_token,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="a model's config.json")
    parser.add_argument("--ranks", type=int, default=8, help="GPUs the run is sharded over")
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences a rank's step")
    parser.add_argument("--tokens", type=int, default=MEASURED_TOKENS, help="a sequence's")
    parser.add_argument("--no-checkpointing", action="store_true")
    parser.add_argument("--card-gib", type=float, default=74.5, help="usable GiB (80 GB: 74.5)")
    parser.add_argument("--vllm-share", type=float, default=0.35, help="gpu_memory_utilization")
    args = parser.parse_args(argv)
    shape = count(args.config)
    print(
        f"{args.config.name}: {shape.parameters:,} parameters, largest unit "
        f"{shape.largest_unit:,}, KV cache {shape.kv_bytes_per_token:,} bytes a token"
    )
    rows = estimate(
        shape,
        ranks=args.ranks,
        micro_batch=args.micro_batch,
        tokens=args.tokens,
        checkpointing=not args.no_checkpointing,
        card_gib=args.card_gib,
        vllm_share=args.vllm_share,
    )
    for name, value in rows.items():
        shown = f"{value:12,.0f}" if name.startswith("vLLM KV") else f"{value:12,.1f} GiB"
        print(f"  {name:42s} {shown}")


if __name__ == "__main__":
    main()
