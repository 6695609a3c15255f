"""Setting ``engine: auto`` and per-engine ``engine_kwargs`` (the GPU configs use
the static engine when vLLM is not installed).

The rule: ``vllm`` when the vllm package imports and the policy's device is CUDA, ``static`` on
CUDA without vLLM, ``hf`` otherwise. Whether vLLM imports is monkeypatched, so the whole table
runs on a CPU; no CUDA tensor is made (``torch.device("cuda")`` is only a name).
"""

from __future__ import annotations

import json

import pytest
import yaml
from micro_world import sets
from project_root import ROOT
from tiny_model import save_tiny_model

from reasoning_core.runtime import engines
from reasoning_core.runtime.engines import resolve_engine
from reasoning_core.runtime.engines.hf import HFEngine
from reasoning_core.runtime.engines.static.engine import StaticEngine
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation import evaluate
from reasoning_core.runtime.trainers import lifecycle as run
from reasoning_core.runtime.trainers import sft
from reasoning_core.runtime.training.settings import (
    CommonConfig,
    check_engine_settings,
    engine_options,
)


def _no_import():
    raise AssertionError("vllm must not even be tried off CUDA")


@pytest.mark.parametrize(
    ("importable", "device", "expected"),
    [
        (True, "cuda", "vllm"),
        (True, "cuda:1", "vllm"),
        (False, "cuda", "static"),
        (False, "cuda:0", "static"),
        (True, "cpu", "hf"),
        (False, "cpu", "hf"),
    ],
)
def test_auto_resolution_table(monkeypatch, importable, device, expected):
    monkeypatch.setattr(engines, "vllm_importable", lambda: importable)
    assert resolve_engine("auto", device) == expected
    # A named engine is itself whatever the machine has.
    for kind in engines.ENGINES:
        assert resolve_engine(kind, device) == kind


def test_auto_does_not_try_vllm_off_cuda(monkeypatch):
    monkeypatch.setattr(engines, "vllm_importable", _no_import)
    assert resolve_engine("auto", "cpu") == "hf"


def test_vllm_importable_is_false_when_the_import_fails(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "vllm":
            raise ImportError("no vllm here")
        return real_import(name, *args, **kwargs)

    engines.vllm_importable.cache_clear()
    monkeypatch.setattr(builtins, "__import__", fake_import)
    try:
        assert engines.vllm_importable() is False
    finally:
        engines.vllm_importable.cache_clear()


PER_ENGINE = {"vllm": {"gpu_memory_utilization": 0.3}, "static": {"max_batch_size": 16}}


def test_the_chosen_engine_gets_its_own_section():
    assert engine_options(PER_ENGINE, "vllm") == {"gpu_memory_utilization": 0.3}
    assert engine_options(PER_ENGINE, "static") == {"max_batch_size": 16}
    assert engine_options(PER_ENGINE, "hf") == {}  # no section: the engine's defaults
    assert engine_options({"max_batch_size": 8}, "hf") == {"max_batch_size": 8}  # flat: as is
    for engine in ("auto", "vllm", "static", "hf"):
        check_engine_settings(engine, PER_ENGINE)
    check_engine_settings("vllm", {"gpu_memory_utilization": 0.3, "enforce_eager": True})
    check_engine_settings("auto", {})


@pytest.mark.parametrize(
    ("engine", "kwargs", "needles"),
    [
        ("auto", {"gpu_memory_utilization": 0.3}, ["'engine_kwargs'", "flat", "'engine' is auto"]),
        ("auto", {"vllm": {}, "sglang": {}}, ["'engine_kwargs'", "'sglang' is no engine"]),
        ("auto", {"vlm": {"gpu_memory_utilization": 0.3}}, ["'engine_kwargs'", "'vllm'"]),
        ("vllm", {"vlm": {"gpu_memory_utilization": 0.3}}, ["'engine_kwargs'", "'vlm'"]),
        ("auto", {"static": 256}, ["'engine_kwargs.static'", "mapping"]),
        ("auto", {"static": {"max_batch": 8}}, ["'engine_kwargs.static'", "'max_batch'"]),
        ("hf", {"gpu_memory_utilization": 0.3}, ["'engine_kwargs'", "hf engine"]),
        ("gpu", {}, ["'engine'", "'gpu'"]),
    ],
)
def test_bad_engine_settings_are_named(engine, kwargs, needles):
    with pytest.raises(ConfigError) as err:
        check_engine_settings(engine, kwargs)
    for needle in needles:
        assert needle in str(err.value), str(err.value)


def _sft_argv(model_dir, out, **settings) -> list[str]:
    cfg = {
        "model_path": str(model_dir),
        "task": "arithmetic",
        "eval_examples": 4,
        "eval_max_tokens": 8,
        "eval_at_start": False,
        "progress": False,
        "save_every": 0,
        "save_checkpoint": False,
        "sft_pool_size": 4,
        "epochs": 1,
        "batch_size": 4,
        "gradient_accumulation_steps": 2,
        **settings,
    }
    return [*(a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v)}")), "--out", out]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("model") / "m")


def test_config_load_refuses_bad_engine_settings_before_any_work(model_dir, tmp_path, capsys):
    for settings, needle in [
        ({"engine": "auto", "engine_kwargs": {"max_batch_size": 2}}, "'engine_kwargs'"),
        ({"engine": "auto", "engine_kwargs": {"sgl": {}}}, "'sgl'"),
        ({"engine": "fast"}, "engine"),
    ]:
        out = tmp_path / "run"
        assert sft.main(_sft_argv(model_dir, str(out), **settings)) == 2
        err = capsys.readouterr().err
        assert needle in err, err
        assert not (out / "done.json").exists()


def test_auto_on_cpu_runs_hf_with_its_section_and_says_so(model_dir, tmp_path, capsys):
    """A trainer with engine auto on the CPU builds the hf engine from its own section, logs
    the choice and records it in done.json."""
    built = []
    real = run.make_engine

    def spy(kind, model, tokenizer, **kwargs):
        built.append((kind, kwargs))
        return real(kind, model, tokenizer, **kwargs)

    per_engine = {"hf": {"max_batch_size": 3}, **PER_ENGINE}
    out = tmp_path / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(run, "make_engine", spy)
    try:
        assert (
            sft.main(_sft_argv(model_dir, str(out), engine="auto", engine_kwargs=per_engine)) == 0
        )
    finally:
        mp.undo()
    assert built == [("hf", {"max_batch_size": 3})]
    assert "[sft] rollout engine: hf (engine: auto; policy on cpu)" in capsys.readouterr().err
    assert json.loads((out / "done.json").read_text())["engine"] == "hf"


def test_make_rollout_engine_builds_the_resolved_engine(model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    cfg = CommonConfig(model_path=str(model_dir), engine="auto", engine_kwargs=PER_ENGINE)
    engine = run.make_rollout_engine(cfg, model, tokenizer)
    assert isinstance(engine, HFEngine)
    # As on a GPU without vLLM: the static engine with its section.
    monkeypatch.setattr(run, "rollout_engine_kind", lambda cfg, model: "static")
    engine = run.make_rollout_engine(cfg, model, tokenizer)
    assert isinstance(engine, StaticEngine) and engine.max_batch_size == 16
    # A flat mapping still works for a named engine.
    cfg = CommonConfig(model_path=str(model_dir), engine="static", engine_kwargs={"span_step": 4})
    assert run.make_rollout_engine(cfg, model, tokenizer).span_step == 4


def test_a_trainers_vllm_engine_computes_in_the_policys_dtype(model_dir, monkeypatch):
    """vLLM's own dtype ``auto`` makes a float32 checkpoint bfloat16: the trainers pass the
    policy's dtype instead, unless engine_kwargs names one."""
    import torch
    from transformers import AutoModelForCausalLM

    built = []
    monkeypatch.setattr(run, "make_engine", lambda kind, m, t, **kw: built.append((kind, kw)))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = CommonConfig(model_path=str(model_dir), engine="vllm", engine_kwargs={"seed": 3})
    run.make_rollout_engine(cfg, model, None)
    run.make_rollout_engine(cfg, model.to(torch.bfloat16), None)
    cfg = CommonConfig(model_path=str(model_dir), engine="vllm", engine_kwargs={"dtype": "half"})
    run.make_rollout_engine(cfg, model, None)
    cfg = CommonConfig(model_path=str(model_dir), engine="hf")
    run.make_rollout_engine(cfg, model, None)
    assert built == [
        ("vllm", {"seed": 3, "dtype": "float32"}),
        ("vllm", {"seed": 3, "dtype": "bfloat16"}),
        ("vllm", {"dtype": "half"}),
        ("hf", {}),
    ]


def test_rrl_eval_auto_on_cpu_records_the_engine(model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    settings = {"model_path": str(model_dir), "task": "arithmetic", "eval_examples": 2}
    argv = sets({**settings, "engine": "auto", "device": "cpu", "eval_max_tokens": 8})
    assert evaluate.main([*argv, "--out", str(out)]) == 0
    assert json.loads((out / "done.json").read_text())["engine"] == "hf"
    assert "[eval] rollout engine: hf (engine: auto)" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["gpu_math", "gpu_gsm8k", "gpu_countdown"])
def test_gpu_methods_files_use_auto_with_a_section_per_engine(name, monkeypatch):
    methods = yaml.safe_load((ROOT / f"workflow/config/methods/{name}.yaml").read_text())
    assert methods["eval"]["engine"] == "auto"
    for command in ("sft", "ei", "grpo"):
        section = methods[command]
        assert section["engine"] == "auto"
        check_engine_settings(section["engine"], section["engine_kwargs"])
        for importable, kind in [(True, "vllm"), (False, "static")]:
            monkeypatch.setattr(
                engines, "vllm_importable", lambda importable=importable: importable
            )
            assert resolve_engine("auto", section["device"]) == kind
        vllm = engine_options(section["engine_kwargs"], "vllm")
        assert vllm == {"gpu_memory_utilization": 0.35}
        assert engine_options(section["engine_kwargs"], "static") == {"max_batch_size": 256}
