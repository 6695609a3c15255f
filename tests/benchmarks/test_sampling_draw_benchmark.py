"""benchmarks/sampling_draw.py and draw_accuracy.py run end to end on a tiny model and report
both draws; the engine's own draw is back in place afterwards (they swap the baseline in)."""

from __future__ import annotations

import json

from project_root import load_script
from tiny_model import save_tiny_model

from reasoning_core.runtime.engines.static import kernels


def run(script: str, args: list[str], tmp_path, capsys) -> tuple[list[str], dict]:
    """Run ``script`` on a tiny model; its printed lines and its last (JSON) line."""
    real = kernels._inverse_cdf
    model = save_tiny_model(tmp_path / "model")
    assert load_script(script).main(["--model", str(model), *args]) == 0
    assert kernels._inverse_cdf is real
    out = capsys.readouterr().out.strip().splitlines()
    return out, json.loads(out[-1])


def test_both_draws_are_measured(tmp_path, capsys):
    args = ["--rounds", "2", "--examples", "16"]
    out, result = run("benchmarks/sampling_draw.py", args, tmp_path, capsys)
    assert sum(line.startswith("round ") for line in out) == 4
    assert result["examples"] == 16 and result["rounds"] == 2
    for key in ("draw_us", "eval_tokens_per_s"):
        assert set(result[key]) == {"race", "inverse_cdf"}
        assert all(v > 0 for v in result[key].values())
    assert result["speedup"]["draw"] == result["draw_us"]["race"] / result["draw_us"]["inverse_cdf"]


def test_draw_accuracy_reports_both_draws(tmp_path, capsys):
    args = ["--seeds", "2", "--examples", "8"]
    out, result = run("benchmarks/draw_accuracy.py", args, tmp_path, capsys)
    assert sum(line.startswith("eval seed ") for line in out) == 2
    assert result["seeds"] == 2 and set(result["accuracy"]) == {"race", "inverse_cdf"}
    for summary in result["accuracy"].values():
        assert 0.0 <= summary["mean"] <= 1.0 and summary["sd"] >= 0.0
