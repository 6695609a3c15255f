"""Tools an environment lets the model call: :mod:`envs.tools.calculator` (exact arithmetic,
parsed without ``eval``). Each tool is a function of text to text that never raises: a bad
input is an error text shown to the model."""
