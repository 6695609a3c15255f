"""benchmarks/eval_entropy.py runs end to end (``--quick``) and reports what it claims: both
paths on the same samples (same response length), the old path's time in the second forward,
and the entropy difference it prints equal to the two values it prints."""

from __future__ import annotations

import json

from project_root import load_script


def load_benchmark():
    return load_script("benchmarks/eval_entropy.py")


def test_quick_run_compares_both_paths_on_the_same_samples(capsys):
    assert load_benchmark().main(["--quick", "--tokenizer-docs", "200"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    new, old = result["new"], result["old"]
    assert result["examples"] == 8 and result["rounds"] == 1
    assert new["response_length"] == old["response_length"]
    assert old["time/entropy"] > new["time/entropy"]
    assert result["entropy_difference"] == new["entropy"] - old["entropy"]
    assert abs(result["entropy_difference"]) < 0.25 * old["entropy"]
    assert result["ratio_old_over_new"]["time/total"] == old["time/total"] / new["time/total"]
