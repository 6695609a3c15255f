"""The static engine's tensors: cache layout, rotary helper, sampling on the device, sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from reasoning_core.runtime.engines.rollout import SamplingParams

SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama")
_LEN_QUANTUM = 128  # cache lengths are rounded up to this, so nearby calls reuse the cache


def _round_up(x: int, q: int) -> int:
    return -(-x // q) * q


def row_buckets(capacity: int, step: int | None = None) -> list[int]:
    """The row counts a decode step runs at: powers of two below ``capacity``, and it; with
    ``step``, also every multiple of ``step`` below it (finer sizes for eager steps, which need
    no captured graph per size, so finished rows stop costing sooner)."""
    sizes, b = {capacity}, 1
    while b < capacity:
        sizes.add(b)
        b *= 2
    if step is not None:
        sizes.update(range(step, capacity, step))
    return sorted(sizes)


def _smallest_at_least(k: int, sizes: list[int]) -> int:
    return next(s for s in sizes if s >= k)


def check_supported(model: Any) -> None:
    """Raise ValueError (naming the setting) unless the static engine can run ``model``."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"engine 'static' supports model_type {SUPPORTED_MODEL_TYPES}, got {kind!r}; "
            "use engine 'hf' for this model"
        )
    types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in types):
        raise ValueError(
            f"engine 'static' needs full attention in every layer; config.layer_types has "
            f"{sorted(set(types))} (sliding window); use engine 'hf'"
        )
    rope_type = getattr(model.model.rotary_emb, "rope_type", "default")
    if "dynamic" in rope_type or rope_type == "longrope":
        raise ValueError(
            f"engine 'static' precomputes the rotary table; rope_type {rope_type!r} depends on "
            "the sequence length; use engine 'hf'"
        )


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def sample_on_device(
    logits: Tensor,
    count: Tensor,
    eos_mask: Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sample one token per row; no host synchronisation.

    Args:
        logits: (rows, vocab) raw logits of the policy.
        count: (rows,) tokens each row has generated so far; EOS is masked where
            ``count < params.min_tokens``.
        eos_mask: (vocab,) bool, True at the EOS ids.
        params: temperature (0 = greedy) and top_p as in ``SamplingParams``.
        generator: the call's generator (None: torch's default one).

    Returns:
        ``(tokens, logprobs, entropies, sampling_logprobs)``, each (rows,): the sampled ids,
        ``logits[token] - logsumexp(logits)`` (float32), the raw policy's log-probability,
        that raw distribution's entropy ``-sum_v p_v log p_v`` with
        ``log p = logits - logsumexp(logits)`` (float32; the ``logsumexp`` is shared), and the
        token's log-probability under the distribution it was drawn from (EOS masked,
        divided by the temperature, the top-p nucleus renormalized; 0.0 when greedy; the raw
        log-probability itself when that distribution is the raw one).
    """
    logits = logits.float()
    masked = logits
    if params.min_tokens > 0:
        blocked = (count < params.min_tokens)[:, None] & eos_mask[None, :]
        masked = logits.masked_fill(blocked, float("-inf"))
    nucleus: Tensor | None = None
    if params.temperature == 0.0:
        tokens = masked.argmax(dim=-1)
    else:
        scaled = masked if params.temperature == 1.0 else masked / params.temperature
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # the smallest prefix whose mass reaches top_p (the top token always stays)
            drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= params.top_p
            kept = sorted_probs.masked_fill(drop, 0.0)
            choice = _inverse_cdf(kept, generator)
            tokens = order.gather(-1, choice[:, None]).squeeze(-1)
            # renormalized in the nucleus; a nucleus of one token gives exactly log(1) = 0
            nucleus = (kept.gather(-1, choice[:, None]).squeeze(-1) / kept.sum(dim=-1)).log()
        else:
            tokens = _inverse_cdf(probs, generator)
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, tokens[:, None]).squeeze(-1) - lse
    logp_all = logits - lse[:, None]
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    if params.temperature == 0.0:
        drawn = torch.zeros_like(logp)
    elif nucleus is not None:
        drawn = nucleus
    elif scaled is logits:
        drawn = logp  # sampled from the raw distribution itself
    else:
        # one reduction over the vocabulary, no (rows, vocab) output
        drawn = scaled.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    return tokens, logp, entropy, drawn


def _inverse_cdf(weights: Tensor, generator: torch.Generator | None) -> Tensor:
    """One index per row drawn with probability ``weights / weights.sum()``: the first index
    whose cumulative weight exceeds ``U * total`` with ``U ~ Uniform[0, 1)``, one uniform per
    row (a race of exponential clocks, ``argmax(w / E)``, draws as many exponentials as the
    vocabulary). The cumulative sum never rises at a zero weight, so a zero weight never wins;
    the target is clamped below the total, a guard so that no rounding of ``U * total`` can
    point past the last positive weight."""
    cdf = weights.cumsum(dim=-1)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=generator, device=weights.device, dtype=cdf.dtype)
    target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(-1)


# -- host-side text handling (vLLM's stop-string semantics, as the HF engine) --------------


@dataclass
class _Cache:
    keys: list[Tensor]  # per layer (rows, kv_heads, max_len, head_dim)
    values: list[Tensor]
    cos: Tensor  # (max_len, head_dim), model dtype
    sin: Tensor
    slots: Tensor  # (max_len,) int64: 0, 1, ..., max_len - 1
    row_base: Tensor  # (rows, kv_heads) int64: flat index of (row, head, slot 0) in a layer
    tok: Tensor  # (rows,) int64: the token each row feeds next
    pos: Tensor  # (rows,) int64: the slot (= position id) it goes to
    count: Tensor  # (rows,) int64: tokens the row has generated
    rows: int
    max_len: int

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


def cache_bytes(config: Any, rows: int, max_len: int, bytes_per_value: int = 2) -> int:
    """Bytes of the static cache for ``rows`` x ``max_len`` slots (rounded up to 128):
    ``2 * layers * rows * kv_heads * max_len * head_dim * bytes_per_value``."""
    head_dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )
    length = _round_up(max_len, _LEN_QUANTUM)
    return (
        2
        * config.num_hidden_layers
        * rows
        * config.num_key_value_heads
        * length
        * head_dim
        * bytes_per_value
    )
