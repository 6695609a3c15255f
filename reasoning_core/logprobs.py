r"""Per-token log-probabilities and entropies without a (B, T, V) float32 copy.

The obvious ``torch.log_softmax(logits.float(), -1).gather(-1, labels)`` allocates a float32
copy of the logits, the log-softmax, and, with gradients on, keeps the log-softmax for
backward and builds a float32 gradient of the same size: several times the logits' own
memory (at V = 151,936, T = 1024, B = 2 each float32 copy is 1.2 GB). Here, for each token,

.. math::
    \log p(y_t) = z_{t,y_t} - \operatorname{logsumexp}_v z_{t,v}, \qquad
    H_t = \operatorname{logsumexp}_v z_{t,v} - \sum_v p_{t,v} z_{t,v}

are computed chunk by chunk along the sequence in float32 (whatever the logits' dtype),
so the float32 temporaries are ``O(chunk * V)``. With gradients on, a custom
``torch.autograd.Function`` saves only the logits (which exist anyway), the labels and the
``O(B * T)`` logsumexp and entropy, and writes the gradient in backward chunk by chunk:

.. math::
    \frac{\partial \log p(y_t)}{\partial z_{t,v}} = [v = y_t] - p_{t,v}, \qquad
    \frac{\partial H_t}{\partial z_{t,v}} = -p_{t,v}\,(\log p_{t,v} + H_t).

``torch.func`` support: the Function defines ``setup_context`` and
``generate_vmap_rule = True``, so ``torch.func.vmap`` and ``torch.func.grad`` (and their
compositions) work; forward-mode AD (``jvp``/``jacfwd``) is not supported, and the gradient
itself is not differentiable again (no Hessians through this function).
"""

from __future__ import annotations

from typing import Any

import torch

from ._typing import Float, Int, Tensor

__all__ = [
    "CHUNK_ELEMENTS",
    "compute_entropy",
    "get_response_log_probs",
    "log_probs_from_logits",
]

CHUNK_ELEMENTS = 2**25
"""Default chunk budget in logits elements: one float32 chunk buffer is 128 MiB (220 tokens
at V = 151,936) and a chunk pass holds two. Small vocabularies get long chunks (few Python
iterations), large ones short chunks."""


def _chunk_len(logits: Tensor, chunk_size: int | None) -> int:
    """Sequence positions per chunk so that a chunk holds about ``chunk_size`` tokens."""
    vocab = max(logits.shape[-1], 1)
    if chunk_size is None:
        chunk_size = max(1, CHUNK_ELEMENTS // vocab)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    rows = 1
    for d in logits.shape[:-2]:
        rows *= d
    return max(1, chunk_size // max(rows, 1))


def _compute_dtype(z: Tensor) -> torch.dtype:
    """float32 for bf16/fp16/fp32 logits; float64 stays float64 (for exact checks)."""
    return torch.promote_types(z.dtype, torch.float32)


def _forward_chunk(z: Tensor, labels: Tensor, want_entropy: bool) -> tuple[Tensor, ...]:
    """float32 log-prob, logsumexp (and entropy) of one chunk ``(..., c, V)``.

    Holds two float32 chunk-sized buffers: the shifted logits and their exponentials.
    """
    z = z.to(_compute_dtype(z), copy=True)  # our own buffer: the in-place ops below are local
    shift = z.amax(dim=-1, keepdim=True)
    # An all -inf row would give -inf - -inf = NaN; shifting by 0 there keeps it -inf.
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    z.sub_(shift)
    e = torch.exp(z)
    sum_e = e.sum(dim=-1, keepdim=True)
    lse_shifted = torch.log(sum_e)
    log_prob = (torch.gather(z, -1, labels.unsqueeze(-1)) - lse_shifted).squeeze(-1)
    lse = (lse_shifted + shift).squeeze(-1)
    if not want_entropy:
        return log_prob, lse
    p = e.div_(sum_e)
    # H = lse - sum_v p_v z_v on the shifted logits (same H, better conditioned). Where
    # z_v = -inf, p_v = 0 and the clamp turns 0 * -inf = NaN into 0 * finite = 0. The product
    # goes into z's buffer (no third buffer) and torch.sum's cascaded summation keeps the
    # float32 error ~1e-6 at V = 151,936, where a BLAS dot product drifted to ~1e-3.
    pz = z.clamp_min_(torch.finfo(z.dtype).min).mul_(p)
    entropy = lse_shifted.squeeze(-1) - pz.sum(dim=-1)
    return log_prob, lse, entropy


def _backward_chunk(
    z: Tensor,
    labels: Tensor,
    lse: Tensor,
    entropy: Tensor | None,
    grad_log_prob: Tensor | None,
    grad_entropy: Tensor | None,
) -> Tensor:
    """float32 gradient w.r.t. one chunk of logits (two float32 chunk-sized buffers)."""
    log_p = z.to(_compute_dtype(z), copy=True).sub_(lse.unsqueeze(-1))
    p = torch.exp(log_p)
    grad = None
    if grad_entropy is not None:
        # g_H * dH/dz_v = -g_H p_v (log p_v + H); the clamp keeps p_v = 0 rows finite.
        grad = log_p.clamp_min_(torch.finfo(log_p.dtype).min).add_(entropy.unsqueeze(-1)).mul_(p)
        grad.mul_(-grad_entropy.unsqueeze(-1))
    if grad_log_prob is not None:
        g = grad_log_prob.unsqueeze(-1)
        minus_gp = p.mul_(-g)  # g * d log p_y / dz_v = g ([v = y] - p_v)
        grad = minus_gp if grad is None else grad.add_(minus_gp)
        grad.scatter_add_(-1, labels.unsqueeze(-1), g)
    return grad


class _ChunkedLogProbs(torch.autograd.Function):
    """Chunked log-prob (+ entropy) with an O(B*T) saved state; see the module docstring."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, labels: Tensor, chunk_len: int, want_entropy: bool):
        seq = logits.shape[-2]
        pieces = [
            _forward_chunk(
                logits[..., s : s + chunk_len, :], labels[..., s : s + chunk_len], want_entropy
            )
            for s in range(0, seq, chunk_len)
        ]
        if not pieces:  # seq == 0
            empty = logits.new_zeros(logits.shape[:-1], dtype=_compute_dtype(logits))
            return (empty, empty, empty) if want_entropy else (empty, empty)
        return tuple(torch.cat(parts, dim=-1) for parts in zip(*pieces, strict=True))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        logits, labels, chunk_len, want_entropy = inputs
        entropy = output[2] if want_entropy else None
        ctx.save_for_backward(logits, labels, output[1], entropy)
        ctx.chunk_len = chunk_len
        ctx.want_entropy = want_entropy
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, grad_log_prob: Tensor | None, _grad_lse: Tensor | None, *rest):
        logits, labels, lse, entropy = ctx.saved_tensors
        grad_entropy = rest[0] if ctx.want_entropy else None
        if grad_log_prob is None and grad_entropy is None:
            return None, None, None, None
        grad = torch.empty_like(logits)
        step = ctx.chunk_len
        for s in range(0, logits.shape[-2], step):
            sl = slice(s, s + step)
            chunk = _backward_chunk(
                logits[..., sl, :],
                labels[..., sl],
                lse[..., sl],
                None if entropy is None else entropy[..., sl],
                None if grad_log_prob is None else grad_log_prob[..., sl],
                None if grad_entropy is None else grad_entropy[..., sl],
            )
            grad[..., sl, :] = chunk  # copy_ casts to the logits dtype, no temporary
        return grad, None, None, None


def log_probs_from_logits(
    logits: Float[Tensor, "*batch seq vocab"],
    labels: Int[Tensor, "*batch seq"],
    chunk_size: int | None = None,
    return_entropy: bool = False,
) -> dict[str, Float[Tensor, "*batch seq"]]:
    r"""Log-probability of each label under ``softmax(logits)``, and optionally the entropy.

    .. math::
        \log p_t = z_{t, y_t} - \operatorname{logsumexp}_v z_{t,v}, \qquad
        H_t = -\sum_v p_{t,v} \log p_{t,v}

    Equal to ``log_softmax(logits.float(), -1).gather(-1, labels[..., None])[..., 0]`` but
    computed ``chunk_size`` tokens at a time in float32 (bf16/fp16 logits are accepted and
    never upcast as a whole), with an O(B*T) saved state for backward (module docstring).

    Args:
        logits: unnormalized scores, any float dtype.
        labels: token ids in ``[0, V)``.
        chunk_size: tokens per chunk, counted over all leading dimensions; it trades speed
            for the size of the float32 temporaries (about ``2 * chunk_size * V * 4`` bytes).
            ``None`` (default) picks ``CHUNK_ELEMENTS // V`` tokens.
        return_entropy: also return ``token_entropy``.

    Returns:
        ``{"log_probs": (..., T)}`` in float32 (float64 for float64 logits), plus
        ``"token_entropy"`` when asked.

    >>> z = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    >>> out = log_probs_from_logits(z, torch.tensor([0, 1]), return_entropy=True)
    >>> out["log_probs"], out["token_entropy"]
    (tensor([-0.6931, -0.3133]), tensor([0.6931, 0.5822]))
    """
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels shape {tuple(labels.shape)} does not match logits {tuple(logits.shape)}"
        )
    outputs = _ChunkedLogProbs.apply(logits, labels, _chunk_len(logits, chunk_size), return_entropy)
    result = {"log_probs": outputs[0]}
    if return_entropy:
        result["token_entropy"] = outputs[2]
    return result


def compute_entropy(
    logits: Float[Tensor, "*batch seq vocab"],
) -> Float[Tensor, "*batch seq"]:
    r"""Entropy of ``softmax(logits)`` over the last dimension, in float32.

    .. math:: H = \operatorname{logsumexp}(z) - \sum_v \operatorname{softmax}(z)_v\, z_v

    Computed with the max-shift of a stable logsumexp, chunk by chunk (as
    :func:`log_probs_from_logits`), so it never holds a float32 copy of the logits and is
    differentiable with an O(B*T) saved state. Lies in ``[0, log V]`` up to rounding.

    >>> compute_entropy(torch.zeros(1, 4))
    tensor([1.3863])
    """
    # The entropy does not depend on the labels; class 0 is a valid dummy.
    labels = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    outputs = _ChunkedLogProbs.apply(logits, labels, _chunk_len(logits, None), True)
    return outputs[2]


def get_response_log_probs(
    model: Any,
    input_ids: Int[Tensor, "batch seq"],
    labels: Int[Tensor, "batch seq"],
    return_token_entropy: bool = False,
    chunk_size: int | None = None,
) -> dict[str, Float[Tensor, "batch seq"]]:
    """Per-token ``log p(labels[t] | input_ids[:t+1])`` under a causal LM.

    ``model`` is anything whose call ``model(input_ids)`` returns an object with a
    ``.logits`` attribute of shape ``(B, T, V)`` (a Hugging Face causal LM); the rest is
    :func:`log_probs_from_logits`. No masking here: prompt and padding positions get
    log-probs too, and the caller masks.

    Returns:
        ``{"log_probs": (B, T)}`` in float32, plus ``"token_entropy"`` ``(B, T)`` when
        ``return_token_entropy``.
    """
    logits = model(input_ids).logits
    out = log_probs_from_logits(
        logits, labels, chunk_size=chunk_size, return_entropy=return_token_entropy
    )
    if return_token_entropy:
        return {"log_probs": out["log_probs"], "token_entropy": out["token_entropy"]}
    return out
