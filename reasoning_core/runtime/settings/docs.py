"""What each setting of a command means, read from the config dataclass's source.

A setting's meaning is its *attribute docstring*: the string literal on the line after the
field, as Sphinx and pdoc read them::

    lr: float = 1e-5
    '''Peak learning rate of AdamW.'''

(written with double quotes in the code).
:func:`settings_of` walks the class and its dataclass bases (a subclass that redeclares a
field to change its default keeps the base's meaning unless it gives its own) and returns, for
every field, its name, its type as written in the source, its default and its meaning.
``rrl <command> --help`` prints them (:func:`help_text`), and ``rrl docs`` writes
``docs/configuration.md`` from the same records (:func:`configuration_markdown`), so the help
and the document cannot disagree.

The commands whose settings are a dataclass are those the command registry
(:mod:`reasoning_core.runtime.commands`) gives one for (:data:`COMMAND_CONFIGS`,
``module:Class``), imported only when asked for.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_core.registry import markdown_tables
from reasoning_core.runtime.commands import COMMANDS, settings_classes

# rrl command -> "module:Class" of its settings dataclass, from the command registry. A command
# whose settings are a dataclass (read with config.resolve_command) names it there, so that its
# settings reach --help and the document; tests/runtime/settings/test_settings_docs.py fails for
# one that is missing.
COMMAND_CONFIGS: dict[str, str] = settings_classes()


@dataclass(frozen=True)
class Setting:
    """One field of a settings dataclass, as a user sees it."""

    name: str
    type: str  # the annotation as written in the source, e.g. "int | None"
    default: str  # as YAML/JSON would write it ("null", "true", "[0.9, 0.95]"); "" if required
    meaning: str  # the attribute docstring, as one paragraph; "" when the field has none
    defined_in: str  # the class whose source declares the meaning (or the field)


def _class_fields(cls: type) -> dict[str, tuple[str, str]]:
    """``{field: (annotation source, docstring)}`` of the fields written in ``cls``'s own body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (a class built at run time)
        return {}
    [node] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)][:1]
    out: dict[str, tuple[str, str]] = {}
    body = node.body
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        doc = ""
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            doc = " ".join(inspect.cleandoc(nxt.value.value).split())
        out[stmt.target.id] = (ast.unparse(stmt.annotation), doc)
    return out


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    return json.dumps(value)


def settings_of(cls: type) -> list[Setting]:
    """Every field of dataclass ``cls``, in the order the dataclass holds them. A setting whose
    values are a registry's names (the class's ``CHOICES``: setting -> a function giving
    ``{name: description}``) has them listed after its meaning, read from the registry."""
    own = {base: _class_fields(base) for base in cls.__mro__ if dataclasses.is_dataclass(base)}
    choices = getattr(cls, "CHOICES", {})
    out = []
    for f in dataclasses.fields(cls):
        declared = [base for base, fields in own.items() if f.name in fields]
        typ = own[declared[0]][f.name][0] if declared else str(f.type)
        documented = [base for base in declared if own[base][f.name][1]]
        where = documented[0] if documented else (declared[0] if declared else cls)
        meaning = own[where][f.name][1] if documented else ""
        if f.name in choices:
            listed = "; ".join(f"{k}: {v}" for k, v in choices[f.name]().items())
            meaning = f"{meaning} Choices: {listed}."
        out.append(Setting(f.name, typ, _default(f), meaning, where.__qualname__))
    return out


def load_config_class(command: str) -> type:
    """The settings dataclass of ``rrl <command>`` (:data:`COMMAND_CONFIGS`)."""
    module, _, name = COMMAND_CONFIGS[command].partition(":")
    return getattr(importlib.import_module(module), name)


def help_text(cls: type, section: str, width: int = 100) -> str:
    """The settings part of ``rrl <section> --help``: every setting with type, default, meaning."""
    lines = textwrap.wrap(
        f"settings (--set KEY=VALUE, or the '{section}:' section of the --config file; "
        "docs/configuration.md lists them too):",
        width=width,
    )
    for s in settings_of(cls):
        default = f" = {s.default}" if s.default else " (required)"
        lines.append(f"  {s.name}: {s.type}{default}")
        lines += textwrap.wrap(
            s.meaning or "(no description)",
            width=width,
            initial_indent="      ",
            subsequent_indent="      ",
            break_on_hyphens=False,  # a formula's "1-eps" stays whole
        )
    return "\n".join(lines)


def _md_code(text: str) -> str:
    tick = "``" if "`" in text else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{text}{pad}{tick}"


HEADER = """\
# Configuration: every setting of every command

Written by `rrl docs --out docs/configuration.md` from the settings dataclasses' attribute
docstrings, which `rrl <command> --help` prints too; do not edit by hand
(`tests/runtime/settings/test_settings_docs.py` fails when this file differs from what the code
gives).

A command reads its settings from the section named after it in a YAML file (`--config
FILE`; a file without that section is read whole) and from `--set KEY=VALUE` (the value is
read as YAML: `--set lr=3e-5`, `--set 'stop=["</answer>"]'`, `--set max_examples=null`). A
setting the command does not know, or a value of the wrong type, stops the command before any
work with a message naming it. So does a number no setting can mean, whatever the command:
NaN, infinity, a negative number or an integer beyond 64 bits (every number here is a count,
size, rate, coefficient or seed); and so does a count of training questions (`train_examples`)
larger than the split holds, or data a command reads that is missing. The study's settings (`workflow/config/*.yaml`) are checked
by `workflow/schemas/config.schema.yaml`; each method's `settings:` there are these.
"""


def configuration_markdown(commands: dict[str, str] | None = None) -> str:
    """``docs/configuration.md``: for each command in :data:`COMMAND_CONFIGS` (or
    ``commands``), a list of its settings with type, default and meaning."""
    commands = COMMAND_CONFIGS if commands is None else commands
    parts = [HEADER]
    parts.append("Commands: " + ", ".join(f"[`rrl {c}`](#rrl-{c})" for c in commands) + ".\n")
    for command in commands:
        module, _, name = commands[command].partition(":")
        cls = getattr(importlib.import_module(module), name)
        summary = inspect.getdoc(cls) or ""
        first = " ".join(summary.split("\n\n")[0].split()).replace("``", "`")
        parts.append(f"## rrl {command}\n")
        parts.append(f"`{name}` (`{module}`), section `{command}:`. {first}\n".rstrip() + "\n")
        for s in settings_of(cls):
            default = f"default {_md_code(s.default)}" if s.default else "required"
            parts.append(f"- **`{s.name}`** ({_md_code(s.type)}, {default}): {s.meaning}")
        parts.append("")
    others = [name for name in COMMANDS if name not in commands]
    if others:
        parts.append("## Other commands\n")
        parts.append(
            "These take command-line options, not settings; `rrl <command> --help` lists them.\n"
        )
        parts += [f"- `rrl {name}`: {COMMANDS[name].help}" for name in others]
    return "\n".join(parts).rstrip() + "\n"


def undocumented(commands: dict[str, str] | None = None) -> list[str]:
    """``command.setting`` for every setting without a meaning (should be empty)."""
    commands = COMMAND_CONFIGS if commands is None else commands
    out = []
    for command, target in commands.items():
        module, _, name = target.partition(":")
        cls = getattr(importlib.import_module(module), name)
        out += [f"{command}.{s.name}" for s in settings_of(cls) if not s.meaning]
    return out


def with_registry_tables(text: str) -> str:
    """``text`` (docs/algorithms.md) with the registries' tables
    (:func:`reasoning_core.registry.markdown_tables`) between their
    ``<!-- registry:NAME -->`` and ``<!-- /registry:NAME -->`` markers."""
    for name, table in markdown_tables().items():
        start, end = f"<!-- registry:{name} -->", f"<!-- /registry:{name} -->"
        if start not in text or end not in text:
            raise ValueError(f"no {start} ... {end} block to fill")
        i, j = text.index(start) + len(start), text.index(end)
        text = f"{text[:i]}\n{table}\n{text[j:]}"
    return text


def main(argv: list[str] | None = None) -> int:
    """``rrl docs --out docs/configuration.md`` (``--check``: exit 1 if a file differs); the
    registries' tables in ``--algorithms`` (docs/algorithms.md) are refreshed too."""
    parser = argparse.ArgumentParser(
        prog="rrl docs",
        description="Write docs/configuration.md from the settings dataclasses, and the "
        "method tables of docs/algorithms.md from the core's registries.",
    )
    parser.add_argument("--out", default="docs/configuration.md", help="file to write")
    parser.add_argument(
        "--algorithms",
        default=None,
        help="file whose registry tables to refresh (default: algorithms.md beside --out)",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file differs"
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    missing = undocumented()
    if missing:
        print(f"rrl docs: settings without a meaning: {', '.join(missing)}", file=sys.stderr)
    out = Path(args.out)
    algorithms = Path(args.algorithms) if args.algorithms else out.parent / "algorithms.md"
    wanted = {out: configuration_markdown()}
    if algorithms.is_file() or args.algorithms:
        wanted[algorithms] = with_registry_tables(algorithms.read_text(encoding="utf-8"))
    if args.check:
        stale = [
            out for out, text in wanted.items()
            if not (out.is_file() and out.read_text(encoding="utf-8") == text)
        ]  # fmt: skip
        for path in stale:
            print(f"rrl docs: {path} is out of date; run rrl docs --out {out}", file=sys.stderr)
        return 0 if not stale and not missing else 1
    for path, text in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(text.splitlines())} lines)")
    return 1 if missing else 0
