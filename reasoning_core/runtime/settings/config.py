"""Run configuration: YAML files + ``--set key=value`` overrides -> a validated dataclass.

Every trainer/evaluation command describes its settings as a dataclass. ``parse_run_args``
reads ``--config FILE [--set k=v ...] --out DIR``; ``build_config`` turns the merged mapping
into the dataclass and refuses unknown keys or ill-typed values with a message that names the
setting and the file it came from. ``save_config`` writes the resolved ``config.yaml`` (plus the
code's ``provenance``, which ``resolve`` drops again, so a saved file works as ``--config``).

Every number a setting holds is a count, a size, a rate, a coefficient or a seed, so the type
check also refuses, for every command at once, what none of them can mean: NaN and infinity
(``--set kl_coef=nan`` would turn a term off without a word), a negative number, and an integer
that does not fit the 64 bits torch and NumPy take. Each class's ``validate()`` adds its own
bounds (``lr > 0``, ...).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.settings import provenance

T = TypeVar("T")

# The integers torch, NumPy and the engines take (seeds, counts): int64.
INT_LIMIT = 2**63


def load_yaml(path: str | Path, section: str | None = None) -> dict[str, Any]:
    """Load a YAML mapping; if it has a top-level ``section`` mapping, return that part."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}); is it a config file?"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}:{yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at top level, got {type(data).__name__}")
    if section is not None and section in data:
        part = data[section]
        if part is None:  # a section whose settings are all commented out
            return {}
        if not isinstance(part, dict):
            raise ConfigError(
                f"{path}: section {section!r} must be a mapping of settings, got {part!r}"
            )
        return dict(part)
    return data


def yaml_problem(exc: yaml.YAMLError) -> str:
    """``"LINE:COL: not valid YAML: what"`` for a YAML parse error (1-based, as editors count).

    The place is where the broken construct starts (an unclosed bracket's line), not where the
    parser gave up (often the end of the file); the latter is added when it differs."""
    context = getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem_mark", None)
    mark = context or problem
    where = f"{mark.line + 1}:{mark.column + 1}: " if mark is not None else " "
    what = ": ".join(
        str(part).strip()
        for part in (getattr(exc, "context", None), getattr(exc, "problem", None))
        if part
    )
    if context is not None and problem is not None and problem.line != context.line:
        what += f" (at line {problem.line + 1}, column {problem.column + 1})"
    return f"{where}not valid YAML: {what or exc}"


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["lr=1e-4", "model.path=x"]`` -> ``{"lr": 1e-4, "model.path": "x"}`` (YAML-typed values)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(value) if value != "" else ""
        except yaml.YAMLError as exc:
            what = yaml_problem(exc).partition("not valid YAML: ")[2]
            raise ConfigError(
                f"--set {pair}: {value!r} is not a valid YAML value ({what}); "
                "quote a string that holds YAML syntax, e.g. --set 'key=\"a: b\"'"
            ) from None
    return out


def _check_type(name: str, value: Any, tp: Any, source: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(name, value, arg, source)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{source}: setting {name!r} is malformed")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(
                f"{source}: setting {name!r} must be one of {list(args)}, got {value!r}"
            )
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{source}: setting {name!r} must be a list, got {value!r}")
        inner = args[0] if args else Any
        return [_check_type(f"{name}[{i}]", v, inner, source) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: setting {name!r} must be a mapping, got {value!r}")
        inner = args[1] if len(args) == 2 else Any
        return {k: _check_type(f"{name}.{k}", v, inner, source) for k, v in value.items()}
    if tp is float:
        if isinstance(value, str):
            # PyYAML (YAML 1.1) reads "3e-5" (no dot) as a string; accept it as the number.
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{source}: setting {name!r} must be a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{source}: setting {name!r} must be a finite number, got {value!r}")
        return _not_negative(name, number, source)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: setting {name!r} must be an integer, got {value!r}")
        if value >= INT_LIMIT:
            raise ConfigError(
                f"{source}: setting {name!r} must be below 2**63 (a 64-bit integer), got {value}"
            )
        return _not_negative(name, value, source)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: setting {name!r} must be true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{source}: setting {name!r} must be a string, got {value!r}")
        return str(value)
    return value


def _not_negative(name: str, value: float, source: str) -> float:
    if value < 0:
        raise ConfigError(f"{source}: setting {name!r} must be >= 0, got {value!r}")
    return value


def build_config(
    cls: type[T], values: dict[str, Any], source: str = "config", *, validate: bool = True
) -> T:
    """Instantiate dataclass ``cls`` from ``values``; unknown keys and bad types raise
    :class:`ConfigError` naming the setting and ``source``. Missing keys take defaults;
    a field without a default that is missing is an error too. ``validate=False`` skips the
    class's own ``validate()`` (which may look at files, e.g. the model folder): the workflow
    checks its sweep tables that way when it plans, before the models exist. A class with
    ``PRESETS`` (name -> settings) expands the setting ``preset`` first; the values given
    explicitly win over the preset's, and the object records them all."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    renamed = getattr(cls, "RENAMED", {})  # a settings class's old names -> its new ones
    for old in sorted(set(values) & set(renamed)):
        raise ConfigError(
            f"{source}: setting {old!r} of {cls.__name__} was renamed {renamed[old]!r}; "
            f"write {renamed[old]}: {values[old]!r} instead"
        )
    presets = getattr(cls, "PRESETS", None)  # a setting 'preset' names a set of settings
    if presets is not None and values.get("preset") is not None:
        name = values["preset"]
        if name not in presets:
            raise ConfigError(
                f"{source}: setting 'preset' must be one of {sorted(presets)}, got {name!r}"
            )
        values = {**presets[name], **values}  # the settings given explicitly win
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: unknown setting(s) {unknown} for {cls.__name__}; "
            f"known settings: {sorted(fields)}"
        )
    kwargs = {}
    for name, f in fields.items():
        if name in values:
            kwargs[name] = _check_type(name, values[name], hints[name], source)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{source}: required setting {name!r} is missing")
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if validate and callable(check):
        check()
    return obj


def available_examples(setting: str, task: Any, split: str, path: str | None = None) -> int:
    """How many examples ``task``'s ``split`` (read from ``path`` when given) holds, read at
    start: a missing or malformed data file is a :class:`ConfigError` naming ``setting``
    (the split or path setting) before any model loads."""
    from envs.base import DataError  # envs imports no torch

    try:
        return task.available(split, path)
    except (DataError, ValueError) as exc:
        where = "" if path is not None else f" split {split!r} of task {task.name!r}:"
        raise ConfigError(f"setting {setting!r}:{where} {exc}") from None  # exc names the file


def check_count(setting: str, asked: int | None, available: int, where: str) -> None:
    """Refuse ``setting`` when it asks for more examples than ``where`` holds (``available``);
    null asks for none."""
    if asked is not None and asked > available:
        raise ConfigError(
            f"setting {setting!r} asks for {asked} examples, but {where} has only {available}"
        )


def parse_run_args(
    argv: list[str],
    description: str,
    *,
    need_out: bool = True,
    settings: type | None = None,
    section: str | None = None,
) -> argparse.Namespace:
    """Common arguments of every run command: ``--config``, repeated ``--set``, ``--out``.

    With ``settings`` (the command's dataclass), ``--help`` ends with every setting: name,
    type, default and meaning (:func:`reasoning_core.runtime.settings.docs.help_text`)."""
    epilog = None
    if settings is not None:
        from reasoning_core.runtime.settings.docs import help_text

        epilog = help_text(settings, section or "")
    parser = argparse.ArgumentParser(
        prog=f"rrl {section}" if section else None,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", help="YAML file; a top-level section named after the command is used if present"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable)",
    )
    parser.add_argument("--out", required=need_out, help="output folder of the run")
    return parser.parse_args(argv)


def resolve(cls: type[T], args: argparse.Namespace, section: str) -> T:
    """Merge ``--config`` (its ``section`` if present) with ``--set`` overrides into ``cls``."""
    values: dict[str, Any] = {}
    source = "command line"
    if args.config:
        values.update(load_yaml(args.config, section))
        source = str(args.config)
        known = {f.name for f in dataclasses.fields(cls)}
        if provenance.KEY not in known:  # a saved config.yaml: its code's provenance, no setting
            values.pop(provenance.KEY, None)
    overrides = parse_overrides(args.set)
    values.update(overrides)
    if overrides:
        source += " (with --set " + ", ".join(sorted(overrides)) + ")"
    return build_config(cls, values, source)


def resolve_command(
    cls: type[T], section: str, argv: list[str] | None, description: str
) -> tuple[T, argparse.Namespace] | None:
    """``rrl <section>``'s command line (``argv``; None: ``sys.argv[1:]``) resolved into ``cls``.

    A bad setting prints ``rrl <section>: <message>`` to stderr and returns None: the command
    then exits 2, before any work."""
    args = parse_run_args(
        list(sys.argv[1:] if argv is None else argv), description, settings=cls, section=section
    )
    try:
        if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
            raise ConfigError(f"--out {args.out} is a file; it must name a folder for the run")
        cfg = resolve(cls, args, section)
    except ConfigError as exc:
        print(f"rrl {section}: {exc}", file=sys.stderr)
        return None
    return cfg, args


def settings_changes(saved: str | Path, cfg: Any, *, may_change: set[str]) -> list[str]:
    """How the resolved ``cfg`` differs from the ``config.yaml`` at ``saved``: one
    ``"name old -> new"`` per setting outside ``may_change`` (placement: threads, device,
    progress bars). Nothing to compare (no file) gives none, as does a setting only one side
    has (saved by an older or newer version)."""
    saved = Path(saved)
    if not saved.is_file():
        return []
    try:
        old = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{saved}: unreadable ({exc})") from None
    if not isinstance(old, dict):
        raise ConfigError(f"{saved}: not a mapping of settings")
    data = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    new = yaml.safe_load(yaml.safe_dump(data, sort_keys=False))  # as save_config writes it
    # Only settings both sides know: one that a newer version added (or an older one had) says
    # nothing about this experiment.
    # The code's provenance (commit, versions) is no setting: a run resumes after a commit.
    ignored = set(may_change) | {provenance.KEY}
    return [
        f"{key} {old[key]!r} -> {new[key]!r}"
        for key in sorted(set(old) & set(new))
        if key not in ignored and old[key] != new[key]
    ]


def save_config(cfg: Any, out_dir: str | Path) -> Path:
    """Write the resolved configuration as ``config.yaml`` (atomically), with the code's
    provenance (git commit, dirty tree, package versions; see
    :mod:`reasoning_core.runtime.settings.provenance`) under the key ``provenance`` after the settings.
    Reading the file back as ``--config`` drops that key (:func:`resolve`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(cfg)
    if provenance.KEY not in data:
        data[provenance.KEY] = copy.deepcopy(provenance.provenance())
    tmp = out / "config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    tmp.replace(out / "config.yaml")
    return out / "config.yaml"
