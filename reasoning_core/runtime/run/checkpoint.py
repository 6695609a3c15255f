"""Model folders: checkpoints (Hugging Face format) written atomically, and checked on load.

* ``save_checkpoint(model, tokenizer, path)``: ``save_pretrained`` (safetensors) plus the
  tokenizer into ``<path>.tmp-<pid>``, then renamed to ``path``; loadable with
  ``AutoModelForCausalLM.from_pretrained(path)``. The resumable training state
  (:mod:`.resume`) is written the same way (:func:`temporary_folder`,
  :func:`replace_atomically`), so a process killed at any moment leaves either the old or the
  new folder, never a torn one.
* ``check_model_folder(path)``: before any work, refuse a model folder that lacks or holds a
  damaged ``config.json``, weights (a truncated safetensors file included) or tokenizer, with
  a message naming the file, instead of an error deep in transformers (or, for a missing
  tokenizer, a silently empty one); a folder with a ``SHA256SUMS`` file has every file it
  lists checked against its digest, and one without it is loaded with one warning (per folder
  and process) that its weights cannot be verified. Every model folder ``rrl`` writes (a
  checkpoint, the tiny world, an imported GGUF model) carries its ``SHA256SUMS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from reasoning_core.runtime.errors import ConfigError, StateError


def _fsync_tree(folder: Path) -> None:
    """Flush every file of ``folder`` and the folder itself to disk, so that after the renames a
    machine crash cannot leave a complete-looking folder with empty or partial files."""
    for path in folder.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(tmp: Path, final: Path) -> None:
    """Replace ``final`` by ``tmp`` with renames only (old copy kept as ``final.old`` briefly).

    At every moment ``final`` or ``final.old`` is a complete copy: ``final.old`` is deleted
    only once it has been superseded (it may be the only copy left by a process that died
    between the two renames, and the one a resumed run loaded)."""
    _fsync_tree(tmp)
    old = final.with_name(final.name + ".old")
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    _fsync_dir(final.parent)
    if old.exists():
        shutil.rmtree(old)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or not a pid): leave its folder alone
    return True


def temporary_folder(final: Path) -> Path:
    """A fresh ``<final>.tmp-<pid>``; the temporary folders of dead processes (a save killed
    midway: possibly gigabytes of partial state) are removed first."""
    for stale in final.parent.glob(f"{final.name}.tmp-*"):
        pid = stale.name.rpartition("-")[2]
        if stale.is_dir() and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def save_checkpoint(model, tokenizer, path: str | Path) -> Path:
    """Save ``model`` (safetensors) and ``tokenizer`` in Hugging Face format with their
    ``SHA256SUMS`` (checked whenever the folder is loaded), atomically. A save that fails (a
    full disk: safetensors raises its own error, the rest ``OSError``) removes its temporary
    folder and raises :class:`StateError` saying so; the previous ``path``, if any, is kept."""
    final = Path(path)
    tmp = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_folder(final)
        model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        write_checksums(tmp, sorted(p.name for p in tmp.iterdir() if p.is_file()))
        replace_atomically(tmp, final)
    except (OSError, SafetensorError) as exc:
        removed = ""
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
            removed = f"; the partial copy {tmp} was removed"
        raise StateError(
            f"{final}: the checkpoint could not be written ({_reason(exc)}){removed}. Free "
            "space (or make the folder writable) and run the same command again: it resumes "
            "from its last saved state, if it saved one (save_every)"
        ) from None
    return final


def _reason(exc: BaseException) -> str:
    """What a failed write says: the OS's words for an ``OSError`` (``No space left on
    device``), safetensors' message otherwise (it wraps the OS error in its own text)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# Files from which AutoTokenizer builds a real tokenizer (fast JSON, SentencePiece, BPE, WordPiece).
TOKENIZER_FILES = (
    ("tokenizer.json",),
    ("tokenizer.model",),
    ("vocab.json", "merges.txt"),
    ("vocab.txt",),
)


def _read_json_file(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: {what} is not readable JSON ({exc})") from None


def _check_safetensors(path: Path) -> None:
    """The header parses and the file holds every byte the header points to (a copy or a save
    that stopped early fails here)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or 8 + n > size:
                raise ValueError(f"header length {n} does not fit in {size} bytes")
            header = json.loads(f.read(n))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a complete safetensors file ({exc})") from None
    need = 8 + n + max(ends, default=0)
    if size < need:
        raise ConfigError(f"{path}: truncated ({size} bytes, its header needs {need})")


def check_model_folder(path: str | Path, setting: str = "model_path") -> None:
    """Raise :class:`ConfigError` (naming ``setting`` and the file) unless ``path`` is a
    Hugging Face model folder with a readable ``config.json``, complete weights
    (``model.safetensors``, a sharded safetensors index and its shards, or PyTorch ``.bin``)
    and a tokenizer, whose files match its ``SHA256SUMS`` when it has one
    (:func:`verify_checksums`)."""
    folder = Path(path)
    prefix = f"setting {setting!r}: "
    if not folder.is_dir():
        raise ConfigError(f"{prefix}folder {str(path)!r} does not exist")
    try:
        if not (folder / "config.json").is_file():
            raise ConfigError(f"{folder}: no config.json (not a Hugging Face model folder)")
        if not isinstance(_read_json_file(folder / "config.json", "config.json"), dict):
            raise ConfigError(f"{folder / 'config.json'}: not a JSON object")
        index = folder / "model.safetensors.index.json"
        if (folder / "model.safetensors").is_file():
            _check_safetensors(folder / "model.safetensors")
        elif index.is_file():
            weight_map = _read_json_file(index, "the shard index").get("weight_map", {})
            for shard in sorted(set(weight_map.values())):
                if not (folder / shard).is_file():
                    raise ConfigError(f"{folder / shard}: shard named in {index.name} is missing")
                _check_safetensors(folder / shard)
        elif not any(
            (folder / name).is_file()
            for name in ("pytorch_model.bin", "pytorch_model.bin.index.json")
        ):
            raise ConfigError(
                f"{folder}: no weights (model.safetensors, model.safetensors.index.json or "
                "pytorch_model.bin)"
            )
        if not any(all((folder / f).is_file() for f in group) for group in TOKENIZER_FILES):
            names = " or ".join("+".join(group) for group in TOKENIZER_FILES)
            raise ConfigError(f"{folder}: no tokenizer ({names})")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            if (folder / name).is_file():
                _read_json_file(folder / name, name)
    except ConfigError as exc:
        raise ConfigError(prefix + str(exc)) from None
    # Weights damaged at the same size pass the checks above and fail deep in generation;
    # a folder that lists its files' digests says which file changed.
    if verify_checksums(folder, setting) == 0:
        _warn_unverified(folder, setting)


# Folders already said to be unverifiable in this process: once each, however often loaded.
_UNVERIFIED: set[Path] = set()


def _warn_unverified(folder: Path, setting: str) -> None:
    key = folder.resolve()
    if key in _UNVERIFIED:
        return
    _UNVERIFIED.add(key)
    print(
        f"warning: setting {setting!r}: {folder} has no {CHECKSUMS}, so its weights cannot be "
        "verified (damaged bytes would go unnoticed). The folders rrl writes carry one; for "
        f"this one, `cd {folder} && sha256sum * > {CHECKSUMS}` adds one, once you trust its files",
        file=sys.stderr,
    )


CHECKSUMS = "SHA256SUMS"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: str | Path, names: list[str]) -> Path:
    """Write ``folder/SHA256SUMS`` (``sha256sum`` format: digest, two spaces, name) for the
    files ``names`` of ``folder``; ``sha256sum -c SHA256SUMS`` checks it too."""
    folder = Path(folder)
    lines = [f"{file_sha256(folder / name)}  {name}" for name in sorted(names)]
    path = folder / CHECKSUMS
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path


def verify_checksums(folder: str | Path, setting: str = "model_path") -> int:
    """Check every file listed in ``folder/SHA256SUMS`` against its digest; return how many
    were checked (0 when the folder has no SHA256SUMS). Raise :class:`ConfigError` naming the
    setting, the file and the line of SHA256SUMS on a missing file, a changed file (a Git LFS
    pointer in place of the weights, say) or a malformed line."""
    folder = Path(folder)
    sums = folder / CHECKSUMS
    if not sums.is_file():
        return 0
    prefix = f"setting {setting!r}: "
    checked = 0
    for lineno, line in enumerate(sums.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        name = name.strip()
        if len(digest) != 64 or not name:
            raise ConfigError(f"{prefix}{sums}, line {lineno}: not 'SHA256  NAME': {line!r}")
        path = folder / name
        if not path.is_file():
            raise ConfigError(f"{prefix}{path} is missing ({sums}, line {lineno} lists it)")
        if file_sha256(path) != digest:
            raise ConfigError(
                f"{prefix}{path} differs from its checksum ({sums}, line {lineno}): the file "
                "changed since the folder was written (for a folder of the repository, "
                f"`git checkout -- {folder}` restores it)"
            )
        checked += 1
    return checked
