"""Bad configuration input fails with one message that names the file, line or setting.

Runs ``rrl eval`` through the console-script entry point (``cli.main``) on inputs a student
could get wrong; each must exit 2 with ``rrl eval: ...`` on stderr and no traceback, before
any model is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from reasoning_core.runtime import cli
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.resume import check_same_settings
from reasoning_core.runtime.settings.config import (
    load_yaml,
    parse_overrides,
    parse_run_args,
    resolve,
    save_config,
)


def run_eval(argv, capsys) -> tuple[int, str]:
    rc = cli.main(["eval", *argv])
    return rc, capsys.readouterr().err


def test_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("eval:\n  task: arithmetic\n  eval_examples: [3\n")
    rc, err = run_eval(["--config", str(path), "--out", str(tmp_path / "r")], capsys)
    assert rc == 2
    assert err.startswith(f"rrl eval: {path}:3:")  # the line of the unclosed bracket
    assert "Traceback" not in err and "<unicode string>" not in err
    assert not (tmp_path / "r").exists()


def test_tab_indentation_names_its_line(tmp_path):
    path = tmp_path / "tab.yaml"
    path.write_text("task: arithmetic\n\tlimit: 3\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2:\d+: not valid YAML"):
        load_yaml(path)


def test_binary_file_as_config_is_named(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\xff\xfe")
    with pytest.raises(ConfigError, match=rf"^{path}: not UTF-8 text \(byte 4\)"):
        load_yaml(path)


@pytest.mark.parametrize("value", ["[3", ": x", "{a: 1", "'open"])
def test_unparsable_set_value_names_the_override(value, tmp_path, capsys):
    argv = [
        "--set",
        "model_path=x",
        "--set",
        f"eval_examples={value}",
        "--out",
        str(tmp_path / "r"),
    ]
    rc, err = run_eval(argv, capsys)
    assert rc == 2, err
    assert err.startswith("rrl eval: --set eval_examples=") and "not a valid YAML value" in err
    assert "Traceback" not in err


def test_set_values_are_yaml_typed():
    assert parse_overrides(["lr=3e-5", "stop=[</answer>]", "path=/a:b", "x=", "q=a=b"]) == {
        "lr": "3e-5",  # YAML 1.1 string; build_config reads it as a float
        "stop": ["</answer>"],
        "path": "/a:b",
        "x": "",
        "q": "a=b",  # split at the first '=' only
    }


@dataclass
class Settings:
    model_path: str
    lr: float = 1e-3
    limit: int | None = None
    stop: list[str] = field(default_factory=list)


def test_set_overrides_the_config_file_and_values_are_typed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("run:\n  model_path: m\n  lr: 0.5\n  limit: 3\n")
    args = parse_run_args(["--config", str(path), "--set", "lr=3e-5", "--out", "o"], "")
    cfg = resolve(Settings, args, "run")
    assert cfg == Settings(model_path="m", lr=3e-5, limit=3)
    assert isinstance(cfg.lr, float)


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["model_path=m", "limit=true"], "setting 'limit' must be an integer, got True"),
        (["lr=1"], "required setting 'model_path' is missing"),
    ],
)
def test_bool_for_an_integer_and_a_missing_required_setting_are_named(sets, needle):
    args = parse_run_args([a for s in sets for a in ("--set", s)], "", need_out=False)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        resolve(Settings, args, "run")


def test_resume_check_names_a_single_changed_setting(tmp_path):
    saved = save_config(Settings(model_path="m", stop=["</answer>"]), tmp_path)
    same = Settings(model_path="m", stop=["</answer>"])
    changed = Settings(model_path="m", lr=0.5, stop=["</answer>"])
    check_same_settings(saved, same, may_change=set(), what="state")
    with pytest.raises(ConfigError, match=r"^state was saved by a run with other settings: lr "):
        check_same_settings(saved, changed, may_change=set(), what="state")
    check_same_settings(saved, changed, may_change={"lr"}, what="state")  # may differ


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("eval_exampels: 3", "unknown setting(s) ['eval_exampels']"),
        ("eval_examples: three", "setting 'eval_examples' must be an integer, got 'three'"),
        ("eval_temperature: hot", "setting 'eval_temperature' must be a number"),
        ("stop: </answer>", "setting 'stop' must be a list"),
    ],
)
def test_unknown_key_and_wrong_type_name_file_and_setting(line, needle, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(f"eval:\n  model_path: x\n  {line}\n")
    rc, err = run_eval(["--config", str(path), "--out", str(tmp_path / "r")], capsys)
    assert rc == 2
    assert str(path) in err and needle in err, err


def test_empty_or_malformed_section(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("eval:\n#  limit: 3\nsft:\n  lr: 1\n")
    assert load_yaml(path, "eval") == {}  # all its settings commented out
    assert load_yaml(path, "sft") == {"lr": 1}
    path.write_text("eval: 3\n")
    with pytest.raises(ConfigError, match=rf"^{path}: section 'eval' must be a mapping"):
        load_yaml(path, "eval")


def test_out_naming_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    rc, err = run_eval(["--set", "model_path=x", "--out", str(tmp_path / "f")], capsys)
    assert rc == 2 and err.startswith(f"rrl eval: --out {tmp_path / 'f'} is a file")
