"""tools/memory_estimate.py: the counted figures and the arithmetic of the per-GPU estimate."""

from __future__ import annotations

import pytest
from project_root import ROOT, load_script

tool = load_script("tools/memory_estimate.py")
Shape, count, estimate = tool.Shape, tool.count, tool.estimate

MODELS = ROOT / "workflow/config/models"


def test_counts_the_parameters_of_the_published_architectures():
    # 1,543,714,304: the count the H200 check printed for the 1.5B architecture (docs/gpu.md);
    # 7,615,616,512: Qwen2.5-7B's published size (7.62B), which the Math model shares.
    small = count(MODELS / "qwen2.5-math-1.5b.json")
    large = count(MODELS / "qwen2.5-math-7b.json")
    assert small.parameters == 1_543_714_304
    assert large.parameters == 7_615_616_512
    # 7B: untied 152,064 x 3,584 embeddings are its largest FSDP unit; 28 layers x 2 x 4 KV
    # heads x 128 x 2 bytes of KV cache a token
    assert large.largest_unit == 152_064 * 3_584
    assert large.kv_bytes_per_token == 28 * 2 * 4 * 128 * 2


def test_sharded_state_divides_by_the_ranks_and_the_parts_add_up():
    shape = Shape(parameters=8 * 2**30, largest_unit=2**28, hidden_size=1536, kv_bytes_per_token=1)
    args = dict(micro_batch=2, tokens=1152, checkpointing=True, card_gib=80.0, vllm_share=0.25)
    one, eight = estimate(shape, ranks=1, **args), estimate(shape, ranks=8, **args)
    state = "sharded parameters, gradients, AdamW"
    assert one[state] == pytest.approx(128.0) and eight[state] == pytest.approx(16.0)
    parts = [
        k for k in eight if k not in ("total", "left on the card") and "(in its share)" not in k
    ]
    assert eight["total"] == pytest.approx(sum(eight[k] for k in parts))
    assert eight["left on the card"] == pytest.approx(80.0 - eight["total"])
    # at the measured model's hidden size and sequence length, a sequence costs what was measured
    assert eight["activations (2 x 1152 tokens)"] == pytest.approx(2 * 0.63)


def test_the_7b_configuration_fits_an_80_gb_card_on_8_ranks_and_not_on_one():
    shape = count(MODELS / "qwen2.5-math-7b.json")
    args = dict(micro_batch=4, tokens=1152, checkpointing=True, card_gib=74.5, vllm_share=0.35)
    assert estimate(shape, ranks=8, **args)["left on the card"] > 10
    assert estimate(shape, ranks=1, **args)["left on the card"] < 0
