"""The table both engines' samplers are held to: for logits of ``PROBS``, the frequencies each
temperature and top_p must give, and the check of ``ROWS`` draws against them (the HF
engine's ``sample_with_logprobs``, tests/runtime/engines/test_hf.py, and the static engine's
``sample_on_device``, tests/runtime/engines/test_static.py)."""

from __future__ import annotations

import pytest
import torch

PROBS = (0.5, 0.3, 0.2)
ROWS = 20_000

temperature_and_top_p = pytest.mark.parametrize(
    ("temperature", "top_p", "expected"),
    [
        (1.0, 1.0, [0.5, 0.3, 0.2]),
        (0.5, 1.0, [25 / 38, 9 / 38, 4 / 38]),  # softmax(logits / T): p**2, renormalized
        (1.0, 0.6, [5 / 8, 3 / 8, 0.0]),  # nucleus: the smallest prefix whose mass reaches 0.6
        (1.0, 0.5, [1.0, 0.0, 0.0]),  # the top token alone reaches 0.5
        (0.0, 1.0, [1.0, 0.0, 0.0]),  # greedy
    ],
)


def logits(rows: int = ROWS) -> torch.Tensor:
    """``rows`` identical rows of log ``PROBS``."""
    return torch.tensor(PROBS).log().expand(rows, -1).contiguous()


def assert_follows(tokens: torch.Tensor, drawn: torch.Tensor, expected: list[float]) -> None:
    """The draws' frequencies are ``expected`` (20,000 draws: a frequency's standard error is
    at most 0.0035, the tolerance 4.3x it), and each token's sampling log-prob ``drawn`` is
    that of the distribution the draws follow."""
    freq = torch.bincount(tokens, minlength=len(expected)).float() / len(tokens)
    torch.testing.assert_close(freq, torch.tensor(expected), atol=0.015, rtol=0)
    torch.testing.assert_close(drawn, torch.tensor(expected).log()[tokens])
