"""The ``rrl`` command line: one subcommand per workflow rule.

The subcommands are the registry's (:mod:`reasoning_core.runtime.commands`), imported lazily so
that ``rrl summary`` does not pay for importing vLLM. Each target module exposes
``main(argv: list[str]) -> int``.

Errors in what the user gave (a setting, a data file, a damaged saved state) that reach this
level are printed as ``rrl <command>: <message>`` (the message names the file, line or
setting) with exit status 2, not as a traceback; anything else is a bug and keeps its
traceback.

Under ``torchrun`` (``WORLD_SIZE`` above 1) only the trainers run; each checks that its
settings split over the processes (docs/gpu.md, "Several GPUs"). Any other command refuses,
rather than run as many copies of itself into one folder.

With ``RRL_JOB_SERVER`` naming a running ``rrl job-server``'s socket (a local study's workflow
sets it), the commands that import torch run in a process forked from that server instead of
this one (:mod:`reasoning_core.runtime.job_server`).
"""

from __future__ import annotations

import importlib
import os
import sys

from reasoning_core.runtime import job_server
from reasoning_core.runtime.commands import COMMANDS
from reasoning_core.runtime.errors import ConfigError, StateError

# The commands that run as one run over several processes (or refuse in their own words).
TORCHRUN_COMMANDS = {"sft", "instruction-sft", "ei", "grpo", "dpo"}


def _usage() -> str:
    lines = ["usage: rrl <command> [options]", "", "commands:"]
    width = max(map(len, COMMANDS))
    lines += [f"  {name:<{width}}  {command.help}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"rrl: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    world = os.environ.get("WORLD_SIZE", "1")
    if name not in TORCHRUN_COMMANDS and world not in ("", "0", "1"):
        if os.environ.get("RANK", "0") == "0":
            print(
                f"rrl {name}: runs in one process only, but torchrun started {world} "
                f"(WORLD_SIZE={world}); launch it without torchrun (under torchrun: "
                f"{', '.join(sorted(TORCHRUN_COMMANDS))})",
                file=sys.stderr,
            )
        return 2
    if name == "job-server":  # each job it serves runs this function
        return job_server.main(rest, run=main)
    server = os.environ.get(job_server.ENV)
    if server and name in job_server.SERVED and world in ("", "0", "1"):
        status = job_server.run_via_server(server, argv)
        if status is not None:
            return status
    module = importlib.import_module(COMMANDS[name].module)
    entry = getattr(module, "main_" + name.replace("-", "_"), None) or module.main
    try:
        return int(entry(rest) or 0)
    except _user_errors() as exc:
        print(f"rrl {name}: {exc}", file=sys.stderr)
        return 2


def _user_errors() -> tuple[type[Exception], ...]:
    """Exceptions whose message is written for the user (see the module docstring)."""
    from envs.base import DataError  # envs imports no torch; its package init stays light

    return (ConfigError, DataError, StateError)


if __name__ == "__main__":
    sys.exit(main())
