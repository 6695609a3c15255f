"""Settings: how a command's settings are read, checked, documented and recorded.

- :mod:`.config`: YAML files and ``--set KEY=VALUE`` into a settings dataclass, each value
  type-checked (:func:`~.config.resolve_command`); ``config.yaml`` written into a run folder
  with the code's provenance (:func:`~.config.save_config`).
- :mod:`.provenance`: git commit, dirty tree, package versions and the CPU's float path.
- :mod:`.docs`: each setting's meaning, from its attribute docstring, for ``rrl <command>
  --help`` and ``rrl docs`` (docs/configuration.md).

The settings dataclasses themselves live beside the code that reads them (``CommonConfig`` in
:mod:`..training.settings`, ``GRPOConfig`` in :mod:`..trainers.grpo`, ...).

May import: :mod:`..errors` and the command registry (:mod:`..commands`, names only).
"""
