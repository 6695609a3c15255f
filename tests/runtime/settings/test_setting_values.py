"""A number no setting can mean (NaN, infinity, negative, beyond 64 bits) stops every command at
start with a message naming the setting, instead of a silent run or a traceback later."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from reasoning_core.runtime import cli
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.settings.config import build_config


@pytest.mark.parametrize(
    ("command", "sets", "setting"),
    [
        # accepted before: the KL term silently off, the train loss logged as null
        ("grpo", ["kl_coef=nan"], "kl_coef"),
        ("grpo", ["loss_type=grpo_clip", "cliprange=nan"], "cliprange"),
        # accepted before, then a traceback: torch's ValueError, an index out of bounds
        ("grpo", ["lr=nan"], "lr"),
        ("grpo", ["sampling_temperature=nan"], "sampling_temperature"),
        ("sft", ["lr=.inf"], "lr"),
        ("eval", ["eval_temperature=-.inf"], "eval_temperature"),
    ],
)
def test_a_non_finite_number_is_refused_at_start_naming_the_setting(
    command, sets, setting, tmp_path, capsys
):
    argv = [command, "--set", f"model_path={tmp_path / 'model'}", "--out", str(tmp_path / "r")]
    for s in sets:
        argv += ["--set", s]
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"rrl {command}: command line (with --set ")
    assert f"setting {setting!r} must be a finite number" in err
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists()  # before any work


@dataclass
class Numbers:
    seed: int = 0
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weights: dict[str, float] = field(default_factory=dict)
    budget: float | None = None


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"lr": float("nan")}, "setting 'lr' must be a finite number, got nan"),
        ({"lr": "inf"}, "setting 'lr' must be a finite number"),
        ({"lr": 10**400}, "setting 'lr' must be a finite number"),  # beyond any float
        ({"budget": float("inf")}, "setting 'budget' must be a finite number"),
        ({"betas": [0.9, float("nan")]}, "setting 'betas[1]' must be a finite number"),
        ({"weights": {"a": float("nan")}}, "setting 'weights.a' must be a finite number"),
        ({"weights": {"a": "x"}}, "setting 'weights.a' must be a number"),
        ({"lr": -1e-3}, "setting 'lr' must be >= 0, got -0.001"),
        ({"seed": -1}, "setting 'seed' must be >= 0, got -1"),
        ({"seed": 2**63}, "setting 'seed' must be below 2**63"),
    ],
)
def test_the_type_check_refuses_numbers_no_setting_means(values, needle):
    with pytest.raises(ConfigError, match=r"^here: ") as info:
        build_config(Numbers, values, "here")
    assert needle in str(info.value)


def test_finite_numbers_and_null_pass_the_type_check():
    cfg = build_config(
        Numbers,
        {"seed": 2**63 - 1, "lr": "3e-5", "betas": [0, 0.5], "weights": {"a": 1}, "budget": None},
    )
    assert cfg == Numbers(seed=2**63 - 1, lr=3e-5, betas=[0.0, 0.5], weights={"a": 1.0})
