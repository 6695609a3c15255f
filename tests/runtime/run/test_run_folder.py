"""One run folder, one run: finished runs reused only when identical, foreign files and a
second writer refused, metrics put back by counting records on resume, failed state saves
cleaned up, bad input named (file and line) instead of a traceback."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from micro_world import SFT, run_trainer, sets
from project_root import ROOT

from reasoning_core.runtime import cli
from reasoning_core.runtime.commands import COMMANDS
from reasoning_core.runtime.errors import ConfigError, StateError
from reasoning_core.runtime.run import checkpoint, resume
from reasoning_core.runtime.run.metrics import MetricsWriter, read_metrics
from reasoning_core.runtime.run.ownership import (
    MARKER,
    check_run_folder,
    lock_run_folder,
    release_run_folder,
)
from reasoning_core.runtime.run.resume import save_state
from reasoning_core.runtime.settings.config import save_config
from reasoning_core.runtime.trainers import sft


@dataclasses.dataclass
class Settings:
    lr: float = 1e-4
    loss_type: str = "reinforce_with_baseline"
    num_threads: int = 1


def _finished(out: Path, command: str, cfg: Settings) -> Path:
    """A folder as a finished run of `command` with `cfg` leaves it."""
    lock_run_folder(out, command)
    save_config(cfg, out)
    (out / "done.json").write_text(json.dumps({"method": command, "step": 3}))
    release_run_folder(out)
    return out


# ----------------------------------------------------------------------------- ownership


def test_an_identical_finished_run_is_skipped_and_said(tmp_path, capsys):
    out = _finished(tmp_path / "run", "grpo", Settings())
    done = check_run_folder(out, "grpo", Settings(num_threads=4), may_change={"num_threads"})
    assert done == {"method": "grpo", "step": 3}
    assert (
        f"{out} is already complete (done.json), with the same settings" in capsys.readouterr().err
    )


def test_a_run_finished_with_other_settings_is_refused_naming_them(tmp_path):
    out = _finished(tmp_path / "run", "grpo", Settings())
    with pytest.raises(ConfigError) as err:
        check_run_folder(out, "grpo", Settings(lr=3e-5, loss_type="grpo_clip"))
    message = str(err.value)
    assert f"--out {out} holds a run finished with other settings" in message
    assert "loss_type 'reinforce_with_baseline' -> 'grpo_clip'" in message
    assert "lr 0.0001 -> 3e-05" in message


def test_a_run_finished_by_another_command_is_refused(tmp_path):
    out = _finished(tmp_path / "run", "grpo", Settings())
    with pytest.raises(ConfigError, match=r"holds a finished `rrl grpo` run; `rrl sft` does not"):
        check_run_folder(out, "sft", Settings())


def test_an_unfinished_run_of_another_command_is_refused(tmp_path):
    out = tmp_path / "run"
    lock_run_folder(out, "grpo")
    release_run_folder(out)
    with pytest.raises(ConfigError, match=r"holds an unfinished `rrl grpo` run"):
        check_run_folder(out, "sft", Settings())
    assert check_run_folder(out, "grpo", Settings()) is None  # its own command goes on


def test_files_no_run_wrote_are_refused(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.yaml").write_text("my: own notes\n")
    (out / "metrics.jsonl").write_text('{"mine": 1}\n')
    with pytest.raises(ConfigError, match="holds files that no rrl run wrote"):
        check_run_folder(out, "grpo", Settings())
    assert (out / "config.yaml").read_text() == "my: own notes\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_run_folder(empty, "grpo", Settings()) is None
    assert check_run_folder(tmp_path / "new", "grpo", Settings()) is None


def test_a_folder_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(ConfigError, match=r"--out .*run: cannot write there \(Permission denied"):
        lock_run_folder(tmp_path / "run", "grpo")


_HOLDER = """
import sys, time
from reasoning_core.runtime.run.ownership import lock_run_folder
lock_run_folder(sys.argv[1], "grpo")
print("locked", flush=True)
time.sleep(600)
"""


def test_a_second_writer_is_refused_and_a_killed_one_leaves_no_stale_lock(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError) as err:
            lock_run_folder(out, "grpo")
        assert f"being written by another rrl process (pid {holder.pid})" in str(err.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock_run_folder(out, "grpo")  # the kernel dropped the dead process's lock
    assert json.loads((out / MARKER).read_text())["pid"] == os.getpid()
    release_run_folder(out)


def test_rrl_refuses_a_finished_folder_with_other_settings_or_command(world, tmp_path, capsys):
    out = tmp_path / "sft"
    run_trainer(sft, SFT, world, out)
    before = (out / "metrics.jsonl").read_bytes()
    argv = [*sets({**SFT, "model_path": str(world)}), "--out", str(out)]
    capsys.readouterr()
    assert cli.main(["sft", *argv]) == 0  # the same run: skipped, and said
    assert "nothing to do" in capsys.readouterr().err
    assert cli.main(["sft", *argv, "--set", "lr=3e-5"]) == 2
    err = capsys.readouterr().err
    assert f"rrl sft: --out {out} holds a run finished with other settings: lr" in err
    assert cli.main(["grpo", *sets({"model_path": str(world)}), "--out", str(out)]) == 2
    assert "holds a finished `rrl sft` run; `rrl grpo` does not reuse it" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_bytes() == before


# ----------------------------------------------------------------------------- metrics on resume


def _metrics(out: Path, n: int) -> MetricsWriter:
    writer = MetricsWriter(out)
    for step in range(n):
        writer.log({"loss": float(step)}, step=step, split="train")
    return writer


def test_resume_restores_exactly_the_saved_records_and_drops_a_torn_tail(tmp_path):
    writer = _metrics(tmp_path, 5)
    saved = writer.records
    writer.log({"loss": 9.0}, step=5, split="train")
    writer._file.write('{"step": 6, "spl')  # a process killed mid-write
    writer._file.flush()
    writer.close()
    again = MetricsWriter(tmp_path)
    again.restore(saved)
    again.log({"loss": 5.0}, step=5, split="train")
    again.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4, 5]


def test_resume_stops_on_a_short_metrics_file_naming_it(tmp_path):
    writer = _metrics(tmp_path, 5)
    saved = writer.records
    writer.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "metrics.jsonl").write_text("".join(lines[:2]))  # cut by hand
    with pytest.raises(ValueError, match=r"metrics.jsonl holds 2 complete records; .* after 5"):
        MetricsWriter(tmp_path).restore(saved)


def test_resume_stops_on_a_torn_record_naming_file_and_line(tmp_path):
    writer = _metrics(tmp_path, 5)
    saved = writer.records
    writer.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2][:10] + "\n"  # torn inside the saved records
    (tmp_path / "metrics.jsonl").write_text("".join(lines))
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: not a JSON record"):
        MetricsWriter(tmp_path).restore(saved)


def test_a_state_saved_before_records_were_counted_still_resumes_by_its_offset(tmp_path):
    writer = _metrics(tmp_path, 3)
    offset = writer.offset
    writer.log({"loss": 9.0}, step=3, split="train")
    writer.close()
    again = MetricsWriter(tmp_path)
    again.truncate(offset)
    assert again.records == 3
    again.close()
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds 0 bytes; the saved training state"):
        MetricsWriter(tmp_path).truncate(offset)


def test_rrl_refuses_to_resume_onto_a_cut_metrics_file(world, tmp_path):
    """A killed SFT run whose metrics.jsonl was cut afterwards stops naming the file."""
    out = tmp_path / "run"
    cfg = {**SFT, "save_every": 1, "model_path": str(world)}
    env = dict(os.environ, RRL_EXIT_AFTER_STEP="2", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "reasoning_core.runtime.cli", "sft", *sets(cfg)]
    killed = subprocess.run(
        [*command, "--out", str(out)], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert killed.returncode == 3, killed.stderr
    (out / "metrics.jsonl").write_text("")
    env.pop("RRL_EXIT_AFTER_STEP")
    again = subprocess.run(
        [*command, "--out", str(out)], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert again.returncode == 2, again.stderr
    assert f"cannot resume from {out / 'state'}: {out / 'metrics.jsonl'} holds 0" in again.stderr
    assert "Traceback" not in again.stderr


# ----------------------------------------------------------------------------- state saves


def test_a_failed_state_save_removes_its_temporary_folder_and_keeps_the_last_state(
    tmp_path, monkeypatch
):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    save_state(tmp_path / "state", model=model, optimizer=opt, scheduler=None, counters={"s": 1})
    real_save = torch.save

    def full_disk(obj, path, *args, **kwargs):
        Path(path).write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64")

    monkeypatch.setattr(resume.torch, "save", full_disk)
    with pytest.raises(StateError) as err:
        save_state(tmp_path / "state", model=model, optimizer=opt, scheduler=None, counters={})
    assert f"saving the training state to {tmp_path / 'state'} failed" in str(err.value)
    assert "Is the disk full?" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # no state.tmp-* left
    monkeypatch.setattr(resume.torch, "save", real_save)
    fresh = torch.nn.Linear(2, 2)
    counters = resume.load_state(
        tmp_path / "state",
        model=fresh,
        optimizer=torch.optim.SGD(fresh.parameters(), lr=0.1),
        scheduler=None,
    )
    assert counters == {"s": 1}


# ----------------------------------------------------------------------------- bad input


def test_weights_damaged_at_the_same_size_are_named_by_sha256sums(tmp_path):
    from tiny_model import save_tiny_model

    folder = save_tiny_model(tmp_path / "m")
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    checkpoint.write_checksums(folder, names)
    checkpoint.check_model_folder(folder)  # intact: passes
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte changed
    weights.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as err:
        checkpoint.check_model_folder(folder)
    line = names.index("model.safetensors") + 1
    assert f"{weights} differs from its checksum ({folder / 'SHA256SUMS'}, line {line})" in str(
        err.value
    )


def test_a_non_utf8_data_file_is_named_with_its_line(tmp_path, capsys):
    from tiny_model import save_tiny_model

    folder = save_tiny_model(tmp_path / "m")
    data = tmp_path / "bad.jsonl"
    good = {"id": "a", "question": "1+1", "ground_truth": "2"}
    bad = b'{"id": "b", "question": "'
    data.write_bytes(json.dumps(good).encode() + b"\n" + bad + b'\xff", "ground_truth": "1"}\n')
    argv = ["--set", f"model_path={folder}", "--set", "task=arithmetic"]
    argv += ["--set", f"data_path={data}", "--out", str(tmp_path / "eval")]
    assert cli.main(["eval", *argv]) == 2
    err = capsys.readouterr().err
    assert f"{data}:2: not UTF-8 text (byte 0xff at column {len(bad) + 1})" in err
    assert "Traceback" not in err


def test_read_only_output_folder_is_a_message(tmp_path, monkeypatch, capsys):
    from tiny_model import save_tiny_model

    folder = save_tiny_model(tmp_path / "m")
    out = tmp_path / "locked" / "run"
    real_open = open

    def refuse(file, *args, **kwargs):
        if str(file).startswith(str(out)):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refuse)
    argv = ["--set", f"model_path={folder}", "--set", "task=arithmetic", "--out", str(out)]
    assert cli.main(["eval", *argv, "--set", "eval_examples=2"]) == 2
    err = capsys.readouterr().err
    assert f"rrl eval: --out {out}: cannot write there (Permission denied)" in err


def test_eval_settings_the_data_or_the_model_cannot_give_are_warned(tmp_path):
    from reasoning_core.runtime.evaluation.summary import eval_size_warnings

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))

    @dataclasses.dataclass
    class Eval:
        model_path: str = str(model)
        eval_split: str = "test"
        eval_examples: int | None = 512
        eval_max_tokens: int = 1024

    first, second = eval_size_warnings(Eval(), loaded=200)
    assert first == (
        "setting 'eval_examples' (512) exceeds the 200 examples of split 'test': evaluating on "
        "those 200"
    )
    assert second.startswith(
        "setting 'eval_max_tokens' (1024) reaches past the model's context of 256 tokens"
    )
    assert eval_size_warnings(Eval(eval_examples=None, eval_max_tokens=64), loaded=200) == []


# ----------------------------------------------------------------------------- help texts


def test_rrl_help_aligns_every_command_and_eval_suite_help_names_compare(capsys):
    assert cli.main(["--help"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert len(rows) == len(COMMANDS)
    starts = {len(line) - len(line[2:].split(maxsplit=1)[1]) for line in rows}
    assert len(starts) == 1, rows  # every help text starts in the same column
    with pytest.raises(SystemExit):
        cli.main(["eval-suite", "--help"])
    assert "--compare published" in capsys.readouterr().out


# ----------------------------------------------------------------------------- a full disk


class _FullDisk:
    """A metrics file on a full disk: every write fails as the OS fails it."""

    def __init__(self, file):
        self.file = file

    def write(self, text):
        import errno

        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):  # the rest (truncate, seek, close) as the file does it
        return getattr(self.file, name)


def test_a_full_disk_at_the_first_metrics_line_is_a_message(world, tmp_path, monkeypatch, capsys):
    opened = MetricsWriter.__init__

    def on_a_full_disk(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        self._file = _FullDisk(self._file)

    monkeypatch.setattr(MetricsWriter, "__init__", on_a_full_disk)
    out = tmp_path / "sft"
    assert cli.main(["sft", *sets({**SFT, "model_path": str(world)}), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"rrl sft: {out / 'metrics.jsonl'}: a metrics line could not be written (No space" in err
    assert "Traceback" not in err
    assert not (out / "done.json").exists()


def test_a_full_disk_at_the_final_checkpoint_is_a_message_and_cleaned_up(
    world, tmp_path, monkeypatch, capsys
):
    import errno

    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    def full_disk(self, path, **kwargs):  # as safetensors stops on a full disk
        (Path(path) / "model.safetensors").write_bytes(b"\0" * 100)
        raise SafetensorError(f"Error while serializing: {OSError(errno.ENOSPC, 'No space')}")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full_disk)
    out = tmp_path / "sft"
    assert cli.main(["sft", *sets({**SFT, "model_path": str(world)}), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    checkpoint = out / "checkpoint"
    assert f"rrl sft: {checkpoint}: the checkpoint could not be written (" in err
    assert f"the partial copy {checkpoint}.tmp-{os.getpid()} was removed" in err
    assert "Traceback" not in err
    assert not list(out.glob("checkpoint*")) and not (out / "done.json").exists()


def test_a_reserved_line_keeps_its_place_and_holds_the_lines_after_it(tmp_path):
    """A line logged into a place kept earlier (a rollout worker's evaluation) is written
    there: the lines logged after the place wait until it is filled, so the file keeps the
    order the lines were reserved or logged in; no state is saved while lines wait."""
    from tiny_model import save_tiny_model

    from reasoning_core.runtime.run.folder import RunContext

    cfg = sft.SFTConfig(model_path=str(save_tiny_model(tmp_path / "m")), task="arithmetic")
    run = RunContext(cfg, tmp_path / "run", "sft")
    run.metrics.restore(0)
    run.log({"loss": 1.0}, step=1, split="train")
    first, second = run.reserve(), run.reserve()
    run.log({"loss": 2.0}, step=2, split="train")
    assert run.reserved == 2
    with pytest.raises(RuntimeError, match="wait for a reserved place"):
        run.save_state(torch.nn.Linear(1, 1), None, None, opt_step=2)
    run.log({"accuracy": 0.5}, step=2, split="eval", slot=second)  # filled out of order
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [1]
    record = run.log({"accuracy": 0.25}, step=1, split="eval", slot=first)
    assert record["accuracy"] == 0.25 and run.reserved == 0
    run.log({"loss": 3.0}, step=3, split="train")
    lines = [(r["step"], r["split"]) for r in read_metrics(tmp_path / "run")]
    assert lines == [(1, "train"), (1, "eval"), (2, "eval"), (2, "train"), (3, "train")]
    run.metrics.close()
