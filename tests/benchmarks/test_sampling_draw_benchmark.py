"""benchmarks/sampling_draw.py and draw_accuracy.py run end to end on a tiny model and report
both draws; the engine's own draw is back in place afterwards (they swap the baseline in)."""

from __future__ import annotations

import json

from project_root import load_script
from tiny_model import save_tiny_model

from reasoning_core.runtime.engines.static import kernels


def test_both_draws_are_measured_and_the_engine_draw_is_restored(tmp_path, capsys):
    real = kernels._inverse_cdf
    model = save_tiny_model(tmp_path / "model")
    bench = load_script("benchmarks/sampling_draw.py")
    assert bench.main(["--model", str(model), "--rounds", "2", "--examples", "16"]) == 0
    assert kernels._inverse_cdf is real
    out = capsys.readouterr().out.strip().splitlines()
    assert sum(line.startswith("round ") for line in out) == 4
    result = json.loads(out[-1])
    assert result["examples"] == 16 and result["rounds"] == 2
    for key in ("draw_us", "eval_tokens_per_s"):
        assert set(result[key]) == {"race", "inverse_cdf"}
        assert all(v > 0 for v in result[key].values())
    assert result["speedup"]["draw"] == result["draw_us"]["race"] / result["draw_us"]["inverse_cdf"]


def test_draw_accuracy_reports_both_draws_and_restores_the_engine_draw(tmp_path, capsys):
    real = kernels._inverse_cdf
    model = save_tiny_model(tmp_path / "model")
    bench = load_script("benchmarks/draw_accuracy.py")
    assert bench.main(["--model", str(model), "--seeds", "2", "--examples", "8"]) == 0
    assert kernels._inverse_cdf is real
    out = capsys.readouterr().out.strip().splitlines()
    assert sum(line.startswith("eval seed ") for line in out) == 2
    result = json.loads(out[-1])
    assert result["seeds"] == 2 and set(result["accuracy"]) == {"race", "inverse_cdf"}
    for summary in result["accuracy"].values():
        assert 0.0 <= summary["mean"] <= 1.0 and summary["sd"] >= 0.0
