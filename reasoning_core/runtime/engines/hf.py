"""Rollouts with a plain Hugging Face model: a batched sampling loop over the KV cache.

For machines without vLLM. The loop is ours rather than ``model.generate`` so that the
returned log-probs, stop strings and ``min_tokens`` follow exactly the semantics documented in
:mod:`reasoning_core.runtime.engines.rollout` (the same as the vLLM engine):

- prompts are left-padded and run as one batch (in chunks of at most ``max_batch_size`` rows of
  prompt x sample); each prompt is prefilled once and its cache repeated for its ``n`` samples;
- every decode step feeds one token per unfinished row through the model with the cache;
  finished rows are dropped from the batch (and the cache) as they finish;
- ``logprobs`` are ``log_softmax`` of the raw logits at the sampled token (the policy's own
  log-probs, independent of temperature/top-p/min_tokens); ``sampling_logprobs`` those under
  the distribution the token was drawn from (EOS blocked before ``min_tokens``, temperature,
  the top-p nucleus renormalized; 0.0 when greedy); ``entropies`` are
  ``-sum(exp(logp) * logp)`` of that same ``log_softmax`` row (one extra elementwise pass over
  the vocabulary per step, no extra forward);
- sampling uses a ``torch.Generator`` seeded from ``params.seed``: same seed -> same outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from reasoning_core.runtime.engines.rollout import Completion, SamplingParams


def model_and_tokenizer(
    model: Any, tokenizer: Any, dtype: torch.dtype | str, *, engine: str
) -> tuple[Any, Any]:
    """What an engine given ``model`` (a module or a model folder) and maybe a tokenizer runs:
    a folder is loaded in ``dtype`` with its own tokenizer when none is given; a module without
    a tokenizer is refused, naming ``engine``."""
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
        raise ValueError(f"{engine} needs a tokenizer")
    return model, tokenizer


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokenizer's EOS id and any listed in the model's ``generation_config`` (both engines
    stop on these)."""
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


def encode_prompts(tokenizer: Any, prompts: list[str] | list[list[int]]) -> list[list[int]]:
    """Token ids of each prompt (no special tokens added); an empty prompt is refused by index.

    A prompt given as a list of token ids is taken as it is (a multi-turn rollout continues
    from the ids it sampled, which re-tokenizing their text need not reproduce)."""
    texts = [(i, p) for i, p in enumerate(prompts) if isinstance(p, str)]
    encoded = [list(map(int, p)) if not isinstance(p, str) else [] for p in prompts]
    if texts:
        ids = tokenizer([p for _, p in texts], add_special_tokens=False)["input_ids"]
        for (i, _), row in zip(texts, ids, strict=True):
            encoded[i] = row
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"prompt {i} is empty after tokenization")
    return encoded


def sampling_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """The engines' random stream: seeded from ``params.seed`` on ``device``, or None (torch's
    global stream) when no seed is given."""
    if params.seed is None:
        return None
    return torch.Generator(device=device).manual_seed(int(params.seed))


def sample_tokens(
    logits: Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> Tensor:
    """Sample one token per row from ``softmax(logits / temperature)`` restricted to the top-p
    nucleus; ``temperature == 0`` is greedy. ``logits`` is (batch, vocab) float32."""
    return sample_with_logprobs(logits, temperature, top_p, generator)[0]


def sample_with_logprobs(
    logits: Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """:func:`sample_tokens`, and each sampled token's log-probability under the distribution
    it was drawn from: ``log_softmax(logits / temperature)`` at the token, or under top-p the
    log of its probability over the nucleus' mass (the nucleus renormalized); 0.0 under greedy
    decoding."""
    if temperature == 0.0:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.zeros(tokens.shape, dtype=torch.float32, device=logits.device)
    scaled = logits / temperature
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the top token always stays)
        drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        tokens = order.gather(-1, choice).squeeze(-1)
        # renormalized in the nucleus; a nucleus of one token gives exactly log(1) = 0
        share = sorted_probs.gather(-1, choice).squeeze(-1) / sorted_probs.sum(dim=-1)
        return tokens, share.log()
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    logp = torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, logp


class HFEngine:
    """Rollout engine over a live Hugging Face causal LM (shares the module, no copy).

    Args:
        model: a causal LM module or a model folder (loaded in ``dtype``, default float32).
        tokenizer: its tokenizer (loaded from the folder when omitted).
        max_batch_size: most rows (prompt x sample) decoded together. Default: 64 on CPU, 256
            otherwise. On CPU, larger batches are slower per token (the dynamic KV cache is
            re-copied every step; docs/benchmarks.md, rollout_throughput).
        dtype: dtype when loading from a folder.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_batch_size: int | None = None,
        dtype: torch.dtype | str = torch.float32,
    ) -> None:
        model, tokenizer = model_and_tokenizer(model, tokenizer, dtype, engine="HFEngine")
        self.model = model
        self.tokenizer = tokenizer
        if max_batch_size is None:
            on_cpu = next(model.parameters()).device.type == "cpu"
            max_batch_size = 64 if on_cpu else 256
        self.max_batch_size = max_batch_size
        self.eos_ids = eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])
        self._token_text: list[str] | None = None

    # -- weights -------------------------------------------------------------------------

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy ``model``'s weights in (a no-op when the engine already wraps ``model``)."""
        if model is self.model:
            return
        self.model.load_state_dict(model.state_dict())

    # -- generation ----------------------------------------------------------------------

    def _piece(self, token_id: int) -> str:
        if self._token_text is None:
            n = len(self.tokenizer)
            self._token_text = self.tokenizer.batch_decode(
                [[i] for i in range(n)], skip_special_tokens=True
            )
        if token_id < len(self._token_text):
            return self._token_text[token_id]
        return ""

    def generate(
        self, prompts: list[str] | list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        if not prompts:
            return []
        encoded = encode_prompts(self.tokenizer, prompts)
        generator = sampling_generator(params, next(self.model.parameters()).device)
        per_chunk = max(1, self.max_batch_size // params.n)
        was_training = self.model.training
        self.model.eval()
        results: list[list[Completion]] = []
        try:
            for start in range(0, len(encoded), per_chunk):
                results.extend(
                    self._generate_chunk(encoded[start : start + per_chunk], params, generator)
                )
        finally:
            self.model.train(was_training)
        return results

    @torch.inference_mode()
    def _generate_chunk(
        self, prompt_ids: list[list[int]], params: SamplingParams, generator: torch.Generator | None
    ) -> list[list[Completion]]:
        from transformers import DynamicCache

        model, n = self.model, params.n
        device = next(model.parameters()).device
        num_prompts = len(prompt_ids)
        width = max(len(ids) for ids in prompt_ids)
        input_ids = torch.full((num_prompts, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((num_prompts, width), dtype=torch.long)
        for i, ids in enumerate(prompt_ids):
            input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attn[i, width - len(ids) :] = 1
        input_ids, attn = input_ids.to(device), attn.to(device)
        position_ids = (attn.cumsum(-1) - 1).clamp(min=0)

        cache = DynamicCache(config=model.config)
        out = model(
            input_ids=input_ids,
            attention_mask=attn,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.past_key_values
        logits = out.logits[:, -1, :]
        next_pos = position_ids[:, -1] + 1
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            attn = attn.repeat_interleave(n, dim=0)
            next_pos = next_pos.repeat_interleave(n, dim=0)

        rows = num_prompts * n
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logps: list[list[float]] = [[] for _ in range(rows)]
        ents: list[list[float]] = [[] for _ in range(rows)]
        drawn: list[list[float]] = [[] for _ in range(rows)]  # under the sampled distribution
        tails = [""] * rows
        done: list[Completion | None] = [None] * rows
        active = list(range(rows))  # row index of each batch position
        eos = torch.tensor(self.eos_ids, dtype=torch.long, device=device)
        eos_set = set(self.eos_ids)
        stops = params.stop
        max_stop = max((len(s) for s in stops), default=0)
        ascii_stops = all(s.isascii() for s in stops)

        for step in range(params.max_tokens):
            logits = logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            if step < params.min_tokens and eos.numel():
                logits = logits.index_fill(-1, eos, float("-inf"))
            sampled, drawn_logp = sample_with_logprobs(
                logits, params.temperature, params.top_p, generator
            )
            sampled_logp = logp.gather(-1, sampled[:, None]).squeeze(-1)
            entropy = -(logp.exp() * logp).sum(-1)
            tok_list, lp_list = sampled.tolist(), sampled_logp.tolist()
            ent_list, drawn_list = entropy.tolist(), drawn_logp.tolist()

            keep: list[int] = []
            for pos, row in enumerate(active):
                tok = tok_list[pos]
                tokens[row].append(tok)
                logps[row].append(lp_list[pos])
                ents[row].append(ent_list[pos])
                drawn[row].append(drawn_list[pos])
                finished = None
                if tok in eos_set and step >= params.min_tokens:
                    finished = self._finish(
                        tokens[row], (logps[row], ents[row], drawn[row]), "stop", params
                    )
                elif stops and len(tokens[row]) > params.min_tokens:
                    piece = self._piece(tok)
                    window = tails[row][-(max_stop - 1) :] if max_stop > 1 else ""
                    window += piece
                    if not ascii_stops or any(s in window for s in stops):
                        finished = self._finish_on_stop(
                            tokens[row], (logps[row], ents[row], drawn[row]), params
                        )
                    tails[row] = window
                elif stops:
                    tails[row] = (tails[row] + self._piece(tok))[-max_stop:]
                if finished is None and len(tokens[row]) >= params.max_tokens:
                    finished = self._finish(
                        tokens[row], (logps[row], ents[row], drawn[row]), "length", params
                    )
                if finished is None:
                    keep.append(pos)
                else:
                    done[row] = finished
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long, device=device)
                cache.batch_select_indices(index)
                attn, next_pos, sampled = attn[index], next_pos[index], sampled[index]
                active = [active[p] for p in keep]
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=-1)
            out = model(
                input_ids=sampled[:, None],
                attention_mask=attn,
                position_ids=next_pos[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_pos = next_pos + 1

        completions = [c for c in done if c is not None]
        assert len(completions) == rows
        return [completions[i * n : (i + 1) * n] for i in range(num_prompts)]

    def _finish(
        self,
        tokens: list[int],
        scores: tuple[list[float], list[float], list[float]],
        reason: str,
        params: SamplingParams,
    ) -> Completion:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if params.stop:
            # A stop string that completed with this very token (EOS/length step) still ends
            # the text there, as in vLLM.
            cut = self._find_stop(text, tokens, params)
            if cut is not None:
                text = cut
        return _completion(text, tokens, scores, reason)

    def _finish_on_stop(
        self,
        tokens: list[int],
        scores: tuple[list[float], list[float], list[float]],
        params: SamplingParams,
    ) -> Completion | None:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        cut = self._find_stop(text, tokens, params)
        if cut is None:
            return None
        return _completion(cut, tokens, scores, "stop")

    def _find_stop(self, text: str, tokens: list[int], params: SamplingParams) -> str | None:
        """The text truncated at the earliest stop string that ends after the ``min_tokens``
        boundary, or None when there is none."""
        if len(tokens) <= params.min_tokens:
            return None
        boundary = 0
        if params.min_tokens:
            boundary = len(
                self.tokenizer.decode(tokens[: params.min_tokens], skip_special_tokens=True)
            )
        best: tuple[int, int] | None = None  # (end, start)
        for s in params.stop:
            idx = text.find(s, max(0, boundary - len(s) + 1))
            if idx != -1 and (best is None or idx + len(s) < best[0]):
                best = (idx + len(s), idx)
        if best is None:
            return None
        end, start = best
        return text[:end] if params.include_stop_str_in_output else text[:start]


def _completion(
    text: str,
    tokens: list[int],
    scores: tuple[list[float], list[float], list[float]],
    reason: str,
) -> Completion:
    """A finished completion; ``scores`` are the raw log-probs, the entropies and the log-probs
    under the sampled distribution, one per token."""
    logps, ents, drawn = scores
    return Completion(
        text=text,
        token_ids=list(tokens),
        logprobs=list(logps),
        finish_reason=reason,
        entropies=list(ents),
        sampling_logprobs=list(drawn),
    )
