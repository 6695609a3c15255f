"""The prepared GPU check must not rot: run its --tiny CPU variant end to end."""

import json
import subprocess
import sys

import pytest
import torch

from reasoning_core.runtime import gpu_check


def test_qwen_math_config_is_the_real_architecture():
    cfg = json.loads(gpu_check.CONFIG_PATH.read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (
        1536,
        28,
        12,
    )
    assert (cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]) == (
        2,
        8960,
        151936,
    )
    assert cfg["tie_word_embeddings"] is True
    from transformers import Qwen2Config

    config = Qwen2Config(**cfg)
    # ~1.54B parameters with tied embeddings (Qwen2.5-Math-1.5B's published size).
    d, f, L, V = 1536, 8960, 28, 151936
    kv = 2 * 128
    per_layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * f + 2 * d
    total = L * per_layer + V * d + d
    assert 1.5e9 < total < 1.6e9
    assert gpu_check.matmul_params(config) == L * (2 * d * d + 2 * d * kv + 3 * d * f) + d * V


def test_tiny_check_runs_on_cpu_and_writes_json(tmp_path):
    out = tmp_path / "check.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "reasoning_core.runtime.cli",
            "gpu-check",
            "--tiny",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["tiny"] is True and report["device"] == "cpu"
    for kind in ("sft", "grpo"):
        assert report[kind]["tokens_per_s"] > 0
        assert report[kind]["response_len"] == 48
    assert report["generate"]["new_tokens_per_s"] > 0
    assert "vLLM" in report["not_checked"]


def test_full_check_refuses_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit):
        gpu_check.main(["--out", "/dev/null"])


@pytest.mark.gpu
def test_full_check_on_gpu(tmp_path):
    report = gpu_check.run_check(False, micro_batch=1, steps=1, gradient_checkpointing=True)
    assert report["sft"]["peak_memory_gib"] > 0
    assert report["logprob_memory"]["ratio"] < 0.5
