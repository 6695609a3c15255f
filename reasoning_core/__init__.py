"""reasoning_core: the pure functional core of reasoning-rl (docs/contract.md lists it).

Everything importable from here is a pure function of tensors (and, for
``get_response_log_probs``, a model; for ``tokenize_prompt_and_output``, a tokenizer), except
the two ``*_microbatch_train_step`` functions whose contract is to call ``.backward()``.
The stateful shell lives in :mod:`reasoning_core.runtime` and is never imported from here;
neither are transformers or vllm (models and tokenizers are passed in and duck-typed).

The names are loaded at their first use: ``from reasoning_core import grpo_loss`` (or
``reasoning_core.grpo_loss``) imports every module of the core, and with it torch, as an
import of the whole package did. Python runs this file before any module under
``reasoning_core.runtime``, and the runtime's commands that read only files (``rrl summary``,
``rrl plot``, ``rrl --help``) need no torch, whose import takes 1.5-2 s of a CPU process's
start. The built-in losses, advantage estimators and off-policy corrections register
themselves when their modules load; a registry read before any name here is used loads them
first (:mod:`reasoning_core.registry`).
"""

from __future__ import annotations

import importlib
from typing import Any

# The modules of the core, loaded in this order: the order of the package's imports before
# they were deferred (it sets the order in which each registry lists its built-in methods).
_MODULES = (
    "advantages",
    "controls",
    "correction",
    "kl",
    "logprobs",
    "losses",
    "masked",
    "offpolicy",
    "preference",
    "presets",
    "registry",
    "sampling_filters",
    "tokenization",
)

# The public names; each is in the ``__all__`` of the module that defines it.
__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "CHUNK_ELEMENTS",
    "CONTROL_REWARDS",
    "KL_ESTIMATORS",
    "LENGTH_NORMS",
    "POLICY_LOSSES",
    "PRESETS",
    "OFFPOLICY_CORRECTIONS",
    "LossInputs",
    "LossSettings",
    "RATIO_BAND",
    "apply_token_weights",
    "batch_std_advantages",
    "compute_advantages",
    "compute_cispo_loss",
    "compute_dapo_clip_loss",
    "compute_entropy",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_grpo_no_clip_loss",
    "compute_gspo_loss",
    "compute_naive_policy_gradient_loss",
    "compute_policy_gradient_loss",
    "compute_sapo_loss",
    "control_rewards",
    "dpo_loss",
    "dynamic_sampling_keep",
    "get_response_log_probs",
    "group_normalize",
    "grpo_loss",
    "grpo_microbatch_train_step",
    "kl_penalty",
    "log_probs_from_logits",
    "logprob_mismatch",
    "mask_truncated",
    "masked_mean",
    "masked_normalize",
    "mismatch_warning",
    "offpolicy_weights",
    "random_rewards",
    "register_advantage_estimator",
    "register_offpolicy_correction",
    "register_policy_loss",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "sequence_log_probs",
    "sft_loss",
    "sft_microbatch_train_step",
    "soft_overlong_penalty",
    "tis_weights",
    "token_mean_constant",
    "tokenize_prompt_and_output",
]
_PUBLIC = frozenset(__all__)

_loading = False


def _load() -> None:
    """Import every module of the core (torch with them): the built-in methods register
    themselves as their modules load. A no-op after the first call, and while the first is
    under way (a module that reads a registry as it loads imports the modules it reads). A
    failed import is raised, and the next use tries again."""
    global _loading
    if _loading:
        return
    _loading = True
    try:
        for module in _MODULES:
            importlib.import_module(f"{__name__}.{module}")
    except BaseException:
        _loading = False
        raise


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        _load()
        modules = (importlib.import_module(f"{__name__}.{m}") for m in _MODULES)
        value = getattr(next(m for m in modules if name in m.__all__), name)
        globals()[name] = value
        return value
    if name in _MODULES:  # a module of the core named before it was imported
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
