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
  row bucket, and the smaller step runs from then on. Buckets are the powers of two (one
  captured graph each) and, for eager steps with ``engine_kwargs.row_step`` set, every multiple
  of it: with 8, a GRPO batch of 16 x 8 rollouts on the tiny world spends 96% of its decode
  row-steps on live rows instead of 67%.
- **Sampling on the device**, with the semantics of :mod:`reasoning_core.runtime.engines.rollout` and
  the HF engine's ``sample_tokens``: greedy at ``temperature=0``; otherwise
  ``softmax(logits / T)`` restricted to the smallest top-p prefix, drawn by inverting its
  cumulative sum at one uniform per row (``searchsorted``, no host sync; ``torch.multinomial``
  draws one exponential per vocabulary entry instead); EOS is masked for rows with fewer than
  ``min_tokens`` tokens; the log-prob returned is ``logits[token] - logsumexp(logits)`` of the
  raw logits (temperature 1, no top-p), the entropy returned that raw distribution's (the
  ``logsumexp`` shared), and ``sampling_logprobs`` the token's log-prob under the distribution
  it was drawn from (EOS masked, temperature, the top-p nucleus renormalized; 0.0 when greedy;
  no extra work at temperature 1, top-p 1, no ``min_tokens``, where it is the raw one). One
  ``torch.Generator`` seeded from ``params.seed`` drives every draw.
- **Host side, one step behind.** Token ids, both log-probs and entropies are copied to pinned host memory
  asynchronously; the host appends them, watches EOS, ``max_tokens`` and stop strings (vLLM's
  semantics, as the HF engine) for step ``t`` while the GPU runs step ``t + 1``.

Supported models: the Llama-style decoders of ``transformers`` (``model_type`` qwen2, qwen3,
llama) with full attention and a rotary embedding that does not depend on the sequence length.
"""

from reasoning_core.runtime.engines.static.engine import StaticEngine
from reasoning_core.runtime.engines.static.kernels import (
    cache_bytes,
    check_supported,
    row_buckets,
    sample_on_device,
)

__all__ = ["StaticEngine", "cache_bytes", "check_supported", "row_buckets", "sample_on_device"]
