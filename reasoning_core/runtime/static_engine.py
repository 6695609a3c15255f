"""Rollouts over a preallocated (static) KV cache, with CUDA-graph decode steps on a GPU.

The ``"static"`` engine runs the live policy module (its own embedding, projections, norms, MLPs
and rotary embedding, so an in-place optimizer step or ``load_state_dict`` is seen at the next
call with no copy) through a decode loop written for fixed shapes:

- **Cache layout.** One key and one value tensor per layer, ``(rows, kv_heads, max_len,
  head_dim)`` in the model's dtype, allocated once and grown only when a call needs more rows
  or a longer sequence (``max_len`` is rounded up to a multiple of 128). A row holds one
  completion with its prompt *right-aligned at slot 0*: prompt token ``i`` at slot ``i``,
  generated token ``j`` at slot ``len(prompt) + j``; position id = slot, as the Hugging Face
  engine's ``cumsum(attention_mask) - 1`` gives for left-padded prompts. Memory:
  ``2 * layers * rows * kv_heads * max_len * head_dim * bytes`` (8.5 GiB for Qwen2.5-1.5B at
  256 rows x 1,152 slots in bf16).
- **Prefill.** The prompts that start are right-padded into one batch (split to keep at most
  ``prefill_tokens`` padded tokens per forward), run once with causal attention (a padded
  position is never seen by a real one), and each prompt's keys/values are copied into the rows
  of its samples; the first token of every row is sampled from its prompt's last logits.
- **Decode step.** Every row feeds its last token at slot ``pos``; the step writes that token's
  key/value at ``(row, pos)`` (one ``index_copy_`` per layer), attends over the first ``span``
  slots with the mask ``slot <= pos`` (query heads grouped onto their key/value head, so the
  cache is read once, no ``repeat_kv``), and returns the logits. Shapes depend only on
  ``(rows, span)``: on CUDA each pair is captured once as a CUDA graph (after two warm-up runs
  on the live state, which rewrite exactly the values the step itself writes) and replayed;
  ``span`` is rounded up to a multiple of ``span_step`` (256) so few graphs cover a call.
  ``compile=True`` also fuses the step with ``torch.compile`` (inductor) before capture.
- **Finished rows cost little.** A row that finished keeps running (its tokens are ignored)
  until one of two things reclaims it: while prompts wait, free rows are *refilled* (prefilled
  with the next prompt-samples) once at least ``rows / 8`` are free, or every waiting one fits;
  once none wait, the live rows are *compacted* into the first rows whenever they fit a smaller
  row bucket (powers of two), and the smaller (captured) step runs from then on.
- **Sampling on the device**, with the semantics of :mod:`reasoning_core.runtime.rollout` and
  the HF engine's ``sample_tokens``: greedy at ``temperature=0``; otherwise
  ``softmax(logits / T)`` restricted to the smallest top-p prefix, drawn by the exponential race
  ``argmax(p / E)`` with ``E ~ Exp(1)`` (which is how ``torch.multinomial`` draws one sample,
  without its host sync); EOS is masked for rows with fewer than ``min_tokens`` tokens; the
  log-prob returned is ``logits[token] - logsumexp(logits)`` of the raw logits (temperature 1,
  no top-p). One ``torch.Generator`` seeded from ``params.seed`` drives every draw.
- **Host side, one step behind.** Token ids and log-probs are copied to pinned host memory
  asynchronously; the host appends them, watches EOS, ``max_tokens`` and stop strings (vLLM's
  semantics, as the HF engine) for step ``t`` while the GPU runs step ``t + 1``.

Supported models: the Llama-style decoders of ``transformers`` (``model_type`` qwen2, qwen3,
llama) with full attention and a rotary embedding that does not depend on the sequence length.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from reasoning_core.runtime.rollout import Completion, SamplingParams

SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama")
_LEN_QUANTUM = 128  # cache lengths are rounded up to this, so nearby calls reuse the cache


def _round_up(x: int, q: int) -> int:
    return -(-x // q) * q


def row_buckets(capacity: int) -> list[int]:
    """The row counts a decode step runs at: powers of two below ``capacity``, and it."""
    sizes, b = {capacity}, 1
    while b < capacity:
        sizes.add(b)
        b *= 2
    return sorted(sizes)


def _smallest_at_least(k: int, sizes: list[int]) -> int:
    return next(s for s in sizes if s >= k)


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokenizer's EOS id and any listed in the model's ``generation_config``."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_cfg = getattr(model, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None) if gen_cfg is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif extra:
        ids.update(int(i) for i in extra)
    return sorted(ids)


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
) -> tuple[Tensor, Tensor]:
    """Sample one token per row; no host synchronisation.

    Args:
        logits: (rows, vocab) raw logits of the policy.
        count: (rows,) tokens each row has generated so far; EOS is masked where
            ``count < params.min_tokens``.
        eos_mask: (vocab,) bool, True at the EOS ids.
        params: temperature (0 = greedy) and top_p as in ``SamplingParams``.
        generator: the call's generator (None: torch's default one).

    Returns:
        ``(tokens, logprobs)``, both (rows,): the sampled ids and
        ``logits[token] - logsumexp(logits)`` (float32), the raw policy's log-probability.
    """
    logits = logits.float()
    masked = logits
    if params.min_tokens > 0:
        blocked = (count < params.min_tokens)[:, None] & eos_mask[None, :]
        masked = logits.masked_fill(blocked, float("-inf"))
    if params.temperature == 0.0:
        tokens = masked.argmax(dim=-1)
    else:
        scaled = masked if params.temperature == 1.0 else masked / params.temperature
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # the smallest prefix whose mass reaches top_p (the top token always stays)
            drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= params.top_p
            choice = _exponential_race(sorted_probs.masked_fill(drop, 0.0), generator)
            tokens = order.gather(-1, choice[:, None]).squeeze(-1)
        else:
            tokens = _exponential_race(probs, generator)
    logp = logits.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return tokens, logp


def _exponential_race(weights: Tensor, generator: torch.Generator | None) -> Tensor:
    """One index per row drawn with probability ``weights / weights.sum()``:
    ``argmax(w / E)`` with i.i.d. ``E ~ Exp(1)`` (the smallest ``E / w`` wins a race of
    exponential clocks of rates ``w``). ``E`` is kept above 0 so a zero weight never wins."""
    race = torch.empty_like(weights).exponential_(generator=generator)
    return (weights / race.clamp_min_(torch.finfo(race.dtype).tiny)).argmax(dim=-1)


# -- host-side text handling (vLLM's stop-string semantics, as the HF engine) --------------


def _find_stop(tokenizer: Any, text: str, tokens: list[int], params: SamplingParams) -> str | None:
    """``text`` cut at the stop string that ends first among those ending after the
    ``min_tokens`` boundary (kept or dropped per ``include_stop_str_in_output``); None if none."""
    if len(tokens) <= params.min_tokens:
        return None
    boundary = 0
    if params.min_tokens:
        boundary = len(tokenizer.decode(tokens[: params.min_tokens], skip_special_tokens=True))
    best: tuple[int, int] | None = None  # (end, start)
    for s in params.stop:
        start = text.find(s, max(0, boundary - len(s) + 1))
        if start != -1 and (best is None or start + len(s) < best[0]):
            best = (start + len(s), start)
    if best is None:
        return None
    end, start = best
    return text[:end] if params.include_stop_str_in_output else text[:start]


@dataclass
class _Sample:
    """The growing completion of one (prompt, sample) pair."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tail: str = ""  # the last characters of the text, to spot a stop string cheaply
    done: Completion | None = None


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


class StaticEngine:
    """Rollout engine over a live Hugging Face causal LM with a static KV cache.

    Args:
        model: a causal LM module (qwen2/qwen3/llama) or a model folder (loaded in ``dtype``).
        tokenizer: its tokenizer (loaded from the folder when omitted).
        max_batch_size: most rows (prompt x sample) decoded together; default 64 on CPU, 256
            on a GPU.
        max_model_len: preallocate the cache for prompts + completions this long (it grows on
            demand otherwise).
        dtype: dtype when loading from a folder.
        cuda_graphs: capture decode steps as CUDA graphs (default: True on CUDA; CPU: False).
        compile: fuse the decode step with ``torch.compile`` (inductor) first.
        span_step: attention spans are rounded up to a multiple of this (default 256 with CUDA
            graphs, to bound the number of graphs; 1 otherwise: attend to exactly what is used).
        prefill_tokens: most padded prompt tokens in one prefill forward.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_batch_size: int | None = None,
        max_model_len: int | None = None,
        dtype: torch.dtype | str = torch.float32,
        cuda_graphs: bool | None = None,
        compile: bool = False,
        span_step: int | None = None,
        prefill_tokens: int = 32768,
    ) -> None:
        if isinstance(model, (str, Path)):
            from transformers import AutoModelForCausalLM

            if isinstance(dtype, str):
                dtype = getattr(torch, dtype)
            path = str(model)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
            if tokenizer is None:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer is None:
            raise ValueError("StaticEngine needs a tokenizer")
        check_supported(model)
        self.model = model
        self.tokenizer = tokenizer
        param = next(model.parameters())
        self.device = param.device
        on_cuda = self.device.type == "cuda"
        if cuda_graphs is None:
            cuda_graphs = on_cuda
        if cuda_graphs and not on_cuda:
            raise ValueError(f"engine_kwargs.cuda_graphs needs a CUDA model, got {self.device}")
        self.cuda_graphs = bool(cuda_graphs)
        self.compile = bool(compile)
        if span_step is None:
            span_step = 256 if self.cuda_graphs else 1
        if span_step < 1:
            raise ValueError(f"engine_kwargs.span_step must be >= 1, got {span_step}")
        self.span_step = span_step
        if max_batch_size is None:
            max_batch_size = 256 if on_cuda else 64
        if max_batch_size < 1:
            raise ValueError(f"engine_kwargs.max_batch_size must be >= 1, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self.prefill_tokens = prefill_tokens
        self.eos_ids = eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.eos_ids or [0])[0])

        config = model.config
        attn = model.model.layers[0].self_attn
        self.num_heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(attn.head_dim)
        self.layers = list(model.model.layers)
        self.vocab = int(model.get_output_embeddings().weight.shape[0])
        self.eos_mask = torch.zeros(self.vocab, dtype=torch.bool, device=self.device)
        for i in self.eos_ids:
            if i < self.vocab:
                self.eos_mask[i] = True

        self._cache: _Cache | None = None
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        self._graph_pool: Any = None
        self._weights_seen: tuple[int, ...] = ()
        # dynamic=True: one compilation serves every (rows, span) shape (0/1 sizes aside)
        self._step_fn = (
            torch.compile(self._decode, fullgraph=True, dynamic=True) if compile else self._decode
        )
        self._token_text: list[str] | None = None
        self._stop_shape: tuple[int, bool] = (0, True)
        self._host: list[tuple[Tensor, Tensor, Any]] = []
        self.stats: dict[str, float] = {
            "graphs": 0,
            "warmup_seconds": 0.0,
            "capture_seconds": 0.0,
            "prefill_seconds": 0.0,
            "decode_steps": 0,
            "refills": 0,
            "compactions": 0,
            "cache_bytes": 0,
        }
        if max_model_len is not None:
            self._ensure_cache(max_batch_size, max_model_len)

    # -- weights -------------------------------------------------------------------------

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy ``model``'s weights in place (a no-op when the engine runs ``model`` itself:
        the engine reads the module's parameters at every step)."""
        if model is self.model:
            return
        self.model.load_state_dict(model.state_dict())

    def _weights_signature(self) -> tuple[int, ...]:
        """Storage addresses of every parameter and buffer: a captured graph reads these, so a
        parameter replaced by a new tensor (not updated in place) means capturing again."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        return tuple(t.data_ptr() for t in tensors)

    def close(self) -> None:
        """Free the cache and the captured graphs."""
        self._graphs.clear()
        self._graph_pool = None
        self._cache = None
        self._host = []
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- cache ---------------------------------------------------------------------------

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
                    torch.empty(rows, dtype=torch.float32, pin_memory=True),
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

    def _piece(self, token_id: int) -> str:
        if self._token_text is None:
            n = len(self.tokenizer)
            self._token_text = self.tokenizer.batch_decode(
                [[i] for i in range(n)], skip_special_tokens=True
            )
        return self._token_text[token_id] if token_id < len(self._token_text) else ""

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        if not prompts:
            return []
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        for i, ids in enumerate(encoded):
            if not ids:
                raise ValueError(f"prompt {i} is empty after tokenization")
        generator = None
        if params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(int(params.seed))
        units = len(prompts) * params.n
        capacity = min(units, self.max_batch_size)
        rows = _smallest_at_least(capacity, row_buckets(self.max_batch_size))
        self._ensure_cache(rows, max(len(ids) for ids in encoded) + params.max_tokens)
        signature = self._weights_signature()
        if signature != self._weights_seen:
            self._graphs.clear()  # a parameter was replaced (not updated in place)
            self._weights_seen = signature
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                samples = self._run(encoded, params, generator)
        finally:
            self.model.train(was_training)
        n = params.n
        done = [s.done for s in samples]
        assert all(c is not None for c in done)
        return [done[i * n : (i + 1) * n] for i in range(len(prompts))]  # type: ignore[misc]

    def _run(
        self, encoded: list[list[int]], params: SamplingParams, generator: torch.Generator | None
    ) -> list[_Sample]:
        """The decode loop over all ``len(encoded) * n`` samples (sample ``u`` is prompt
        ``u // n``); returns them finished."""
        cache = self._cache
        assert cache is not None
        n = params.n
        stops = params.stop
        # (longest stop string, all ASCII): a stop string can only complete inside the last
        # ``longest - 1`` characters plus the new token's text, when characters are bytes
        self._stop_shape = (max(map(len, stops), default=0), all(s.isascii() for s in stops))
        samples = [_Sample() for _ in range(len(encoded) * n)]
        pending = deque(range(len(samples)))
        buckets = row_buckets(cache.rows)
        b = _smallest_at_least(min(len(samples), cache.rows), buckets)
        owner: list[int | None] = [None] * b  # the sample each row decodes
        row_of: dict[int, int] = {}
        pos_host = [0] * b  # mirror of cache.pos[:b]
        last_slot = cache.max_len - 1

        def start(free: list[int]) -> None:
            while free and pending:
                take = [pending.popleft() for _ in range(min(len(free), len(pending)))]
                rows, free[:] = free[: len(take)], free[len(take) :]
                for r, u in zip(rows, take, strict=True):
                    owner[r], row_of[u] = u, r
                    pos_host[r] = len(encoded[u // n])
                for r, u, tok, lp in self._start(rows, take, encoded, n, params, generator):
                    if self._advance(samples[u], tok, lp, params):  # done at its first token
                        owner[r] = None
                        del row_of[u]
                        free.append(r)

        start(list(range(b)))
        in_flight: tuple[list[int | None], Any] | None = None
        slot = 0
        while True:
            snapshot = list(owner)
            live = [pos_host[r] for r, u in enumerate(snapshot) if u is not None]
            launched = None
            if live:
                span = min(cache.max_len, _round_up(max(live) + 1, self.span_step))
                launched = (snapshot, self._launch(b, span, params, generator, slot))
                slot ^= 1
                pos_host = [min(p + 1, last_slot) for p in pos_host]
            if in_flight is not None:
                rows_of_step, handle = in_flight
                toks, lps = self._collect(handle, len(rows_of_step))
                for u, tok, lp in zip(rows_of_step, toks, lps, strict=True):
                    if u is None or samples[u].done is not None:
                        continue
                    if self._advance(samples[u], tok, lp, params):
                        owner[row_of.pop(u)] = None
            in_flight = launched
            if in_flight is None and not pending:
                break
            free = [r for r in range(b) if owner[r] is None]
            if pending and free:
                if len(free) >= max(1, b // 8) or len(free) >= len(pending) or not live:
                    self.stats["refills"] += 1
                    start(free)
            elif not pending:
                alive = [r for r in range(b) if owner[r] is not None]
                smaller = _smallest_at_least(max(1, len(alive)), buckets)
                if alive and smaller < b:
                    self._compact(alive)
                    self.stats["compactions"] += 1
                    owner = [owner[r] for r in alive] + [None] * (smaller - len(alive))
                    pos_host = [pos_host[r] for r in alive] + [0] * (smaller - len(alive))
                    for new, u in enumerate(owner):
                        if u is not None:
                            row_of[u] = new
                    b = smaller
        return samples

    def _start(
        self,
        rows: list[int],
        units: list[int],
        encoded: list[list[int]],
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> list[tuple[int, int, int, float]]:
        """Prefill the prompts of samples ``units`` into cache ``rows``, sample each first token
        and set the rows' device state; returns ``(row, unit, token, logprob)``."""
        cache = self._cache
        assert cache is not None
        t0 = time.perf_counter()
        dev = self.device
        prompt_ids = list(dict.fromkeys(u // n for u in units))  # distinct, in order
        chunks: list[list[int]] = [[]]
        width = 0
        for pid in prompt_ids:  # greedy: at most prefill_tokens padded tokens per forward
            width = max(width, len(encoded[pid]))
            if chunks[-1] and (len(chunks[-1]) + 1) * width > self.prefill_tokens:
                chunks.append([])
                width = len(encoded[pid])
            chunks[-1].append(pid)
        logits: dict[int, Tensor] = {}
        for chunk in chunks:
            width = max(len(encoded[c]) for c in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            for j, c in enumerate(chunk):
                ids[j, : len(encoded[c])] = torch.tensor(encoded[c], dtype=torch.long)
            local = {c: j for j, c in enumerate(chunk)}
            pairs = [
                (r, local[u // n]) for r, u in zip(rows, units, strict=True) if u // n in local
            ]
            dest = torch.tensor([r for r, _ in pairs], dtype=torch.long, device=dev)
            src = torch.tensor([j for _, j in pairs], dtype=torch.long, device=dev)
            last = torch.tensor([len(encoded[c]) - 1 for c in chunk], dtype=torch.long, device=dev)
            out = self._prefill(ids.to(dev), last, dest, src)
            for j, c in enumerate(chunk):
                logits[c] = out[j]
        first_logits = torch.stack([logits[u // n] for u in units])
        zero = torch.zeros(len(units), dtype=torch.long, device=dev)
        tok, logp = sample_on_device(first_logits, zero, self.eos_mask, params, generator)
        index = torch.tensor(rows, dtype=torch.long, device=dev)
        lengths = torch.tensor([len(encoded[u // n]) for u in units], dtype=torch.long, device=dev)
        cache.tok.index_copy_(0, index, tok)
        cache.pos.index_copy_(0, index, lengths)
        cache.count.index_fill_(0, index, 1)
        toks, lps = tok.tolist(), logp.tolist()
        self.stats["prefill_seconds"] += time.perf_counter() - t0
        return list(zip(rows, units, toks, lps, strict=True))

    def _launch(
        self,
        b: int,
        span: int,
        params: SamplingParams,
        generator: torch.Generator | None,
        slot: int,
    ) -> Any:
        """Queue one decode step of the first ``b`` rows (forward, sampling, state update) and
        the copy of its tokens/log-probs to the host; returns what :meth:`_collect` reads."""
        cache = self._cache
        assert cache is not None
        logits = self._step_logits(b, span)
        tok, logp = sample_on_device(logits, cache.count[:b], self.eos_mask, params, generator)
        cache.tok[:b].copy_(tok)
        cache.pos[:b].add_(1).clamp_(max=cache.max_len - 1)
        cache.count[:b].add_(1)
        self.stats["decode_steps"] += 1
        if not self._host:
            return tok, logp
        tok_host, logp_host, event = self._host[slot]
        tok_host[:b].copy_(tok, non_blocking=True)
        logp_host[:b].copy_(logp, non_blocking=True)
        event.record()
        return tok_host, logp_host, event

    def _collect(self, handle: Any, b: int) -> tuple[list[int], list[float]]:
        if len(handle) == 3:
            tok_host, logp_host, event = handle
            event.synchronize()
            return tok_host[:b].tolist(), logp_host[:b].tolist()
        tok, logp = handle
        return tok.tolist(), logp.tolist()

    def _compact(self, alive: list[int]) -> None:
        """Move rows ``alive`` (cache and state) to rows ``0 .. len(alive) - 1``."""
        cache = self._cache
        assert cache is not None
        k = len(alive)
        index = torch.tensor(alive, dtype=torch.long, device=self.device)
        for t in [*cache.keys, *cache.values, cache.tok, cache.pos, cache.count]:
            t[:k] = t.index_select(0, index)

    def _advance(self, sample: _Sample, tok: int, logp: float, params: SamplingParams) -> bool:
        """Append one token to ``sample``; True when that finished it (``sample.done`` set)."""
        sample.tokens.append(tok)
        sample.logprobs.append(logp)
        count = len(sample.tokens)
        stops = params.stop
        if tok in self.eos_ids and count > params.min_tokens:
            sample.done = self._complete(sample, "stop", params)
        elif stops:
            piece = self._piece(tok)
            longest, ascii_stops = self._stop_shape
            if count > params.min_tokens:
                window = (sample.tail[-(longest - 1) :] if longest > 1 else "") + piece
                if not ascii_stops or any(s in window for s in stops):
                    text = self.tokenizer.decode(sample.tokens, skip_special_tokens=True)
                    cut = _find_stop(self.tokenizer, text, sample.tokens, params)
                    if cut is not None:
                        sample.done = self._completion(sample, cut, "stop")
                sample.tail = window
            else:
                sample.tail = (sample.tail + piece)[-longest:]
        if sample.done is None and count >= params.max_tokens:
            sample.done = self._complete(sample, "length", params)
        return sample.done is not None

    def _complete(self, sample: _Sample, reason: str, params: SamplingParams) -> Completion:
        text = self.tokenizer.decode(sample.tokens, skip_special_tokens=True)
        if params.stop:
            # a stop string completed by this very (EOS or last) token still ends the text
            cut = _find_stop(self.tokenizer, text, sample.tokens, params)
            text = text if cut is None else cut
        return self._completion(sample, text, reason)

    @staticmethod
    def _completion(sample: _Sample, text: str, reason: str) -> Completion:
        return Completion(
            text=text,
            token_ids=list(sample.tokens),
            logprobs=list(sample.logprobs),
            finish_reason=reason,
        )


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


__all__ = ["StaticEngine", "cache_bytes", "check_supported", "row_buckets", "sample_on_device"]
