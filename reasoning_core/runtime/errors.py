"""The errors whose message is written for the user.

``rrl`` prints them as ``rrl <command>: <message>`` with exit status 2 instead of a traceback
(:mod:`reasoning_core.runtime.cli`); the message names the file, line or setting and the way
out. Everything else is a bug and keeps its traceback. (``envs.DataError``, a bad data file,
is the third kind; it lives with the tasks.)

Imports nothing of the project, so every layer may raise them.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is missing, unknown or malformed. The message names the setting."""


class StateError(RuntimeError):
    """A saved training state cannot be loaded; the message names the file and the way out."""
