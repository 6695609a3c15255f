"""Chunked log-probs and entropies: equal to the naive log-softmax path in value and gradient,
bounded entropies, bf16 input, O(B*T) saved state, torch.func, and a tiny Qwen2 model."""

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.autograd import gradcheck
from torch.func import grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from reasoning_core import compute_entropy, get_response_log_probs, log_probs_from_logits


def naive(logits, labels):
    log_p = torch.log_softmax(logits.double(), dim=-1)
    return log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1), -(log_p.exp() * log_p).sum(-1)


@st.composite
def logits_and_labels(draw, dtype=torch.float64):
    batch = draw(st.integers(1, 3))
    seq = draw(st.integers(1, 7))
    vocab = draw(st.integers(1, 40))
    scale = draw(st.sampled_from([0.01, 1.0, 10.0, 100.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(batch, seq, vocab, generator=gen, dtype=torch.float64) * scale).to(dtype)
    labels = torch.randint(0, vocab, (batch, seq), generator=gen)
    chunk = draw(st.integers(1, 2 * batch * seq + 1))
    return logits, labels, chunk


@given(logits_and_labels())
def test_values_equal_the_naive_path(data):
    logits, labels, chunk = data
    out = log_probs_from_logits(logits, labels, chunk_size=chunk, return_entropy=True)
    lp, ent = naive(logits, labels)
    torch.testing.assert_close(out["log_probs"], lp, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out["token_entropy"], ent, rtol=1e-10, atol=1e-9)
    torch.testing.assert_close(compute_entropy(logits), ent, rtol=1e-10, atol=1e-9)
    assert set(log_probs_from_logits(logits, labels, chunk_size=chunk)) == {"log_probs"}


@given(logits_and_labels(), st.booleans())
def test_gradients_equal_the_naive_path(data, with_entropy):
    logits, labels, chunk = data
    gen = torch.Generator().manual_seed(0)
    w_lp = torch.randn(labels.shape, generator=gen, dtype=torch.float64)
    w_h = torch.randn(labels.shape, generator=gen, dtype=torch.float64) * with_entropy

    def ours(z):
        out = log_probs_from_logits(z, labels, chunk_size=chunk, return_entropy=with_entropy)
        h = out["token_entropy"] if with_entropy else 0.0
        return (out["log_probs"] * w_lp).sum() + (h * w_h).sum()

    def reference(z):
        lp, ent = naive(z, labels)
        return (lp * w_lp).sum() + (ent * w_h).sum()

    z = logits.clone().requires_grad_(True)
    (g_ours,) = torch.autograd.grad(ours(z), z)
    (g_ref,) = torch.autograd.grad(reference(z), z)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-8, atol=1e-9)


def test_gradcheck_float64():
    z = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 7, (2, 5))
    assert gradcheck(lambda z: tuple(log_probs_from_logits(z, y, 3, True).values()), (z,))
    assert gradcheck(compute_entropy, (z,))


@given(logits_and_labels(dtype=torch.float32))
def test_entropy_lies_between_zero_and_log_vocab(data):
    logits, labels, chunk = data
    vocab = logits.shape[-1]
    h = log_probs_from_logits(logits, labels, chunk_size=chunk, return_entropy=True)[
        "token_entropy"
    ]
    slack = 1e-6 * max(1.0, math.log(vocab))
    assert (h >= -slack).all()
    assert (h <= math.log(vocab) + slack).all()


def test_entropy_extremes():
    uniform = torch.zeros(1, 2, 50)
    torch.testing.assert_close(compute_entropy(uniform), torch.full((1, 2), math.log(50)))
    peaked = torch.tensor([[[1000.0, 0.0, 0.0], [0.0, -math.inf, -math.inf]]])
    assert torch.equal(compute_entropy(peaked), torch.zeros(1, 2))


def test_negative_infinity_logits_give_no_nan():
    z = torch.tensor([[[0.0, -math.inf, 1.0], [2.0, 0.0, -math.inf]]], requires_grad=True)
    y = torch.tensor([[2, 0]])
    out = log_probs_from_logits(z, y, chunk_size=1, return_entropy=True)
    finite = torch.tensor([[[0.0, 1.0], [2.0, 0.0]]])  # the same rows without the -inf entries
    lp, ent = naive(finite, torch.tensor([[1, 0]]))
    torch.testing.assert_close(out["log_probs"].double(), lp)
    torch.testing.assert_close(out["token_entropy"].double(), ent)
    (out["log_probs"].sum() + out["token_entropy"].sum()).backward()
    assert torch.isfinite(z.grad).all()
    assert (z.grad[0, 0, 1] == 0) and (z.grad[0, 1, 2] == 0)


def test_bf16_logits_accumulate_in_float32():
    gen = torch.Generator().manual_seed(1)
    z16 = (torch.randn(2, 9, 1000, generator=gen) * 3).bfloat16().requires_grad_(True)
    y = torch.randint(0, 1000, (2, 9), generator=gen)
    out = log_probs_from_logits(z16, y, chunk_size=4, return_entropy=True)
    assert out["log_probs"].dtype == torch.float32
    lp, ent = naive(z16.detach().float(), y)  # exact values of the bf16 numbers
    torch.testing.assert_close(out["log_probs"].double(), lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["token_entropy"].double(), ent, atol=1e-4, rtol=0)
    out["log_probs"].sum().backward()
    assert z16.grad.dtype == torch.bfloat16
    z32 = z16.detach().float().requires_grad_(True)
    naive(z32, y)[0].sum().backward()
    torch.testing.assert_close(z16.grad.float(), z32.grad, atol=1e-2, rtol=1e-2)


def test_float32_accuracy_at_a_real_vocabulary_size():
    """At V = 151,936 (Qwen) the float32 results stay within 1e-5 of float64 (a plain BLAS dot
    product for the entropy's sum drifted to ~1e-3 here)."""
    gen = torch.Generator().manual_seed(5)
    z = (torch.randn(1, 6, 151_936, generator=gen) * 3).bfloat16()
    y = torch.randint(0, 151_936, (1, 6), generator=gen)
    out = log_probs_from_logits(z, y, return_entropy=True)
    lp, ent = naive(z, y)
    torch.testing.assert_close(out["log_probs"].double(), lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["token_entropy"].double(), ent, atol=1e-5, rtol=0)


def test_saved_state_is_linear_in_tokens_not_vocab():
    """Autograd keeps the logits themselves (no copy) plus O(B*T) tensors, nothing O(B*T*V)."""
    batch, seq, vocab = 2, 16, 500
    z = torch.randn(batch, seq, vocab, requires_grad=True)
    y = torch.randint(0, vocab, (batch, seq))
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = log_probs_from_logits(z, y, chunk_size=8, return_entropy=True)
        (out["log_probs"].sum() + out["token_entropy"].sum()).backward()
    others = [t for t in saved if t.untyped_storage().data_ptr() != z.untyped_storage().data_ptr()]
    assert sum(t.numel() for t in others) <= 4 * batch * seq
    # The naive path, for contrast, saves at least one (B, T, V) tensor of its own.
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.log_softmax(z, -1).gather(-1, y.unsqueeze(-1)).sum().backward()
    others = [t for t in saved if t.untyped_storage().data_ptr() != z.untyped_storage().data_ptr()]
    assert sum(t.numel() for t in others) >= batch * seq * vocab


@given(logits_and_labels(dtype=torch.float32))
def test_vmap_equals_row_by_row(data):
    logits, labels, chunk = data

    def f(z, y):
        return log_probs_from_logits(z, y, chunk_size=chunk, return_entropy=True)

    batched = vmap(f)(logits, labels)
    for i in range(logits.shape[0]):
        row = f(logits[i], labels[i])
        torch.testing.assert_close(batched["log_probs"][i], row["log_probs"])
        torch.testing.assert_close(batched["token_entropy"][i], row["token_entropy"])
    torch.testing.assert_close(vmap(compute_entropy)(logits), compute_entropy(logits))


@given(logits_and_labels())
def test_torch_func_grad_and_vmap_of_grad(data):
    logits, labels, chunk = data

    def loss(z, y):
        out = log_probs_from_logits(z, y, chunk_size=chunk, return_entropy=True)
        total = -out["log_probs"].sum() - 0.1 * out["token_entropy"].sum()
        return total, {"entropy": out["token_entropy"].detach()}

    g, aux = grad(loss, has_aux=True)(logits, labels)
    z = logits.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(loss(z, labels)[0], z)
    torch.testing.assert_close(g, expected)
    torch.testing.assert_close(aux["entropy"], naive(logits, labels)[1])
    per_row = vmap(grad(lambda z, y: loss(z, y)[0]))(logits, labels)
    torch.testing.assert_close(per_row, expected)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="labels shape"):
        log_probs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_size"):
        log_probs_from_logits(
            torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), chunk_size=0
        )


def test_empty_sequence():
    out = log_probs_from_logits(
        torch.zeros(2, 0, 5), torch.zeros(2, 0, dtype=torch.long), return_entropy=True
    )
    assert out["log_probs"].shape == (2, 0) and out["token_entropy"].shape == (2, 0)


@pytest.fixture(scope="module")
def tiny_qwen2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=211,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_get_response_log_probs_on_a_tiny_qwen2(tiny_qwen2, dtype):
    model = tiny_qwen2.to(dtype)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 211, (3, 12), generator=gen)
    input_ids, labels = ids[:, :-1], ids[:, 1:]
    try:
        out = get_response_log_probs(
            model=model, input_ids=input_ids, labels=labels, return_token_entropy=True, chunk_size=5
        )
        assert set(out) == {"log_probs", "token_entropy"}
        assert out["log_probs"].shape == labels.shape == out["token_entropy"].shape
        logits = model(input_ids).logits
        lp, ent = naive(logits.detach().float(), labels)
        torch.testing.assert_close(out["log_probs"].double(), lp, atol=1e-5, rtol=0)
        torch.testing.assert_close(out["token_entropy"].double(), ent, atol=1e-4, rtol=0)
        assert set(get_response_log_probs(model, input_ids, labels)) == {"log_probs"}

        # Gradient with respect to the weights, against the naive path on the same logits.
        mask = torch.rand(labels.shape, generator=gen) > 0.3
        model.zero_grad()
        (get_response_log_probs(model, input_ids, labels)["log_probs"] * mask).sum().backward()
        ours = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        z = model(input_ids).logits.float()
        (
            torch.log_softmax(z, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1) * mask
        ).sum().backward()
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        for a, p in zip(ours, model.parameters(), strict=True):
            torch.testing.assert_close(a.float(), p.grad.float(), atol=tol, rtol=tol)
    finally:
        model.zero_grad()
        model.float()


class _LargestFloat32(TorchDispatchMode):
    """Records the largest float32 tensor any aten op produces (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("via_model", [False, True])
def test_chunk_size_bounds_the_float32_temporaries(via_model):
    """chunk_size counts tokens over all leading dimensions: with bf16 logits (B, T, V) =
    (4, 8, 50) and chunk_size 8, no float32 temporary exceeds 8 * V elements (a whole-tensor
    float32 copy would be 32 * V), also when get_response_log_probs passes chunk_size on."""
    batch, seq, vocab, chunk = 4, 8, 50, 8
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(batch, seq, vocab, generator=gen).bfloat16().requires_grad_(True)
    y = torch.randint(0, vocab, (batch, seq), generator=gen)
    mode = _LargestFloat32()
    with mode:
        if via_model:

            def model(input_ids):
                return SimpleNamespace(logits=z)

            out = get_response_log_probs(model, y, y, return_token_entropy=True, chunk_size=chunk)
        else:
            out = log_probs_from_logits(z, y, chunk_size=chunk, return_entropy=True)
        (out["log_probs"].sum() + out["token_entropy"].sum()).backward()
    assert z.grad is not None and torch.isfinite(z.grad.float()).all()
    assert 0 < mode.largest <= chunk * vocab
