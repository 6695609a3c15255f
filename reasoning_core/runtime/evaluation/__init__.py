"""Evaluating a model: sampling, grading and summarizing, and the evaluation commands.

- :mod:`.loop`: ``evaluate_policy`` (sample through an engine, grade, summarize, entropy).
- :mod:`.summary`: the categories (correct, wrong answer, bad format), the summary of an
  evaluation and its metrics line, the grading warning.
- :mod:`.generations`: ``log_generations`` and the response entropies of an evaluation.
- Commands: :mod:`.evaluate` (``rrl eval``), :mod:`.suite` (``rrl eval-suite``),
  :mod:`.supplement_generate` (``rrl supplement-generate``), :mod:`.safety_judge`
  (``rrl safety-judge``).

May import: everything below it (the core, envs, errors, settings, run, engines, training).
Not trainers.
"""
