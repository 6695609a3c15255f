"""For every command of the registry and every one of its settings, a bad value is either taken
as given or refused at start by a ConfigError that names the setting: never a traceback, never
a value turned into something else.

Hypothesis draws a setting of the command and a bad value for its type: NaN, infinity,
a negative number, zero, a huge number, or a value of the wrong type. This exercises what runs
at start, before any model loads (``build_config`` with the class's ``validate()``, as
``resolve_command`` calls it), on settings that otherwise pass: the micro world's model folder
and the arithmetic task.

What no setting documents (none takes NaN, infinity or a negative number, and a wrong type is
never coerced) must be refused. Zero and huge values are each setting's own matter (``eval_every:
0`` means only at the start and the end; 10**18 GRPO steps is a long run): taken as given, or
refused naming the setting. A count of training questions larger than the split is refused;
an ``eval_examples`` larger than the split is documented as all of them.
"""

from __future__ import annotations

import math
import re
import types
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from micro_world import write_addition_pairs

from reasoning_core.runtime.commands import COMMANDS
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.settings.config import build_config
from reasoning_core.runtime.settings.docs import COMMAND_CONFIGS, load_config_class, settings_of

# Counts of examples to take from the data: above what it holds, refused (command, setting).
DATA_COUNTS = {
    *((command, "train_examples") for command in ("ei", "grpo", "dpo")),
    ("supplement-generate", "eval_examples"),
}
NON_FINITE = (math.nan, math.inf, -math.inf)
HUGE_INT = 10**18
HUGE_FLOAT = 1e300


def base_values(command: str, world: Path, files: Path) -> dict[str, typing.Any]:
    """Settings under which ``command`` validates: a model folder, the arithmetic task, and the
    files the command needs."""
    arithmetic = {"model_path": str(world), "task": "arithmetic"}
    jsonl = str(files / "pairs.jsonl")
    per_command = {
        "tiny-world": {},
        "eval": arithmetic,
        "eval-suite": {"model_path": str(world)},
        "sft": arithmetic,
        "instruction-sft": {**arithmetic, "train_data": jsonl, "val_data": jsonl},
        "ei": arithmetic,
        "grpo": arithmetic,
        "dpo": arithmetic,
        "supplement-generate": {"model_path": str(world)},
        "safety-judge": {"judge_path": str(world), "input_path": jsonl},
    }
    return per_command[command]


def is_optional(tp: typing.Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(tp)
    )


def plain(tp: typing.Any) -> typing.Any:
    """``int | None`` -> ``int``."""
    if is_optional(tp):
        [inner] = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return tp


def bad_values(tp: typing.Any) -> list[tuple[str, typing.Any]]:
    """``(kind, value)`` bad for a setting of type ``tp``: the numbers no setting means and
    the borderline ones for a number, a wrong type for every setting."""
    tp = plain(tp)
    origin = typing.get_origin(tp)
    if tp is float:
        numbers = [("non-finite", v) for v in NON_FINITE] + [("negative", -1.0)]
        return [*numbers, ("zero", 0.0), ("huge", HUGE_FLOAT), ("wrong type", "fast")]
    if tp is int:
        return [
            ("negative", -1),
            ("zero", 0),
            ("huge", HUGE_INT),
            ("beyond 64 bits", 2**64),
            ("wrong type", 1.5),
            ("wrong type", True),
        ]
    if tp is bool:
        return [("wrong type", 3), ("wrong type", "maybe")]
    if origin is list:
        values = [("wrong type", "x"), ("wrong type", 3)]
        if typing.get_args(tp) == (float,):
            values += [("non-finite", [0.9, v]) for v in NON_FINITE] + [("negative", [-0.5, 0.9])]
        return values
    if origin is dict:
        values = [("wrong type", [1]), ("wrong type", "x")]
        if typing.get_args(tp)[1:] == (float,):
            values += [("non-finite", {"plain": math.nan}), ("negative", {"plain": -1.0})]
        return values
    # str, a Literal: a value of another type (and, for a Literal, none of its words)
    return [("wrong type", [1]), ("wrong type", {"a": 1})] + (
        [("wrong type", 12345)] if origin is typing.Literal else []
    )


def cases(command: str) -> list[tuple[str, str, typing.Any]]:
    """Every ``(setting, kind, value)`` of ``command``."""
    cls = load_config_class(command)
    hints = typing.get_type_hints(cls)
    return [(s.name, kind, v) for s in settings_of(cls) for kind, v in bad_values(hints[s.name])]


def must_refuse(command: str, kind: str, name: str) -> bool:
    if kind in ("non-finite", "negative", "beyond 64 bits", "wrong type"):
        return True
    return kind == "huge" and (command, name) in DATA_COUNTS


def test_every_command_with_settings_is_covered():
    """The registry's commands with a settings dataclass are those drawn from below; each has
    settings of every kind that can go wrong."""
    assert set(COMMAND_CONFIGS) == {name for name, c in COMMANDS.items() if c.settings}
    for command in COMMAND_CONFIGS:
        kinds = {kind for _, kind, _ in cases(command)}
        assert {"negative", "zero", "huge", "wrong type"} <= kinds, command
    assert "non-finite" in {kind for _, kind, _ in cases("grpo")}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("settings")
    write_addition_pairs(folder / "pairs.jsonl", 4)
    return folder


@pytest.mark.parametrize("command", sorted(COMMAND_CONFIGS))
def test_a_bad_value_is_taken_as_given_or_refused_naming_its_setting(command, world, files):
    cls = load_config_class(command)
    base = base_values(command, world, files)
    build_config(cls, base, "command line")  # the base validates

    @settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(cases(command)))
    def check(case):
        name, kind, value = case
        try:
            cfg = build_config(cls, {**base, name: value}, "command line")
        except ConfigError as exc:
            # the setting by its name ('betas[1]', 'r1_styles.plain' for an item; a check of
            # two settings may name this one second: "... must equal num_heads * head_dim")
            assert re.search(rf"(?<!\w){re.escape(name)}(?!\w)", str(exc)), (
                f"{command} {name}={value!r} ({kind}): the message does not name it: {exc}"
            )
            return
        assert not must_refuse(command, kind, name), (
            f"{command} {name}={value!r} ({kind}) was accepted"
        )
        kept = getattr(cfg, name)
        assert kept == value and type(kept) is type(value), (
            f"{command} {name}={value!r} became {kept!r}"
        )

    check()


def test_eval_examples_above_the_split_is_documented_as_all():
    """The one count above its data that is taken: each command's setting says so."""
    for command in ("eval", "grpo", "sft"):
        [setting] = [
            s for s in settings_of(load_config_class(command)) if s.name == "eval_examples"
        ]
        assert "more than the split holds: all of them" in setting.meaning
