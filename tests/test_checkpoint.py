"""Model folders and resumable state on disk: what a killed or damaged save leaves behind
must be refused with a message naming the file, never loaded as if it were whole."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from reasoning_core.runtime.checkpoint import check_model_folder
from reasoning_core.runtime.config import ConfigError


def _sharded_folder(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (folder / "tokenizer.json").write_text("{}")
    shards = {"a.safetensors": {"w": torch.ones(4, 4)}, "b.safetensors": {"v": torch.ones(8)}}
    for name, tensors in shards.items():
        save_file(tensors, folder / name)
    index = {"weight_map": {"w": "a.safetensors", "v": "b.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_sharded_weights_are_checked_shard_by_shard(tmp_path):
    folder = _sharded_folder(tmp_path)
    check_model_folder(folder)  # complete: no error
    shard = folder / "b.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1])
    with pytest.raises(ConfigError, match=r"b\.safetensors: truncated \(\d+ bytes, its header"):
        check_model_folder(folder)
    shard.unlink()
    with pytest.raises(ConfigError, match=r"b\.safetensors: shard named in .* is missing"):
        check_model_folder(folder)


def test_garbage_weights_and_missing_folder_are_named(tmp_path):
    folder = _sharded_folder(tmp_path)
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    with pytest.raises(ConfigError, match=r"model\.safetensors: not a complete safetensors"):
        check_model_folder(folder)
    with pytest.raises(ConfigError, match=r"^setting 'base': folder .* does not exist"):
        check_model_folder(tmp_path / "nope", setting="base")


def test_trainer_refuses_a_model_folder_without_tokenizer(tmp_path, capsys):
    """Without this check AutoTokenizer builds an empty tokenizer and the run fails later
    with 'prompt 0 is empty after tokenization'."""
    from tiny_model import save_tiny_model

    from reasoning_core.runtime import cli

    folder = save_tiny_model(tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    capsys.readouterr()  # the save's progress bar
    argv = ["sft", "--set", f"model_path={folder}", "--set", "task=arithmetic"]
    assert cli.main([*argv, "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.startswith(
        f"rrl sft: setting 'model_path': {folder}: no tokenizer"
    )
    assert not (tmp_path / "run").exists()
