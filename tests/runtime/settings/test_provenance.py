"""Every run's config.yaml records the code that made it (nothing about a run is silent): the
git commit of the checkout (and whether the tree was dirty), the versions of torch,
transformers, vllm and math-verify (None where absent), and the machine's float path (CPU
model, ATen's kernels, thread count); a saved config.yaml still works as
``--config``, and resuming ignores the record (a run resumed after a commit still resumes).
"""

from __future__ import annotations

import subprocess

import pytest
import torch
import yaml
from micro_world import sets

from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.resume import RESUME_MAY_CHANGE, check_same_settings
from reasoning_core.runtime.settings import config, provenance
from reasoning_core.runtime.trainers import sft

SFT = {
    "task": "arithmetic",
    "eval_examples": 4,
    "eval_max_tokens": 24,
    "progress": False,
    "save_every": 0,
    "seed": 3,
    "sft_pool_size": 24,
    "batch_size": 4,
    "gradient_accumulation_steps": 2,
    "lr": 1e-3,
}


def test_config_yaml_records_provenance_and_works_as_config(world, tmp_path):
    out = tmp_path / "sft"
    values = {**SFT, "max_steps": 1, "eval_at_start": False, "model_path": str(world)}
    assert sft.main([*sets(values), "--out", str(out)]) == 0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    record = saved["provenance"]
    assert record == provenance.collect()  # this checkout's commit and the installed versions
    assert set(record["versions"]) == {"torch", "transformers", "vllm", "math-verify"}
    assert record["versions"]["torch"] is not None
    assert record["git_commit"] is None or len(record["git_commit"]) == 40

    # A saved config.yaml is a valid --config (its provenance dropped) and resolves to the
    # same settings.
    args = config.parse_run_args(["--config", str(out / "config.yaml")], "", need_out=False)
    again = config.resolve(sft.SFTConfig, args, "sft")
    assert again == config.resolve(
        sft.SFTConfig, config.parse_run_args(sets(values), "", need_out=False), "sft"
    )
    rerun = tmp_path / "rerun"
    assert sft.main(["--config", str(out / "config.yaml"), "--out", str(rerun)]) == 0


def test_resume_check_ignores_provenance(tmp_path):
    cfg = sft.SFTConfig(model_path="m")
    saved = config.save_config(cfg, tmp_path)
    data = yaml.safe_load(saved.read_text())
    data["provenance"] = {"git_commit": "0" * 40, "git_dirty": True, "versions": {"torch": "1"}}
    saved.write_text(yaml.safe_dump(data, sort_keys=False))
    check_same_settings(saved, cfg, may_change=RESUME_MAY_CHANGE, what="state")
    with pytest.raises(ConfigError, match="lr"):  # a real setting still counts
        check_same_settings(
            saved, sft.SFTConfig(model_path="m", lr=1.0), may_change=set(), what="state"
        )


def test_provenance_is_none_without_git_or_repository(tmp_path, monkeypatch):
    assert provenance.git_state(tmp_path) == {"git_commit": None, "git_dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable at all
    assert provenance.git_state() == {"git_commit": None, "git_dirty": None}
    assert provenance.collect()["versions"]["torch"] is not None


def test_provenance_records_commit_and_dirty_tree(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    try:
        git("init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not installed")
    (repo / "a.txt").write_text("1")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    state = provenance.git_state(repo)
    assert len(state["git_commit"]) == 40 and state["git_dirty"] is False
    (repo / "untracked.txt").write_text("run output")
    assert provenance.git_state(repo)["git_dirty"] is False  # untracked files do not count
    (repo / "a.txt").write_text("2")
    assert provenance.git_state(repo)["git_dirty"] is True
    sub = repo / "sub"
    sub.mkdir()
    assert provenance.git_state(sub)["git_commit"] is None  # not the top of the work tree


def test_provenance_names_the_float_path(tmp_path, monkeypatch):
    """The CPU model, ATen's kernels and the thread count: what decides a run's rounding."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU 9000\nflags\t: fpu\n"
    )
    assert provenance.cpu_model(cpuinfo) == "Some CPU 9000"
    monkeypatch.setattr(provenance.platform, "processor", lambda: "")
    assert provenance.cpu_model(tmp_path / "missing") is None

    for name in provenance.FLOAT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        record = provenance.provenance()["machine"]
        assert record["torch_threads"] == 1
        torch.set_num_threads(2)  # recorded when the config is saved, not when first asked
        assert provenance.provenance()["machine"]["torch_threads"] == 2
    finally:
        torch.set_num_threads(threads)
    assert record["float_env"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["cpu"] == provenance.cpu_model()


def test_tiny_world_config_records_its_thread_count(world):
    saved = yaml.safe_load((world / "config.yaml").read_text())
    assert saved["provenance"]["machine"]["torch_threads"] == saved["num_threads"]


def test_runs_from_this_checkout_record_its_commit():
    """The tests run from a git checkout (CI's clone included): its commit is recorded, and
    the folder that holds the package is the checkout's root."""
    from project_root import ROOT

    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout")
    assert provenance.code_root() == ROOT.resolve()
    state = provenance.git_state()
    assert state["git_commit"] == head.stdout.strip()
    assert isinstance(state["git_dirty"], bool)
    assert provenance.collect()["git_commit"] == head.stdout.strip()
