"""The static engine's device side: the preallocated cache, prefill, one decode step over the
live policy's modules, and its capture as a CUDA graph."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from reasoning_core.runtime.engines.static.kernels import (
    _LEN_QUANTUM,
    _Cache,
    _rotate_half,
    _round_up,
)


class DeviceMixin:
    """Cache, prefill, decode step and CUDA-graph capture of :class:`StaticEngine`."""

    def _ensure_cache(self, rows: int, length: int) -> _Cache:
        cache = self._cache
        if cache is not None and cache.rows >= rows and cache.max_len >= length:
            return cache
        if cache is not None:
            rows, length = max(rows, cache.rows), max(length, cache.max_len)
        self.close()
        length = _round_up(length, _LEN_QUANTUM)
        dev, dtype = self.device, next(self.model.parameters()).dtype
        shape = (rows, self.kv_heads, length, self.head_dim)
        layers = len(self.layers)
        # a layer's keys and values share one tensor (2, rows, ...), so that a decode step
        # writes both with one index_copy_
        kv = [torch.zeros((2, *shape), dtype=dtype, device=dev) for _ in range(layers)]
        keys, values = [t[0] for t in kv], [t[1] for t in kv]
        slots = torch.arange(length, device=dev)
        with torch.no_grad():
            probe = torch.zeros(1, dtype=dtype, device=dev)
            cos, sin = self.model.model.rotary_emb(probe, slots[None, :])
        key_base = (
            torch.arange(rows, device=dev)[:, None] * self.kv_heads
            + torch.arange(self.kv_heads, device=dev)[None, :]
        ) * length
        kv_base = torch.cat((key_base, key_base + rows * self.kv_heads * length), dim=1)
        half = self.head_dim // 2
        zeros = torch.zeros(rows, dtype=torch.long, device=dev)
        self._cache = _Cache(
            kv=kv,
            keys=keys,
            values=values,
            cos=cos[0].contiguous(),
            sin=sin[0].contiguous(),
            sin_signed=torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1),
            slots=slots,
            kv_base=kv_base,
            tok=zeros.clone(),
            pos=zeros.clone(),
            count=zeros.clone(),
            rows=rows,
            max_len=length,
        )
        if dev.type == "cuda":
            self._host = [
                (
                    torch.empty(rows, dtype=torch.long, pin_memory=True),
                    torch.empty((rows, 3), dtype=torch.float32, pin_memory=True),
                    torch.cuda.Event(),
                )
                for _ in range(2)
            ]
        self.stats["cache_bytes"] = self._cache.nbytes
        return self._cache

    # -- the model, in two shapes --------------------------------------------------------

    def _fuse_weights(self) -> None:
        """Refresh the stacked projection weights the CPU decode step reads: per layer,
        ``q/k/v_proj`` as one ``(q + 2 kv, hidden)`` weight (and bias) and ``gate/up_proj`` as
        one ``(2 intermediate, hidden)`` weight. One matrix product in place of three (two)
        saves a kernel's fixed cost, which at a small model's sizes is most of a product's
        time on a CPU. Copied at every call (the optimizer updates the policy between calls,
        never during one) into buffers allocated once."""
        if self.device.type != "cpu" or next(self.model.parameters()).dtype != torch.float32:
            return  # CUDA graphs already remove the per-kernel cost; no second weight copy
        projections = [
            (la.self_attn.q_proj, la.self_attn.k_proj, la.self_attn.v_proj) for la in self.layers
        ]
        if any(len({lin.bias is None for lin in qkv}) > 1 for qkv in projections):
            return  # biases on some of q/k/v only: decode with the modules as they are
        with torch.no_grad():
            for i, (layer, qkv) in enumerate(zip(self.layers, projections, strict=True)):
                mlp = layer.mlp
                with_bias = qkv[0].bias is not None
                parts = (
                    [lin.weight for lin in qkv],
                    [lin.bias for lin in qkv] if with_bias else [],
                    [mlp.gate_proj.weight, mlp.up_proj.weight],
                )
                if len(self._fused) == i:
                    weight, bias, gate_up = (torch.cat(p) if p else None for p in parts)
                    assert weight is not None and gate_up is not None
                    self._fused.append((weight, bias, gate_up))
                    continue
                for out, p in zip(self._fused[i], parts, strict=True):
                    if p:
                        torch.cat(p, out=out)

    def _decode(self, tok: Tensor, pos: Tensor, slots: Tensor) -> Tensor:
        """One decode step of ``b = len(tok)`` rows over the first ``span = len(slots)`` slots.

        Writes each row's key/value at ``(row, pos[row])`` in every layer and returns the
        (b, vocab) logits. ``tok``/``pos`` are the first ``b`` rows of the cache's state.
        """
        if self._fused:
            return self._decode_fused(tok, pos, slots)
        cache = self._cache
        assert cache is not None
        model = self.model.model
        b, span = tok.shape[0], slots.shape[0]
        heads, kvh, dim = self.num_heads, self.kv_heads, self.head_dim
        group = heads // kvh
        x = model.embed_tokens(tok)  # (b, hidden)
        cos, sin = cache.cos[pos][:, None, :], cache.sin[pos][:, None, :]  # (b, 1, dim)
        bias = torch.zeros((b, span), dtype=torch.float32, device=tok.device)
        bias = bias.masked_fill(slots[None, :] > pos[:, None], float("-inf"))[:, None, None, :]
        flat = (cache.kv_base[:b] + pos[:, None]).reshape(-1)  # (b * 2 kvh,)
        for layer, kv in zip(self.layers, cache.kv, strict=True):
            keys, values = kv[0], kv[1]
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(b, heads, dim)
            k = attn.k_proj(h).view(b, kvh, dim)
            v = attn.v_proj(h).view(b, kvh, dim)
            if hasattr(attn, "q_norm"):
                q, k = attn.q_norm(q), attn.k_norm(k)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            kv.view(-1, dim).index_copy_(0, flat, torch.cat((k, v), dim=1).view(-1, dim))
            qg = q.view(b, kvh, group, dim)
            scores = torch.matmul(qg, keys[:b, :, :span].transpose(2, 3)) * attn.scaling
            probs = torch.softmax(scores.float() + bias, dim=-1).to(q.dtype)
            out = torch.matmul(probs, values[:b, :, :span]).reshape(b, heads * dim)
            x = x + attn.o_proj(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.lm_head(model.norm(x))

    def _decode_fused(self, tok: Tensor, pos: Tensor, slots: Tensor) -> Tensor:
        """:meth:`_decode` in fewer, larger kernels (for a CPU, where each kernel's fixed cost
        dominates at a small model's sizes): the stacked projections of
        :meth:`_fuse_weights`, one rotation of queries and keys together, the key and value of
        a layer written by one ``index_copy_`` (they share a tensor, see ``_ensure_cache``),
        and scores scaled and masked inside the product (``baddbmm``)."""
        cache = self._cache
        assert cache is not None
        model = self.model.model
        b, span = tok.shape[0], slots.shape[0]
        heads, kvh, dim = self.num_heads, self.kv_heads, self.head_dim
        group = heads // kvh
        x = model.embed_tokens(tok)  # (b, hidden)
        cos, sin = cache.cos[pos][:, None, :], cache.sin_signed[pos][:, None, :]  # (b, 1, dim)
        bias = torch.zeros((b, kvh * group, span), dtype=x.dtype, device=tok.device)
        bias = bias.masked_fill_((slots[None, :] > pos[:, None])[:, None, :], float("-inf"))
        bias = bias.view(b * kvh, group, span)
        flat = (cache.kv_base[:b] + pos[:, None]).reshape(-1)  # (b * 2 kvh,)
        for layer, kv, fused in zip(self.layers, cache.kv, self._fused, strict=True):
            attn = layer.self_attn
            qk, v = self._fused_qkv(
                layer, fused, x, cos, sin
            )  # (b, heads + kvh, dim), (b, kvh, dim)
            new_kv = torch.cat((qk[:, heads:], v), dim=1)
            kv.view(-1, dim).index_copy_(0, flat, new_kv.view(b * 2 * kvh, dim))
            keys = kv[0, :b, :, :span].reshape(b * kvh, span, dim)
            values = kv[1, :b, :, :span].reshape(b * kvh, span, dim)
            q = qk[:, :heads].reshape(b * kvh, group, dim)
            scores = torch.baddbmm(bias, q, keys.transpose(1, 2), alpha=attn.scaling)
            out = torch.bmm(torch.softmax(scores, dim=-1), values).view(b, heads * dim)
            x = self._fused_mlp(layer, fused, x + attn.o_proj(out))
        return self.model.lm_head(_rms_norm(model.norm, x))

    def _fused_qkv(
        self,
        layer: Any,
        fused: tuple[Tensor, Tensor | None, Tensor],
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """A layer's normed input through the stacked q/k/v projection, queries and keys
        rotated together: ``(..., heads + kv_heads, dim)`` and the values ``(..., kv_heads,
        dim)``. ``sin`` is ``sin_signed`` (so the rotation is one concatenation)."""
        attn = layer.self_attn
        heads, kvh, dim = self.num_heads, self.kv_heads, self.head_dim
        half = dim // 2
        qkv_w, qkv_b, _ = fused
        h = _rms_norm(layer.input_layernorm, x)
        qkv = F.linear(h, qkv_w, qkv_b).unflatten(-1, (heads + 2 * kvh, dim))
        qk = qkv[..., : heads + kvh, :]
        if hasattr(attn, "q_norm"):
            qk = torch.cat((attn.q_norm(qk[..., :heads, :]), attn.k_norm(qk[..., heads:, :])), -2)
        qk = qk * cos + torch.cat((qk[..., half:], qk[..., :half]), dim=-1) * sin
        return qk, qkv[..., heads + kvh :, :]

    @staticmethod
    def _fused_mlp(layer: Any, fused: tuple[Tensor, Tensor | None, Tensor], x: Tensor) -> Tensor:
        """``x`` plus the layer's MLP of its normed ``x``, gate and up as one product."""
        mlp = layer.mlp
        gate_up = F.linear(_rms_norm(layer.post_attention_layernorm, x), fused[2])
        inter = gate_up.shape[-1] // 2
        return x + mlp.down_proj(mlp.act_fn(gate_up[..., :inter]) * gate_up[..., inter:])

    def _prefill(self, ids: Tensor, last: Tensor, rows: Tensor, src: Tensor) -> Tensor:
        """Run right-padded prompts ``ids`` (p, width) through the model, copy prompt ``src[i]``'s
        keys/values into slots ``[0, width)`` of cache row ``rows[i]``, and return the (p, vocab)
        logits at each prompt's last token (index ``last``)."""
        cache = self._cache
        assert cache is not None
        model = self.model.model
        p, width = ids.shape
        heads, kvh, dim = self.num_heads, self.kv_heads, self.head_dim
        x = model.embed_tokens(ids)  # (p, width, hidden)
        cos, sin = cache.cos[None, None, :width], cache.sin[None, None, :width]
        fused_cos, fused_sin = cache.cos[:width, None, :], cache.sin_signed[:width, None, :]
        fused_layers = self._fused or [None] * len(self.layers)
        for layer, keys, values, fused in zip(
            self.layers, cache.keys, cache.values, fused_layers, strict=True
        ):
            attn = layer.self_attn
            if fused is not None:
                qk, v = self._fused_qkv(layer, fused, x, fused_cos, fused_sin)
                q, k = qk[:, :, :heads].transpose(1, 2), qk[:, :, heads:].transpose(1, 2)
                v = v.transpose(1, 2)
            else:
                h = layer.input_layernorm(x)
                q = attn.q_proj(h).view(p, width, heads, dim)
                k = attn.k_proj(h).view(p, width, kvh, dim)
                v = attn.v_proj(h).view(p, width, kvh, dim)
                if hasattr(attn, "q_norm"):
                    q, k = attn.q_norm(q), attn.k_norm(k)
                q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                q = q * cos + _rotate_half(q) * sin
                k = k * cos + _rotate_half(k) * sin
            keys[rows, :, :width] = k[src]
            values[rows, :, :width] = v[src]
            group = heads // kvh
            out = F.scaled_dot_product_attention(
                q,
                k.repeat_interleave(group, dim=1),
                v.repeat_interleave(group, dim=1),
                is_causal=True,
                scale=attn.scaling,
            )
            x = x + attn.o_proj(out.transpose(1, 2).reshape(p, width, heads * dim))
            if fused is not None:
                x = self._fused_mlp(layer, fused, x)
            else:
                x = x + layer.mlp(layer.post_attention_layernorm(x))
        final = x[torch.arange(p, device=ids.device), last]  # (p, hidden)
        return self.model.lm_head(model.norm(final))

    def _step_logits(self, b: int, span: int) -> Tensor:
        cache = self._cache
        assert cache is not None
        args = (cache.tok[:b], cache.pos[:b], cache.slots[:span])
        if not self.cuda_graphs:
            return self._step_fn(*args)
        entry = self._graphs.get((b, span))
        if entry is None:
            entry = self._capture(b, span, args)
        graph, out = entry
        graph.replay()
        return out

    def _capture(
        self, b: int, span: int, args: tuple[Tensor, Tensor, Tensor]
    ) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        """Capture the step for ``(b, span)``. The warm-up runs (compilation, allocator,
        library handles) use the live state: they write the same keys/values as the step."""
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._step_fn(*args)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._graph_pool):
                out = self._step_fn(*args)
        except Exception as exc:
            raise RuntimeError(
                f"capturing the decode step ({b} rows, {span} slots) as a CUDA graph failed: "
                f"{exc}; set engine_kwargs.cuda_graphs: false to run it eagerly"
            ) from exc
        if self._graph_pool is None:
            self._graph_pool = graph.pool()
        self._graphs[(b, span)] = (graph, out)
        self.stats["graphs"] += 1
        self.stats["warmup_seconds"] += t1 - t0
        self.stats["capture_seconds"] += time.perf_counter() - t1
        return graph, out

    # -- generation ----------------------------------------------------------------------


def _rms_norm(norm: Any, x: Tensor) -> Tensor:
    """A Llama/Qwen ``RMSNorm`` module applied as one kernel (the same float32 result)."""
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
