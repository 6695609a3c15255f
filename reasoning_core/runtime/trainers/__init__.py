"""The trainers: each one loop over the steps of :mod:`..training`, in the open.

- :mod:`.sft`, :mod:`.ei`, :mod:`.grpo`, :mod:`.dpo` (with :mod:`.dpo_pairs`, its pairs),
  :mod:`.instruction_sft`: a settings dataclass, ``train(cfg, out)`` and ``main(argv)``
  (``rrl <trainer>``); GRPO's settings are long enough for their own module,
  :mod:`.grpo_config` (``GRPOConfig``, re-exported by :mod:`.grpo`), so that ``grpo.py``
  reads as the step.
- :mod:`.lifecycle`: what every trainer goes through: start, set-up (policy, optimizer,
  resume, engine, evaluator), after each iteration (evaluate, save, budget), finish.

May import every other part of the runtime. Nothing imports a trainer but the command
registry (:mod:`..commands`, by name), so a trainer can change without touching the rest.
"""
