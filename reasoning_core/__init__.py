"""reasoning_core: the pure functional core of reasoning-rl (docs/contract.md lists it).

Everything importable from here is a pure function of tensors (and, for
``get_response_log_probs``, a model; for ``tokenize_prompt_and_output``, a tokenizer), except
the two ``*_microbatch_train_step`` functions whose contract is to call ``.backward()``.
The stateful shell lives in :mod:`reasoning_core.runtime` and is never imported from here;
neither are transformers or vllm (models and tokenizers are passed in and duck-typed).
"""

from .advantages import (
    batch_std_advantages,
    compute_advantages,
    compute_group_normalized_rewards,
    group_normalize,
    reinforce_pp_advantages,
    rloo_advantages,
)
from .controls import CONTROL_REWARDS, control_rewards, random_rewards
from .correction import (
    RATIO_BAND,
    apply_token_weights,
    logprob_mismatch,
    mismatch_warning,
    tis_weights,
)
from .kl import KL_ESTIMATORS, kl_penalty
from .logprobs import (
    CHUNK_ELEMENTS,
    compute_entropy,
    get_response_log_probs,
    log_probs_from_logits,
)
from .losses import (
    compute_cispo_loss,
    compute_dapo_clip_loss,
    compute_grpo_clip_loss,
    compute_grpo_no_clip_loss,
    compute_gspo_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    compute_sapo_loss,
    grpo_loss,
    grpo_microbatch_train_step,
    sft_loss,
    sft_microbatch_train_step,
    token_mean_constant,
)
from .masked import masked_mean, masked_normalize
from .offpolicy import offpolicy_weights
from .preference import dpo_loss, sequence_log_probs
from .presets import PRESETS
from .registry import (
    ADVANTAGE_ESTIMATORS,
    LENGTH_NORMS,
    OFFPOLICY_CORRECTIONS,
    POLICY_LOSSES,
    LossInputs,
    LossSettings,
    register_advantage_estimator,
    register_offpolicy_correction,
    register_policy_loss,
)
from .sampling_filters import dynamic_sampling_keep, mask_truncated, soft_overlong_penalty
from .tokenization import tokenize_prompt_and_output

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
