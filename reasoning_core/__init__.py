"""reasoning_core: the pure functional core of reasoning-rl (see ../shared/SPEC.md section 1).

Everything importable from here is a pure function of tensors (and, for
``get_response_log_probs``, a model). The stateful shell lives in
:mod:`reasoning_core.runtime` and is never imported from here.
"""
