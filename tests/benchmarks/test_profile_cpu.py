"""benchmarks/profile_cpu.py in its --tiny mode on the committed tiny-world model: the profile
part prints a table per run whose phases add up to the wall time and whose FLOP-counted phases
carry a floor; the decode part compares two trees and checks greedy outputs."""

from __future__ import annotations

import re

import pytest
import torch
from project_root import load_script

ROW = re.compile(r"^(?P<phase>.+?) +(?P<seconds>\d+\.\d\d) +(?P<share>\d+\.\d)%(?P<rest>.*)$")


def profile_cpu():
    return load_script("benchmarks/profile_cpu.py")


def tables(text: str) -> dict[str, tuple[float, dict[str, tuple[float, str]]]]:
    """Title -> (wall seconds, phase -> (seconds, floor and ratio columns))."""
    found: dict[str, tuple[float, dict[str, tuple[float, str]]]] = {}
    title = None
    for line in text.splitlines():
        head = re.match(r"^(GRPO, \d+ steps|evaluation, \d+ problems): (\d+\.\d\d) s wall$", line)
        if head:
            title = head.group(1)
            found[title] = (float(head.group(2)), {})
            continue
        row = ROW.match(line)
        if title and row:
            found[title][1][row["phase"].strip()] = (float(row["seconds"]), row["rest"].strip())
    return found


def test_profile_tables_cover_every_phase(tmp_path, capsys):
    assert profile_cpu().main(["--tiny", "--parts", "profile", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rate = float(re.search(r"matrix-product rate: (\d+\.\d) GFLOP/s", out).group(1))
    assert rate > 0
    found = tables(out)
    assert set(found) == {"GRPO, 1 steps", "evaluation, 8 problems"}, out
    engine = {"prefill", "decode forward", "sampling", "host bookkeeping", "engine other"}
    expected = {
        "GRPO, 1 steps": engine
        | {"optimizer", "grading", "forward/backward", "policy forward, no grad"},
        "evaluation, 8 problems": engine | {"grading"},
    }
    for title, (wall, phases) in found.items():
        assert expected[title] <= set(phases), (title, phases)
        assert "other (Python, set-up, I/O)" in phases
        # the phases (other included) add up to the wall time, up to the printed rounding
        assert abs(sum(s for s, _ in phases.values()) - wall) <= 0.01 * len(phases) + 0.01
        for phase in ("prefill", "decode forward"):
            floor_ms, ratio = (float(x) for x in phases[phase][1].split())
            assert floor_ms > 0 and ratio > 0
            if floor_ms >= 1 and phases[phase][0] >= 0.1:  # else the printed rounding dominates
                assert ratio == pytest.approx(1e3 * phases[phase][0] / floor_ms, rel=0.1)
        assert phases["sampling"][1] == ""  # no products, no floor


@pytest.mark.slow
def test_decode_part_pairs_two_trees(tmp_path, capsys):
    argv = ["--tiny", "--parts", "decode", "--out", str(tmp_path), "--head", "c5a3f4f"]
    assert profile_cpu().main(argv) == 0
    out = capsys.readouterr().out
    medians = r"evaluation \d+\.\d\d, without prefill \d+\.\d\d, GRPO batches \d+\.\d\d"
    assert re.search(r"rows 128: median ratio head/base over 1 pairs: " + medians, out), out
    # the same commit on both sides: the same greedy token ids and log-probs
    assert "greedy token ids of 64 prompts identical to the base's: True" in out
    assert re.search(r"greedy: (\d+) of \1 prompts' token ids equal; .* at most 0\.00e\+00", out)


def test_step_part_prints_the_step_against_both_floors(tmp_path, capsys):
    argv = ["--tiny", "--parts", "step", "--spans", "16,48", "--out", str(tmp_path)]
    assert profile_cpu().main(argv) == 0
    out = capsys.readouterr().out
    head = re.search(
        r"decode step at 128 rows, one thread: product rate (\S+) GFLOP/s, read "
        r"rate (\S+) GB/s",
        out,
    )
    assert head and float(head.group(1)) > 0 and float(head.group(2)) > 0, out
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) == 6 and cells[0].isdigit():
            rows[int(cells[0])] = [float(c) for c in cells[1:]]
    assert set(rows) == {16, 48}, out
    for step, products, flop_floor, read_floor, ratio in rows.values():
        assert step > 0 and products > 0 and flop_floor > 0 and read_floor > 0
        assert ratio == pytest.approx(step / (flop_floor + read_floor), rel=0.05, abs=0.05)
    # the attention reads every attended slot's key and value once: its floor is linear in
    # the span; the products' floor grows only by the attention's FLOPs
    assert rows[48][3] == pytest.approx(3 * rows[16][3], rel=0.1, abs=0.02)
    assert rows[16][2] <= rows[48][2] < 1.5 * rows[16][2]


def test_blas_part_times_the_step_products_in_three_libraries(tmp_path, capsys):
    assert profile_cpu().main(["--tiny", "--parts", "blas", "--rows", "16"]) == 0
    out = capsys.readouterr().out
    # the tiny world: 4 layers of 7 projections, and the LM head
    flops = 2 * 16 * 4 * (128 * (128 + 2 * 64) + 128 * 128 + 3 * 128 * 512) + 2 * 16 * 128 * 512
    head = re.search(r"29 projections and LM head at 16 rows, one thread \((\d+) MFLOP", out)
    assert head and int(head.group(1)) == round(flops / 1e6), out
    found = {}
    for line in out.splitlines():
        cells = re.match(r"^(.+?) +(\d+\.\d+) +(\d+\.\d) +(\d+\.\d\d) +(\S+)$", line)
        if cells:
            found[cells[1]] = [float(c) for c in cells.groups()[1:]]
    libraries = {"MKL (torch F.linear)", "numpy's BLAS (matmul)"}
    if torch.backends.mkldnn.is_available():  # in torch's x86 builds
        libraries.add("oneDNN (mkldnn_linear)")
    assert set(found) == libraries, out
    for ms, gflops, vs_mkl, diff in found.values():
        assert gflops == pytest.approx(flops / (ms / 1e3) / 1e9, rel=0.05)
        assert vs_mkl == pytest.approx(found["MKL (torch F.linear)"][0] / ms, rel=0.05, abs=0.01)
        assert diff < 1e-3  # the same products, up to each library's rounding
    assert found["MKL (torch F.linear)"][2:] == [1.0, 0.0]


def test_fork_part_shows_a_forked_process_reusing_the_compilation(capsys):
    # the eager backend traces with dynamo and compiles no code: the same caching, in seconds
    argv = ["--tiny", "--parts", "fork", "--compile-backend", "eager", "--rows", "16"]
    assert profile_cpu().main(argv + ["--spans", "8,16,24"]) == 0
    out = capsys.readouterr().out
    assert "compiled here (backend eager), then in a forked process, one thread" in out
    found = {}
    for line in out.splitlines():
        cells = re.match(
            r"^(.+? \d+) +(\d+\.\d)? +(\d+\.\d\d) +(\d+) +(\d+\.\d\d) +(\d+\.\d\d) +(\d+\.\d\d)$",
            line,
        )
        if cells:
            found[cells[1]] = cells.groups()[1:]
    decode = [f"decode step, 16 rows, span {s}" for s in (8, 16, 24)]
    train = [f"training fwd+bwd, 8 rows x {n}" for n in (16, 24, 32)]
    assert list(found) == decode + train, out
    compiled_here = set(decode[:2] + train[:2])
    for name, (here, _, graphs, eager, compiled, ratio) in found.items():
        assert (here is not None) == (name in compiled_here), (name, out)
        # the forked process compiled nothing, its third size included (dynamic shapes)
        assert int(graphs) == 0, (name, out)
        assert float(ratio) == pytest.approx(float(eager) / float(compiled), rel=0.05, abs=0.01)
