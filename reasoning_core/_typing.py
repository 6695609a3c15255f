"""Shape vocabulary for the jaxtyping annotations of the core.

Dimension names used throughout: ``batch`` (any number of leading dimensions, written
``*batch`` so that ``torch.func.vmap`` may strip some of them), ``seq`` (token positions),
``vocab`` (vocabulary), ``group`` (responses per prompt) and ``n`` (responses in a flat
batch). The annotations are inert at run time; the tests wrap the public functions with
``jaxtyping.jaxtyped(typechecker=beartype)`` to check that the annotations hold, both on
plain calls and inside ``vmap``.
"""

from __future__ import annotations

from jaxtyping import Bool, Float, Int, Shaped
from torch import Tensor

__all__ = ["Bool", "Float", "Int", "Shaped", "Tensor"]
