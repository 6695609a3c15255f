"""Rollout speed of the static-cache engine against the Hugging Face engine, same run.

Builds a *randomly initialised* model with the Qwen2.5-Math-1.5B architecture
(``workflow/config/models/qwen2.5-math-1.5b.json``) in bf16 and a word-level tokenizer over its
151,936 ids (so a prompt string encodes to exactly the ids drawn; nothing is downloaded), then
for each row count (default 64 and 256 rows, one sample per prompt) generates 1,024 new tokens
after a 128-token prompt with every row running to full length (``min_tokens = max_tokens``
masks EOS; no stop strings).

First, ``correctness``: on a tiny fp32 model on the same device, each static mode's greedy
tokens must be the HF engine's and its log-probs the policy's within 1e-4 (with refills, row
and span buckets and captured graphs); a failure is recorded as that entry's error. This is the
GPU test of tests/runtime/engines/test_static.py, runnable where pytest is not installed.

Then, for each engine and row count:

- ``new_tokens_per_s``: a warm ``generate`` call (the static engine's graphs already captured);
- ``first_call_seconds``: the cold call of the same shape (capture, and compilation when on);
- ``warmup_seconds`` / ``capture_seconds`` / ``graphs``: the static engine's own count of its
  graph warm-up runs (these include inductor compilation with ``compile``) and captures;
- ``ttft_seconds``: time to first token, a ``generate`` of one new token at the same rows
  (tokenization, prefill, first sample, host copy);
- ``peak_memory_gib``: ``torch.cuda.max_memory_allocated`` over the engine's calls (the model's
  own 2.9 GiB included), and ``cache_gib``: the static cache alone;
- ``logprob_max_abs_error``: on 4 rows x 64 sampled tokens, the largest difference between
  the returned log-probs and a plain full-sequence forward of the policy (a sanity check of the
  captured path in bf16; reported, not asserted).

Static-engine modes: ``graphs`` (eager decode step captured as CUDA graphs) and ``compile``
(the step fused by ``torch.compile`` first, then captured). The HF engine decodes
``--hf-new-tokens`` (default 256) new tokens to keep the run short: its per-token cost grows
with length (the dynamic cache is re-copied every step), so its rate over 256 tokens flatters
it and the static/HF ratio is a lower bound.

    PYTHONPATH=$PWD python3 benchmarks/rollout_gpu.py --out benchmarks/records/h200
    python benchmarks/rollout_gpu.py --tiny --out /tmp/rollout_gpu   # CPU, seconds
    python benchmarks/rollout_gpu.py --preset tiny-world --out /tmp/rg  # CPU, the tiny-world shape

Every measurement is wrapped: an error (out of memory, a capture failure) is recorded in its
entry and the next one runs; the JSON is rewritten after each. Writes
``rollout_gpu_<date>.json`` and ``rollout_gpu_<date>.log`` into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reasoning_core.runtime.engines import make_engine  # noqa: E402
from reasoning_core.runtime.engines.rollout import SamplingParams  # noqa: E402

CONFIG_PATH = ROOT / "workflow/config/models/qwen2.5-math-1.5b.json"
TARGET_TOKENS_PER_S = 15_000  # at 256 rows on an H200: 256 rollouts of 1,024 tokens in ~17 s
TARGET_CAPTURE_SECONDS = 120

PRESETS: dict[str, dict[str, Any]] = {
    # the shapes, on a GPU
    "h200": {"rows": [64, 256], "prompt_len": 128, "new_tokens": 1024, "hf_new_tokens": 256},
    # the same code on CPU in seconds (CI)
    "tiny": {"rows": [4, 8], "prompt_len": 16, "new_tokens": 32, "hf_new_tokens": 32},
    # benchmarks/rollout_throughput.py's model shape (hidden 128, 4 layers), on CPU
    "tiny-world": {"rows": [64, 256], "prompt_len": 16, "new_tokens": 256, "hf_new_tokens": 256},
}


class Log:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.t0 = time.perf_counter()
        path.write_text("")

    def __call__(self, msg: str) -> None:
        line = f"[{time.perf_counter() - self.t0:7.1f}s] {msg}"
        print(line, flush=True)
        with self.path.open("a") as f:
            f.write(line + "\n")


def model_config(preset: str):
    from transformers import Qwen2Config

    if preset == "h200":
        return Qwen2Config(**json.loads(CONFIG_PATH.read_text()))
    hidden, layers = (64, 2) if preset == "tiny" else (128, 4)
    return Qwen2Config(
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
        bos_token_id=0,
    )


def build_tokenizer(vocab_size: int, eos_id: int):
    """Word-level: id ``i`` is the word ``t<i>`` (``<eos>`` at ``eos_id``), words split on
    spaces, so ``" ".join(f"t{i}" ...)`` encodes to exactly those ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size) if i != eos_id}
    vocab["<eos>"] = eos_id
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def build_model(config, device: torch.device, dtype: torch.dtype):
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def make_prompts(count: int, length: int, vocab: int, eos_id: int, seed: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (count, length), generator=gen)
    ids[ids == eos_id] = (eos_id + 1) % vocab
    return [" ".join(f"t{i}" for i in row) for row in ids.tolist()]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _timed(engine, prompts, params, device) -> tuple[float, int]:
    _sync(device)
    t0 = time.perf_counter()
    out = engine.generate(prompts, params)
    _sync(device)
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for cs in out for c in cs)
    assert tokens == len(prompts) * params.n * params.max_tokens, tokens
    return seconds, tokens


@torch.no_grad()
def logprob_error(engine, model, tokenizer, device, prompt_len: int, vocab: int, eos: int) -> float:
    """Largest |returned log-prob - full-forward log-prob| over 4 rows x 64 sampled tokens."""
    prompts = make_prompts(4, prompt_len, vocab, eos, seed=1)
    params = SamplingParams(max_tokens=64, min_tokens=64, stop=[], seed=3)
    worst = 0.0
    for prompt, cs in zip(prompts, engine.generate(prompts, params), strict=True):
        p_ids = tokenizer.encode(prompt, add_special_tokens=False)
        ids = torch.tensor([p_ids + cs[0].token_ids], device=device)
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
        pos = torch.arange(len(p_ids) - 1, ids.shape[1] - 1, device=device)
        ref = logp[pos, ids[0, len(p_ids) :]].cpu()
        worst = max(worst, (torch.tensor(cs[0].logprobs) - ref).abs().max().item())
    return worst


@torch.no_grad()
def correctness(device: torch.device, mode: str, options: dict[str, Any]) -> dict[str, Any]:
    """One static mode against the HF engine on a tiny fp32 Qwen2 on ``device``: 5 prompts
    of 3 to 40 tokens, 3 samples each, 4 rows at a time (refills, row and span buckets), 40
    greedy tokens must be the HF engine's; sampled (top-p 0.9) log-probs must equal a plain
    forward's within 1e-4. Runs where no pytest is installed (a bare GPU image)."""
    from transformers import Qwen2Config

    config = Qwen2Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=1024,
        tie_word_embeddings=False, eos_token_id=0, bos_token_id=0,
    )  # fmt: skip
    model = build_model(config, device, torch.float32)
    model.lm_head.weight.normal_(0.0, 0.3)  # clear greedy winners
    tokenizer = build_tokenizer(512, 0)
    prompts = [make_prompts(1, length, 512, 0, seed=length)[0] for length in (3, 9, 17, 26, 40)]
    greedy = SamplingParams(n=3, temperature=0.0, max_tokens=40, stop=[])
    reference = make_engine("hf", model, tokenizer).generate(prompts, greedy)
    sampled = SamplingParams(n=2, max_tokens=40, top_p=0.9, stop=[], seed=0)
    engine = make_engine("static", model, tokenizer, max_batch_size=4, **options)
    out = engine.generate(prompts, greedy)
    same = [
        a.token_ids == b.token_ids
        for xs, ys in zip(out, reference, strict=True)
        for a, b in zip(xs, ys, strict=True)
    ]
    worst = 0.0
    for prompt, cs in zip(prompts, engine.generate(prompts, sampled), strict=True):
        p_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for c in cs:
            ids = torch.tensor([p_ids + c.token_ids], device=device)
            logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
            pos = torch.arange(len(p_ids) - 1, ids.shape[1] - 1, device=device)
            ref = logp[pos, ids[0, len(p_ids) :]].cpu()
            worst = max(worst, (torch.tensor(c.logprobs) - ref).abs().max().item())
    result = {
        "mode": mode,
        "greedy_rows_equal_hf": sum(same),
        "rows": len(same),
        "logprob_max_abs_error": worst,
        "passed": all(same) and worst < 1e-4,
        "graphs": engine.stats["graphs"],
        "refills": engine.stats["refills"],
        "compactions": engine.stats["compactions"],
    }
    engine.close()
    return result


def measure(
    kind: str,
    options: dict[str, Any],
    model,
    tokenizer,
    device: torch.device,
    rows: int,
    prompt_len: int,
    new_tokens: int,
    eos: int,
    check_logprobs: bool,
) -> dict[str, Any]:
    vocab = model.config.vocab_size
    prompts = make_prompts(rows, prompt_len, vocab, eos, seed=0)
    params = SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, stop=[], seed=0)
    _free(device)
    mem0 = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
    t0 = time.perf_counter()
    engine = make_engine(kind, model, tokenizer, max_batch_size=rows, **options)
    result: dict[str, Any] = {"rows": rows, "prompt_len": prompt_len, "new_tokens": new_tokens}
    result["build_seconds"] = time.perf_counter() - t0
    try:
        if kind == "static":
            result["first_call_seconds"], _ = _timed(engine, prompts, params, device)
        else:  # a short warm-up: allocator, kernels, the token-text table
            _timed(engine, prompts, params.replace(max_tokens=8, min_tokens=8), device)
        one = params.replace(max_tokens=1, min_tokens=1)
        result["ttft_seconds"], _ = _timed(engine, prompts, one, device)
        seconds, tokens = _timed(engine, prompts, params, device)
        result.update(seconds=seconds, new_tokens_total=tokens, new_tokens_per_s=tokens / seconds)
        result["seconds_per_step"] = seconds / new_tokens
        if kind == "static":
            stats = dict(engine.stats)
            result.update({k: stats[k] for k in ("graphs", "warmup_seconds", "capture_seconds")})
            result["cache_gib"] = stats["cache_bytes"] / 2**30
        if check_logprobs:
            result["logprob_max_abs_error"] = logprob_error(
                engine, model, tokenizer, device, prompt_len, vocab, eos
            )
        if device.type == "cuda":
            result["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            result["memory_before_gib"] = mem0 / 2**30
    finally:
        close = getattr(engine, "close", None)
        if callable(close):
            close()
        del engine
        _free(device)
    return result


def _line(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{name}: ERROR {r['error']}"
    if name.startswith("correctness"):
        return (
            f"{name} (tiny fp32 model, vs the HF engine): greedy {r['greedy_rows_equal_hf']}/"
            f"{r['rows']} rows equal, log-prob err {r['logprob_max_abs_error']:.1e}, "
            f"{r['graphs']} graphs, {r['refills']} refills"
        )
    parts = [f"{r['new_tokens_per_s']:,.0f} new tok/s ({r['seconds']:.2f} s)"]
    parts.append(f"ttft {r['ttft_seconds'] * 1e3:.0f} ms")
    if "first_call_seconds" in r:
        parts.append(
            f"first call {r['first_call_seconds']:.1f} s ({r['graphs']} graphs: warm-up "
            f"{r['warmup_seconds']:.1f} s, capture {r['capture_seconds']:.1f} s)"
        )
    if "peak_memory_gib" in r:
        parts.append(f"peak {r['peak_memory_gib']:.1f} GiB")
    if "cache_gib" in r:
        parts.append(f"cache {r['cache_gib']:.2f} GiB")
    if "logprob_max_abs_error" in r:
        parts.append(f"log-prob err {r['logprob_max_abs_error']:.2e}")
    return f"{name}: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the JSON and the log")
    ap.add_argument("--tiny", action="store_true", help="same as --preset tiny (CPU, seconds)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None)
    ap.add_argument("--rows", type=int, nargs="+", help="row counts (default: the preset's)")
    ap.add_argument("--new-tokens", type=int, help="default: the preset's")
    ap.add_argument("--hf-new-tokens", type=int, help="HF engine's new tokens (0: skip it)")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=None,
        choices=["eager", "graphs", "compile"],
        help="static-engine modes (default: graphs compile on CUDA, eager on CPU)",
    )
    args = ap.parse_args(argv)
    preset = "tiny" if args.tiny else (args.preset or "h200")
    plan = dict(PRESETS[preset])
    if args.rows:
        plan["rows"] = args.rows
    if args.new_tokens:
        plan["new_tokens"] = args.new_tokens
    if args.hf_new_tokens is not None:
        plan["hf_new_tokens"] = args.hf_new_tokens
    if preset == "h200":
        if not torch.cuda.is_available():
            ap.error("no CUDA GPU found; use --tiny or --preset tiny-world on CPU")
        device, dtype = torch.device("cuda"), torch.bfloat16
    else:
        torch.set_num_threads(1)
        device, dtype = torch.device("cpu"), torch.float32
    modes = args.modes or (["graphs", "compile"] if device.type == "cuda" else ["eager"])
    mode_options = {
        "eager": {"cuda_graphs": False},
        "graphs": {"cuda_graphs": True},
        "compile": {"cuda_graphs": True, "compile": True},
    }

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.date.today().isoformat()
    json_path, log = out / f"rollout_gpu_{stamp}.json", Log(out / f"rollout_gpu_{stamp}.log")
    import transformers

    config = model_config(preset)
    eos = int(config.eos_token_id)
    tokenizer = build_tokenizer(config.vocab_size, eos)
    model = build_model(config, device, dtype)
    report: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "preset": preset,
        "dtype": str(dtype).removeprefix("torch."),
        "parameters": sum(p.numel() for p in model.parameters()),
        "plan": {**plan, "static_modes": modes},
        "eos_ignored": "min_tokens = max_tokens: EOS is masked, every row runs to full length",
        "runs": {},
    }
    log(
        f"{report['device']}, torch {torch.__version__}, {preset}: {report['parameters']:,} "
        f"parameters in {report['dtype']}; rows {plan['rows']}, prompt {plan['prompt_len']} + "
        f"{plan['new_tokens']} new tokens (HF engine: {plan['hf_new_tokens']})"
    )

    def record(name: str, fn) -> None:
        try:
            r = fn()
        except Exception as exc:  # an OOM or a capture failure: record it, go on
            r = {"error": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()}
            _free(device)
        report["runs"][name] = r
        log(_line(name, r))
        json_path.write_text(json.dumps(report, indent=1, default=str) + "\n")

    def check(mode: str) -> dict[str, Any]:
        r = correctness(device, mode, mode_options[mode])
        if not r["passed"]:
            raise AssertionError(f"static engine ({mode}) differs from the HF engine: {r}")
        return r

    # Mode by mode, the first (uncompiled) mode and the HF engine before any compilation, so a
    # run cut short by its time limit still holds the headline numbers.
    for i, mode in enumerate(modes):
        record(f"correctness_{mode}", lambda mode=mode: check(mode))
        for rows in plan["rows"]:
            record(
                f"static_{mode}/rows{rows}",
                lambda mode=mode, rows=rows: measure(
                    "static", mode_options[mode], model, tokenizer, device, rows,
                    plan["prompt_len"], plan["new_tokens"], eos, check_logprobs=True,
                ),
            )  # fmt: skip
        if i == 0 and plan["hf_new_tokens"]:
            for rows in plan["rows"]:
                record(
                    f"hf/rows{rows}",
                    lambda rows=rows: measure(
                        "hf", {}, model, tokenizer, device, rows, plan["prompt_len"],
                        plan["hf_new_tokens"], eos, check_logprobs=False,
                    ),
                )  # fmt: skip

    summary: dict[str, Any] = {}
    for rows in plan["rows"]:
        hf = report["runs"].get(f"hf/rows{rows}", {})
        for mode in modes:
            st = report["runs"].get(f"static_{mode}/rows{rows}", {})
            if "new_tokens_per_s" in st and "new_tokens_per_s" in hf:
                ratio = st["new_tokens_per_s"] / hf["new_tokens_per_s"]
                summary[f"ratio_static_{mode}_over_hf/rows{rows}"] = ratio
                log(f"rows {rows}: static ({mode}) / hf engine = {ratio:.1f}x new tok/s")
    if device.type == "cuda":
        best = [
            r
            for name, r in report["runs"].items()
            if name.startswith("static_") and r.get("rows") == 256 and "new_tokens_per_s" in r
        ]
        if best:
            top = max(best, key=lambda r: r["new_tokens_per_s"])
            summary["best_static_tokens_per_s_at_256_rows"] = top["new_tokens_per_s"]
            summary["target_tokens_per_s_met"] = top["new_tokens_per_s"] >= TARGET_TOKENS_PER_S
            summary["target_capture_met"] = top["first_call_seconds"] - top["seconds"] <= (
                TARGET_CAPTURE_SECONDS
            )
            met = "met" if summary["target_tokens_per_s_met"] else "NOT met"
            log(
                f"best at 256 rows: {top['new_tokens_per_s']:,.0f} new tok/s "
                f"(target >= {TARGET_TOKENS_PER_S:,}: {met})"
            )
    report["summary"] = summary
    report["wall_seconds"] = time.perf_counter() - log.t0
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    failed = [name for name, r in report["runs"].items() if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
