"""The vLLM engine refuses a vLLM older than the API it calls (reload_weights with
weights_iterator, vLLM 0.16.0), at start-up, naming the installed and the required version.
A fake ``vllm`` module stands in, so this runs without vLLM installed."""

from __future__ import annotations

import sys
import types

import pytest

from reasoning_core.runtime.engines import vllm as vllm_engine
from reasoning_core.runtime.errors import ConfigError


@pytest.mark.parametrize("version", ["0.16.0", "0.16.0rc1", "0.16.1", "0.32.0+cpu", "1.0.0"])
def test_supported_versions_pass(version):
    vllm_engine.check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.15.1", "0.10.2", "0.9.2", "0.15.2rc1.dev12+gabc"])
def test_older_versions_fail_naming_both_versions(version):
    with pytest.raises(ConfigError, match=rf"vLLM {version.replace('+', '[+]')} is installed"):
        vllm_engine.check_vllm_version(version)
    with pytest.raises(ConfigError, match=r"needs vllm>=0\.16 .*reload_weights"):
        vllm_engine.check_vllm_version(version)


def test_unreadable_version_fails():
    with pytest.raises(ConfigError, match=r"'unknown' cannot be read; .* needs vllm>=0\.16"):
        vllm_engine.check_vllm_version("unknown")


def test_engine_start_fails_before_building_an_llm(monkeypatch, tmp_path):
    built = []
    fake = types.ModuleType("vllm")
    fake.__version__ = "0.15.1"
    fake.LLM = lambda **kwargs: built.append(kwargs)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    with pytest.raises(ConfigError, match=r"vLLM 0\.15\.1 is installed; .* needs vllm>=0\.16"):
        vllm_engine.VLLMEngine(tmp_path)
    assert built == []
