"""reasoning_core: the pure functional core of reasoning-rl (docs/contract.md lists it).

Everything importable from here is a pure function of tensors (and, for
``get_response_log_probs``, a model; for ``tokenize_prompt_and_output``, a tokenizer), except
the two ``*_microbatch_train_step`` functions whose contract is to call ``.backward()``.
The stateful shell lives in :mod:`reasoning_core.runtime` and is never imported from here;
neither are transformers or vllm (models and tokenizers are passed in and duck-typed).
"""

from .advantages import compute_group_normalized_rewards, group_normalize
from .correction import (
    RATIO_BAND,
    apply_token_weights,
    logprob_mismatch,
    mismatch_warning,
    tis_weights,
)
from .logprobs import (
    CHUNK_ELEMENTS,
    compute_entropy,
    get_response_log_probs,
    log_probs_from_logits,
)
from .losses import (
    LENGTH_NORMS,
    LOSS_TYPES,
    compute_grpo_clip_loss,
    compute_grpo_no_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    grpo_loss,
    grpo_microbatch_train_step,
    sft_loss,
    sft_microbatch_train_step,
)
from .masked import masked_mean, masked_normalize
from .preference import dpo_loss, sequence_log_probs
from .tokenization import tokenize_prompt_and_output

__all__ = [
    "CHUNK_ELEMENTS",
    "LENGTH_NORMS",
    "LOSS_TYPES",
    "RATIO_BAND",
    "apply_token_weights",
    "compute_entropy",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_grpo_no_clip_loss",
    "compute_naive_policy_gradient_loss",
    "compute_policy_gradient_loss",
    "dpo_loss",
    "get_response_log_probs",
    "group_normalize",
    "grpo_loss",
    "grpo_microbatch_train_step",
    "log_probs_from_logits",
    "logprob_mismatch",
    "masked_mean",
    "masked_normalize",
    "mismatch_warning",
    "sequence_log_probs",
    "sft_loss",
    "sft_microbatch_train_step",
    "tis_weights",
    "tokenize_prompt_and_output",
]
