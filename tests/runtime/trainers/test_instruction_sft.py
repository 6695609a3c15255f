"""`rrl instruction-sft`: cross-entropy on packed chunks, the exact batch mean under
accumulation, validation loss, resume after a kill, the saved model and tokenizer, settings."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from micro_world import sets
from project_root import ROOT
from tiny_model import save_tiny_model

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.metrics import read_metrics, without_time
from reasoning_core.runtime.trainers import instruction_sft

BASE = {
    "device": "cpu",
    "seq_length": 16,
    "batch_size": 4,
    "gradient_accumulation_steps": 2,
    "progress": False,
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def write_pairs(path, pairs):
    path.write_text("".join(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in pairs))
    return str(path)


# One document over and over: the stream is periodic, so the model can learn every next token
# (the only uncertainty is where a chunk starts), and the training loss must fall far.
REPEATED = [("Say the word.", "x is x")] * 8
OTHERS = [(f"What is {i} + 3?", f"{i} + 3 = {i + 3}") for i in range(12)]


def run(model, tmp_path, name="run", **settings):
    out = tmp_path / name
    cfg = {**BASE, **settings, "model_path": str(model)}
    assert instruction_sft.main([*sets(cfg), "--out", str(out)]) == 0
    return out, read_metrics(out)


def train_steps(records):
    return [r for r in records if r["split"] == "train" and "grad_norm" in r]


def test_loss_falls_on_a_periodic_stream_and_validation_follows(model, tmp_path):
    data = write_pairs(tmp_path / "train.jsonl", REPEATED)
    val = write_pairs(tmp_path / "val.jsonl", REPEATED[:3])
    out, records = run(
        model, tmp_path, train_data=data, val_data=val, epochs=4, lr=3e-3,
        lr_scheduler="constant", warmup_ratio=None, val_every=5,
    )  # fmt: skip
    steps = train_steps(records)
    done = json.loads((out / "done.json").read_text())
    chunks = done["train_chunks"]
    assert chunks == done["train_tokens"] // 16 or chunks == (done["train_tokens"] - 1) // 16
    assert len(steps) == done["total_steps"] == 4 * math.ceil(chunks / 4) == done["step"]
    first, last = steps[0]["loss"], steps[-1]["loss"]
    assert first > 4.0  # about ln(320): the random model knows nothing
    assert last < 0.5 * first, (first, last)
    vals = [r["val/loss"] for r in records if "val/loss" in r and r["split"] == "train"]
    assert len(vals) >= 3 and vals[-1] < 0.5 * vals[0]
    assert done["val/loss"] == vals[-1] and done["method"] == "instruction-sft"
    assert done["dtype"] == "float32" and done["attn_implementation"] == "sdpa"


def test_accumulation_gives_the_batch_mean_exactly(model, tmp_path):
    """One step on 6 chunks (a full batch of 4, then a partial one of 2) with micro batches of
    1 and of 4 rows: the same update to float tolerance."""
    from safetensors.torch import load_file

    data = write_pairs(tmp_path / "train.jsonl", OTHERS)
    common = dict(train_data=data, shuffle=False, lr=1e-3, warmup_ratio=None, max_steps=2)
    a, _ = run(model, tmp_path, "a", **common, gradient_accumulation_steps=4)
    b, _ = run(model, tmp_path, "b", **common, gradient_accumulation_steps=1)
    want = load_file(a / "checkpoint" / "model.safetensors")
    got = load_file(b / "checkpoint" / "model.safetensors")
    assert all(torch.allclose(want[k], got[k], atol=1e-6) for k in want)
    start = load_file(model / "model.safetensors")
    assert any(not torch.equal(start[k], got[k]) for k in start)  # it did train


def test_warmup_is_three_percent_of_the_steps_then_cosine(model, tmp_path):
    data = write_pairs(tmp_path / "train.jsonl", OTHERS * 6)
    out, records = run(
        model, tmp_path, train_data=data, batch_size=2, gradient_accumulation_steps=1
    )
    done = json.loads((out / "done.json").read_text())
    total = done["total_steps"]
    assert done["warmup_steps"] == math.ceil(0.03 * total) and total > 34
    lrs = [r["lr"] for r in train_steps(records)]
    warm = done["warmup_steps"]
    assert lrs[:warm] == pytest.approx([2e-5 * (i + 1) / warm for i in range(warm)])
    assert lrs[warm] == pytest.approx(2e-5) and lrs[-1] < 2e-5 * 0.01


def test_checkpoint_is_a_loadable_model_and_tokenizer(model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envs.packed_data import PackedSFTDataset

    data = write_pairs(tmp_path / "train.jsonl", OTHERS)
    out, _ = run(model, tmp_path, train_data=data, val_data=data, max_steps=2)
    loaded = AutoModelForCausalLM.from_pretrained(out / "checkpoint")
    tokenizer = AutoTokenizer.from_pretrained(out / "checkpoint")
    assert tokenizer.eos_token == "<|endoftext|>"
    val = PackedSFTDataset(tokenizer, data, 16, shuffle=False)
    again = instruction_sft.validation_loss(loaded, val, len(val), 2)
    done = json.loads((out / "done.json").read_text())
    assert again == pytest.approx(done["val/loss"], rel=1e-5)


def _subprocess(cfg, out, exit_after):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if exit_after is not None:
        env["RRL_EXIT_AFTER_STEP"] = str(exit_after)
    cmd = [sys.executable, "-m", "reasoning_core.runtime.cli", "instruction-sft", *sets(cfg)]
    return subprocess.run(
        [*cmd, "--out", str(out)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_killed_run_resumes_to_the_same_metrics_and_weights(model, tmp_path):
    from safetensors.torch import load_file

    data = write_pairs(tmp_path / "train.jsonl", OTHERS * 2)
    cfg = {**BASE, "model_path": str(model), "train_data": data, "val_data": data,
           "lr": 1e-3, "save_every": 2, "val_every": 3, "epochs": 2}  # fmt: skip
    reference = tmp_path / "ref"
    assert instruction_sft.main([*sets(cfg), "--out", str(reference)]) == 0
    steps = [r["step"] for r in train_steps(read_metrics(reference))]
    kill_at = 5  # after the state of step 4 was saved, one step it must redo
    assert kill_at < max(steps)
    out = tmp_path / "killed"
    first = _subprocess(cfg, out, kill_at)
    assert first.returncode == 3, first.stderr[-2000:]
    second = _subprocess(cfg, out, None)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resumed from" in second.stderr
    assert without_time(read_metrics(out)) == without_time(read_metrics(reference))
    want = load_file(reference / "checkpoint" / "model.safetensors")
    got = load_file(out / "checkpoint" / "model.safetensors")
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_max_wall_seconds_stops_early_with_a_checkpoint(model, tmp_path):
    data = write_pairs(tmp_path / "train.jsonl", OTHERS * 4)
    out, records = run(model, tmp_path, train_data=data, max_wall_seconds=1e-9)
    done = json.loads((out / "done.json").read_text())
    assert done["stopped_on_budget"] and done["step"] == 1 < done["total_steps"]
    assert done["iterations_done"] == 1 and (out / "checkpoint" / "config.json").is_file()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"train_data": ""}, "train_data"),
        ({"train_data": "missing.jsonl"}, "train_data"),
        ({"batch_size": 6, "gradient_accumulation_steps": 4}, "batch_size"),
        ({"warmup_ratio": 1.5}, "warmup_ratio"),
        ({"seq_length": 0}, "seq_length"),
        ({"val_chunks": 0}, "val_chunks"),
    ],
)
def test_bad_settings_name_the_setting(model, tmp_path, change, message):
    data = write_pairs(tmp_path / "train.jsonl", OTHERS)
    cfg = instruction_sft.InstructionSFTConfig(model_path=str(model), train_data=data)
    for key, value in change.items():
        setattr(cfg, key, value)
    with pytest.raises(ConfigError, match=message):
        cfg.validate()


def test_data_too_short_for_one_chunk_is_refused(model, tmp_path):
    data = write_pairs(tmp_path / "train.jsonl", [("a", "b")])
    cfg = {**BASE, "model_path": str(model), "train_data": data, "seq_length": 500}
    assert instruction_sft.main([*sets(cfg), "--out", str(tmp_path / "r")]) == 2


def test_help_lists_the_settings(capsys):
    with pytest.raises(SystemExit):
        instruction_sft.main(["--help"])
    text = capsys.readouterr().out
    for name in ("seq_length", "warmup_ratio", "val_data", "gradient_accumulation_steps"):
        assert f"  {name}:" in text
