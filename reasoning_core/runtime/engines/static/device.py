"""The static engine's device side: the preallocated cache, prefill, one decode step over the
live policy's modules, and its capture as a CUDA graph."""

from __future__ import annotations

import time

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
        keys = [torch.zeros(shape, dtype=dtype, device=dev) for _ in range(layers)]
        values = [torch.zeros(shape, dtype=dtype, device=dev) for _ in range(layers)]
        slots = torch.arange(length, device=dev)
        with torch.no_grad():
            probe = torch.zeros(1, dtype=dtype, device=dev)
            cos, sin = self.model.model.rotary_emb(probe, slots[None, :])
        row_base = (
            torch.arange(rows, device=dev)[:, None] * self.kv_heads
            + torch.arange(self.kv_heads, device=dev)[None, :]
        ) * length
        zeros = torch.zeros(rows, dtype=torch.long, device=dev)
        self._cache = _Cache(
            keys=keys,
            values=values,
            cos=cos[0].contiguous(),
            sin=sin[0].contiguous(),
            slots=slots,
            row_base=row_base,
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

    def _decode(self, tok: Tensor, pos: Tensor, slots: Tensor) -> Tensor:
        """One decode step of ``b = len(tok)`` rows over the first ``span = len(slots)`` slots.

        Writes each row's key/value at ``(row, pos[row])`` in every layer and returns the
        (b, vocab) logits. ``tok``/``pos`` are the first ``b`` rows of the cache's state.
        """
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
        flat = (cache.row_base[:b] + pos[:, None]).reshape(-1)  # (b * kvh,)
        for layer, keys, values in zip(self.layers, cache.keys, cache.values, strict=True):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(b, heads, dim)
            k = attn.k_proj(h).view(b, kvh, dim)
            v = attn.v_proj(h).view(b, kvh, dim)
            if hasattr(attn, "q_norm"):
                q, k = attn.q_norm(q), attn.k_norm(k)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys.view(-1, dim).index_copy_(0, flat, k.reshape(b * kvh, dim))
            values.view(-1, dim).index_copy_(0, flat, v.reshape(b * kvh, dim))
            qg = q.view(b, kvh, group, dim)
            scores = torch.matmul(qg, keys[:b, :, :span].transpose(2, 3)) * attn.scaling
            probs = torch.softmax(scores.float() + bias, dim=-1).to(q.dtype)
            out = torch.matmul(probs, values[:b, :, :span]).reshape(b, heads * dim)
            x = x + attn.o_proj(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.lm_head(model.norm(x))

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
        for layer, keys, values in zip(self.layers, cache.keys, cache.values, strict=True):
            attn = layer.self_attn
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
