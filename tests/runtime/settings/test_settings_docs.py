"""Every setting of every command has a meaning, ``rrl <command> --help`` prints it, and
docs/configuration.md is what ``rrl docs`` writes from the same code."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from dataclasses import dataclass, field

import pytest
from project_root import ROOT

from reasoning_core.runtime import cli
from reasoning_core.runtime.commands import COMMANDS
from reasoning_core.runtime.settings.docs import (
    COMMAND_CONFIGS,
    configuration_markdown,
    load_config_class,
    main,
    settings_of,
    undocumented,
)


@dataclass
class _Base:
    alpha: int = 1
    """Alpha's meaning."""
    beta: list[float] = field(default_factory=lambda: [0.5])
    """Beta's meaning,
    on two lines."""
    gamma: str | None = None
    # a comment is no meaning


@dataclass
class _Child(_Base):
    alpha: int = 2  # redeclared without a docstring: the base's meaning stays
    beta: list[float] = field(default_factory=list)
    """Beta, the child's own meaning."""
    delta: bool = True
    """Delta's meaning."""


def test_attribute_docstrings_are_read_through_the_base_classes():
    got = {s.name: s for s in settings_of(_Child)}
    assert list(got) == ["alpha", "beta", "gamma", "delta"]
    assert (got["alpha"].default, got["alpha"].meaning) == ("2", "Alpha's meaning.")
    assert got["alpha"].defined_in == "_Base"
    assert got["beta"].meaning == "Beta, the child's own meaning."
    assert got["beta"].default == "[]"
    assert settings_of(_Base)[1].meaning == "Beta's meaning, on two lines."
    assert got["gamma"].type == "str | None"
    assert (got["gamma"].default, got["gamma"].meaning) == ("null", "")
    assert (got["delta"].default, got["delta"].type) == ("true", "bool")


def test_every_setting_of_every_command_has_a_meaning():
    assert undocumented() == []
    for command in COMMAND_CONFIGS:
        cls = load_config_class(command)
        assert [s.name for s in settings_of(cls)] == [f.name for f in dataclasses.fields(cls)]


def _help(command: str) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    return stdout.getvalue()


@pytest.mark.parametrize("command", list(COMMAND_CONFIGS))
def test_help_lists_every_setting_with_type_default_and_meaning(command):
    text = _help(command)
    assert text.startswith(f"usage: rrl {command} ")
    flat = " ".join(text.split())
    for s in settings_of(load_config_class(command)):
        head = f"{s.name}: {s.type}" + (f" = {s.default}" if s.default else " (required)")
        assert f"\n  {head}\n" in text, head
        assert " ".join(s.meaning.split()) in flat, s.name


def test_every_command_that_takes_settings_is_documented():
    """A command whose --help offers --set reads a settings dataclass: it must be listed in
    COMMAND_CONFIGS, or its settings reach neither --help nor docs/configuration.md."""
    for command in COMMANDS:
        if command in COMMAND_CONFIGS:
            continue
        assert "--set" not in _help(command), f"add rrl {command}'s dataclass to COMMAND_CONFIGS"


def test_committed_configuration_md_is_what_the_code_writes(tmp_path):
    committed = (ROOT / "docs/configuration.md").read_text(encoding="utf-8")
    assert committed == configuration_markdown(), (
        "docs/configuration.md is out of date: run rrl docs --out docs/configuration.md"
    )
    assert main(["--out", str(ROOT / "docs/configuration.md"), "--check"]) == 0
    stale = tmp_path / "configuration.md"
    stale.write_text(committed.replace("Peak learning rate", "Learning rate"))
    assert main(["--out", str(stale), "--check"]) == 1
