"""Model folders and resumable state on disk: what a killed or damaged save leaves behind
must be refused with a message naming the file, never loaded as if it were whole."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import save_file

from reasoning_core.runtime.errors import ConfigError, StateError
from reasoning_core.runtime.run.checkpoint import check_model_folder
from reasoning_core.runtime.run.resume import STATE_FILE, find_state, load_state, save_state


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


# ---- resumable state ----------------------------------------------------------------------


def _objects():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)


def _save(path, step):
    model, opt, sched = _objects()
    save_state(path, model=model, optimizer=opt, scheduler=sched, counters={"step": step})


def _load(path):
    model, opt, sched = _objects()
    return load_state(path, model=model, optimizer=opt, scheduler=sched, restore_rng=False)


def test_unreadable_state_is_refused_naming_the_file(tmp_path):
    state = tmp_path / "state"
    _save(state, 1)
    pt = state / STATE_FILE
    pt.write_bytes(pt.read_bytes()[:500])  # damaged after it was written
    with pytest.raises(
        StateError, match=rf"^{pt}: unreadable .*delete {state} to start this run over$"
    ):
        _load(state)


def test_unreadable_state_falls_back_to_the_previous_complete_one(tmp_path, capsys):
    state = tmp_path / "state"
    _save(state, 1)
    shutil.copytree(state, tmp_path / "keep")
    _save(state, 2)
    (tmp_path / "keep").rename(tmp_path / "state.old")  # as between the two renames of a save
    (state / STATE_FILE).write_bytes(b"")
    assert _load(state) == {"step": 1}
    assert f"{state / STATE_FILE}: unreadable" in capsys.readouterr().err


def test_a_save_killed_midway_leaves_the_last_state_and_its_debris_is_removed(tmp_path):
    state = tmp_path / "state"
    _save(state, 1)
    # What a process killed inside torch.save leaves: a partial file in its own temp folder.
    debris = tmp_path / "state.tmp-999999999"
    debris.mkdir()
    (debris / STATE_FILE).write_bytes(b"PK\x03\x04 partial")
    assert find_state(state) == state and _load(state) == {"step": 1}
    # ...while the temp folder of a process still running (another save) is left alone
    live = tmp_path / f"state.tmp-{os.getppid()}"
    live.mkdir()
    _save(state, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", live.name]
    assert _load(state) == {"step": 2}


def _save_killed_at_its_last_rename(state: Path, step: int, monkeypatch) -> None:
    """Save ``step``, failing where the new state would be renamed into place."""
    real_rename = Path.rename

    def rename(self, target):
        if ".tmp-" in self.name:
            raise OSError("killed here")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="killed here"):
        _save(state, step)
    monkeypatch.undo()


def test_a_save_failing_after_a_resume_from_old_keeps_a_complete_state(tmp_path, monkeypatch):
    """Resumed from state.old (a process died between the two renames), the next save must
    not delete state.old before its replacement is in place."""
    state = tmp_path / "state"
    _save(state, 1)
    state.rename(tmp_path / "state.old")
    _save_killed_at_its_last_rename(state, 2, monkeypatch)
    assert _load(state) == {"step": 1}


def test_a_save_failing_at_its_last_rename_keeps_the_previous_state(tmp_path, monkeypatch):
    """Killed between moving the old state aside and moving the new one in, a save leaves the
    old state as state.old, complete, for the next run to resume from."""
    state = tmp_path / "state"
    _save(state, 1)
    _save_killed_at_its_last_rename(state, 2, monkeypatch)
    assert find_state(state) == tmp_path / "state.old"
    assert _load(state) == {"step": 1}


def test_state_round_trip_restores_model_optimizer_scheduler_and_rng(tmp_path):
    """What a resumed run continues from: the same weights, Adam moments, learning-rate
    schedule position and random streams as at the save."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for _ in range(3):
        model(torch.randn(4, 3)).square().sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    save_state(tmp_path / "state", model=model, optimizer=opt, scheduler=sched, counters={})
    draws = (torch.rand(3), np.random.rand(), random.random())

    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    fresh_sched = torch.optim.lr_scheduler.LambdaLR(fresh_opt, lambda s: 1.0 / (s + 1))
    load_state(tmp_path / "state", model=fresh, optimizer=fresh_opt, scheduler=fresh_sched)
    assert (torch.rand(3).tolist(), np.random.rand(), random.random()) == (
        draws[0].tolist(),
        draws[1],
        draws[2],
    )
    torch.testing.assert_close(fresh.state_dict(), model.state_dict())
    torch.testing.assert_close(fresh_opt.state_dict()["state"], opt.state_dict()["state"])
    assert fresh_sched.last_epoch == 3
    assert fresh_opt.param_groups[0]["lr"] == pytest.approx(0.1 / 4)


def test_rrl_sft_refuses_a_damaged_state_with_one_message(tmp_path, capsys):
    from tiny_model import save_tiny_model

    from reasoning_core.runtime import cli

    folder = save_tiny_model(tmp_path / "m")
    out = tmp_path / "run"
    (out / "state").mkdir(parents=True)
    (out / "state" / STATE_FILE).write_bytes(b"PK\x03\x04 not a whole zip")
    capsys.readouterr()
    settings = {"model_path": folder, "task": "arithmetic", "sft_pool_size": 8, "batch_size": 4}
    settings |= {"gradient_accumulation_steps": 2, "progress": False}
    argv = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    assert cli.main(["sft", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"rrl sft: {out / 'state' / STATE_FILE}: unreadable" in err
    assert "Traceback" not in err
    assert not (out / "done.json").exists()


def test_resume_refuses_a_state_saved_under_other_settings(tmp_path):
    """A killed run restarted with changed settings (by hand, or by Snakemake after the
    method file changed) must not continue the old state under the new config.yaml: the
    steps before and after would silently come from two different experiments."""
    from tiny_model import save_tiny_model

    from reasoning_core.runtime.run.folder import RunContext
    from reasoning_core.runtime.trainers.sft import SFTConfig

    folder = save_tiny_model(tmp_path / "m")
    cfg = SFTConfig(model_path=str(folder), task="arithmetic", batch_size=8, lr=1e-3)
    out = tmp_path / "run"
    run = RunContext(cfg, out, "sft")
    model, opt, sched = _objects()
    run.save_state(model, opt, sched, opt_step=2)
    run.metrics.close()

    # Placement settings may change on a resume; they do not change what is computed.
    moved = SFTConfig(**{**vars(cfg), "device": "cpu", "num_threads": 2, "progress": False})
    RunContext(moved, out, "sft").metrics.close()

    changed = SFTConfig(**{**vars(cfg), "batch_size": 4, "lr": 3e-3})
    with pytest.raises(ConfigError) as info:
        RunContext(changed, out, "sft")
    message = str(info.value)
    assert message.startswith(f"{out / 'state'} was saved by a run with other settings: ")
    assert "batch_size 8 -> 4" in message and "lr 0.001 -> 0.003" in message
    assert "use another --out" in message
    # Nothing was overwritten: the old settings still describe the saved state.
    assert yaml.safe_load((out / "config.yaml").read_text())["batch_size"] == 8

    # A setting the saved config.yaml lacks (written before the setting existed) is no change.
    saved = yaml.safe_load((out / "config.yaml").read_text())
    del saved["normalize_constant"]
    (out / "config.yaml").write_text(yaml.safe_dump(saved))
    RunContext(moved, out, "sft").metrics.close()


def test_checksums_name_the_changed_or_missing_file_and_its_line(tmp_path):
    from reasoning_core.runtime.run.checkpoint import verify_checksums, write_checksums

    (tmp_path / "a.bin").write_bytes(b"weights")
    (tmp_path / "b.json").write_text("{}")
    sums = write_checksums(tmp_path, ["b.json", "a.bin"])
    assert sums.read_text().splitlines()[0].endswith("  a.bin")  # sha256sum's format, sorted
    assert verify_checksums(tmp_path) == 2
    assert verify_checksums(tmp_path / "nothing-here") == 0  # no SHA256SUMS: nothing to check

    (tmp_path / "a.bin").write_bytes(b"version https://git-lfs.github.com/spec/v1\n")
    with pytest.raises(ConfigError, match=r"^setting 'model_path': .*a\.bin differs .*line 1\)"):
        verify_checksums(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"weights")
    (tmp_path / "b.json").unlink()
    with pytest.raises(ConfigError, match=r"b\.json is missing .*line 2 lists it"):
        verify_checksums(tmp_path, setting="model_path")
    sums.write_text("not a checksum line\n")
    with pytest.raises(ConfigError, match=r"SHA256SUMS, line 1: not 'SHA256  NAME'"):
        verify_checksums(tmp_path)


# ----------------------------------------------------------------------------- checksums


def _tiny_checkpoint(tmp_path):
    from tiny_model import build_model, build_tokenizer

    from reasoning_core.runtime.run.checkpoint import save_checkpoint

    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer))
    return model, tokenizer, save_checkpoint(model, tokenizer, tmp_path / "checkpoint")


def test_a_checkpoint_carries_its_checksums_and_damaged_weights_are_named(tmp_path, capsys):
    from reasoning_core.runtime.run.checkpoint import CHECKSUMS, verify_checksums

    *_, folder = _tiny_checkpoint(tmp_path)
    files = sorted(p.name for p in folder.iterdir())
    assert CHECKSUMS in files and "model.safetensors" in files
    assert verify_checksums(folder) == len(files) - 1  # every file but SHA256SUMS itself
    check_model_folder(folder)
    assert "cannot be verified" not in capsys.readouterr().err
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # one byte of a tensor: the header still parses, the size is the same
    weights.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"model\.safetensors differs from its checksum"):
        check_model_folder(folder)


def test_a_folder_without_checksums_loads_with_one_warning(tmp_path, capsys):
    from tiny_model import save_tiny_model

    folder = save_tiny_model(tmp_path / "m")
    check_model_folder(folder)
    check_model_folder(folder)
    err = capsys.readouterr().err
    assert err.count("has no SHA256SUMS, so its weights cannot be verified") == 1, err
    assert f"warning: setting 'model_path': {folder}" in err


def test_a_full_disk_at_the_checkpoint_is_a_message_and_leaves_no_partial_copy(
    tmp_path, monkeypatch
):
    import errno

    from safetensors import SafetensorError

    from reasoning_core.runtime.run.checkpoint import save_checkpoint

    model, tokenizer, folder = _tiny_checkpoint(tmp_path)
    before = (folder / "model.safetensors").read_bytes()

    def full_disk(self, path, **kwargs):  # as safetensors stops on a full disk
        (Path(path) / "model.safetensors").write_bytes(b"\0" * 100)
        raise SafetensorError(f"Error while serializing: {OSError(errno.ENOSPC, 'No space')}")

    monkeypatch.setattr(type(model), "save_pretrained", full_disk)
    with pytest.raises(StateError) as err:
        save_checkpoint(model, tokenizer, folder)
    message = str(err.value)
    assert message.startswith(f"{folder}: the checkpoint could not be written (")
    assert "No space" in message
    assert f"the partial copy {folder}.tmp-{os.getpid()} was removed" in message
    assert not list(tmp_path.glob("checkpoint.tmp-*"))
    assert (folder / "model.safetensors").read_bytes() == before  # the last one is kept

    def no_space(self, path, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(type(model), "save_pretrained", no_space)
    with pytest.raises(StateError, match=r"could not be written \(No space left on device\)"):
        save_checkpoint(model, tokenizer, tmp_path / "other")
    assert not list(tmp_path.glob("other.tmp-*"))
