"""SFT data files (``train_data``): read back what ``envs.sft_data`` writes, and refuse a bad
file with one message naming the file, the line and the field (``rrl sft`` exits 2 with it,
before loading the model)."""

from __future__ import annotations

import json

import pytest
from tiny_model import save_tiny_model

from envs import DataError
from envs.sft_data import read_examples, write_jsonl
from reasoning_core.runtime import cli

GOOD = {"prompt": "Q: 1+1? Assistant: <think>", "response": " 2 </think> <answer> 2 </answer>"}
GOOD = {**GOOD, "ground_truth": "2"}


def test_read_examples_returns_what_write_jsonl_wrote(tmp_path):
    examples = [GOOD, {**GOOD, "ground_truth": "3", "source": "extra fields stay"}]
    write_jsonl(examples, tmp_path / "sft.jsonl")
    assert read_examples(tmp_path / "sft.jsonl") == examples


BAD_FILES = {
    "truncated line": (
        json.dumps(GOOD) + '\n{"prompt": "a", "response": ',
        r":2: invalid JSON",
    ),
    "missing field": (
        json.dumps(GOOD) + "\n\n" + json.dumps({"prompt": "a", "ground_truth": "c"}),
        r":3: missing field 'response'",
    ),
    "not an object": (json.dumps(GOOD) + "\n[1, 2]\n", r":2: record is not a JSON object"),
    "wrong type": (
        json.dumps({**GOOD, "ground_truth": 2}),
        r":1: field 'ground_truth' must be str, got int",
    ),
    "empty response": (json.dumps({**GOOD, "response": "  "}), r":1: field 'response' is empty"),
    "empty file": ("", r": empty file \(no records\)"),
    "blank lines only": ("\n \n", r": empty file \(no records\)"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_record_names_file_line_and_field(name, tmp_path):
    text, where = BAD_FILES[name]
    path = tmp_path / "sft.jsonl"
    path.write_text(text)
    with pytest.raises(DataError, match=f"^{path}{where}"):
        read_examples(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("m") / "model")


@pytest.mark.parametrize("name", ["truncated line", "not an object", "empty file"])
def test_rrl_sft_exits_2_naming_the_bad_line(name, model_dir, tmp_path, capsys):
    text, where = BAD_FILES[name]
    data = tmp_path / "sft.jsonl"
    data.write_text(text)
    out = tmp_path / "run"
    argv = ["sft", "--set", f"model_path={model_dir}", "--set", "task=arithmetic"]
    rc = cli.main([*argv, "--set", f"train_data={data}", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    # The tiny model's folder has no SHA256SUMS, so the first command of the module may warn
    # once that its weights cannot be verified; the message is the first line after that.
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert lines[0].startswith(f"rrl sft: setting 'train_data': {data}{where.replace(chr(92), '')}")
    assert "Traceback" not in err
    assert not (out / "metrics.jsonl").exists()  # failed before the run folder was opened


def test_sft_data_command_names_a_bad_source_file(tmp_path, capsys):
    from envs.sft_data import main

    source = tmp_path / "gsm8k.jsonl"
    source.write_text('{"question": "1+1?"}\n')
    for extra, needle in [
        (["--path", str(source)], f"{source}:1: missing field"),
        (["--path", str(tmp_path / "nope.jsonl")], "nope.jsonl: file not found"),
        (["--split", "dev"], "has no split 'dev'"),
    ]:
        assert main(["--task", "gsm8k", *extra, "--out", str(tmp_path / "o.jsonl")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m envs.sft_data: ") and needle in err, err
    assert not (tmp_path / "o.jsonl").exists()


def test_sft_data_command_drops_wrong_traces_unless_told_not_to(tmp_path, capsys):
    from envs.arithmetic import TASK
    from envs.sft_data import main

    n_correct = sum(ex["correct"] for ex in TASK.sft_pool(60))  # the first 60 traces
    assert 0 < n_correct < 60
    for flags, expected in [([], n_correct), (["--no-filter"], 60)]:
        out = tmp_path / "o.jsonl"
        assert main(["--task", "arithmetic", "--limit", "60", "--out", str(out), *flags]) == 0
        assert len(read_examples(out)) == expected


def test_examples_need_an_r1_template():
    from envs import Trace
    from envs.sft_data import examples_from_traces

    with pytest.raises(ValueError, match="<think>"):
        examples_from_traces([Trace("1+1?", "1 + 1 = 2.", "2", "2")], "question_only")


def test_filter_grades_with_the_given_reward_fn():
    """Countdown accepts a newline between </think> and <answer>; r1_zero does not."""
    from envs import countdown_reward_fn
    from envs.sft_data import filter_correct

    gt = json.dumps({"nums": [2, 3, 5], "target": 10})
    examples = [
        {
            "prompt": "p",
            "response": " 2 + 3 = 5 </think>\n<answer> 2 + 3 + 5 </answer>",
            "ground_truth": gt,
        },
        {
            "prompt": "p",
            "response": " 2 * 3 = 6 </think>\n<answer> 2 * 3 + 5 </answer>",
            "ground_truth": gt,
        },
    ]
    kept, stats = filter_correct(examples, countdown_reward_fn)
    assert kept == examples[:1]
    assert stats["total"] == 2 and stats["kept"] == 1
