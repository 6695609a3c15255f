"""The static engine's host side of a completion: tokens appended, EOS, stop strings and
``max_tokens`` watched with vLLM's semantics (as the HF engine)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reasoning_core.runtime.engines.rollout import Completion, SamplingParams


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
    entropies: list[float] = field(default_factory=list)
    sampling_logprobs: list[float] = field(default_factory=list)
    tail: str = ""  # the last characters of the text, to spot a stop string cheaply
    done: Completion | None = None


class TextMixin:
    """Turning sampled tokens into :class:`Completion` objects (needs ``tokenizer``,
    ``eos_ids``, ``_token_text`` and ``_stop_shape`` on the engine)."""

    def _piece(self, token_id: int) -> str:
        if self._token_text is None:
            n = len(self.tokenizer)
            self._token_text = self.tokenizer.batch_decode(
                [[i] for i in range(n)], skip_special_tokens=True
            )
        return self._token_text[token_id] if token_id < len(self._token_text) else ""

    def _advance(
        self,
        sample: _Sample,
        tok: int,
        scores: tuple[float, float, float],
        params: SamplingParams,
    ) -> bool:
        """Append one token and its ``scores`` (raw log-prob, entropy, log-prob under the sampled
        distribution) to ``sample``; True when that finished it (``sample.done`` set)."""
        sample.tokens.append(tok)
        sample.logprobs.append(scores[0])
        sample.entropies.append(scores[1])
        sample.sampling_logprobs.append(scores[2])
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
            entropies=list(sample.entropies),
            sampling_logprobs=list(sample.sampling_logprobs),
        )
