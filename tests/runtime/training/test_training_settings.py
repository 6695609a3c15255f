"""Trainer settings are checked before any work: a bad setting, or a missing model, fails with
exit status 2 and a message naming the setting, and nothing is trained, evaluated or saved."""

from __future__ import annotations

import pytest
from micro_world import (
    EI,
    GRPO,
    SFT,
    sets,
)

from reasoning_core.runtime.run.metrics import read_metrics
from reasoning_core.runtime.trainers import ei, grpo, sft


@pytest.mark.parametrize(
    ("module", "base", "bad", "setting"),
    [
        (grpo, GRPO, {"group_size": 3}, "rollout_batch_size"),
        (grpo, GRPO, {"gradient_accumulation_steps": 3}, "train_batch_size"),
        (
            grpo,
            GRPO,
            {"train_batch_size": 12, "gradient_accumulation_steps": 1},
            "rollout_batch_size",
        ),
        (grpo, GRPO, {"loss_type": "ppo"}, "loss_type"),
        (grpo, GRPO, {"loss_type": "grpo_clip", "old_log_probs": "none"}, "old_log_probs"),
        (grpo, GRPO, {"length_normalization": "mean"}, "length_normalization"),
        (grpo, GRPO, {"lr": "fast"}, "lr"),
        (grpo, GRPO, {"n_grpo_step": 3}, "n_grpo_step"),
        (grpo, GRPO, {"template": "chatml"}, "template"),
        (
            grpo,
            GRPO,
            {"share_prompts": True, "attn_implementation": "flash_attention_2"},
            "share_prompts",
        ),
        (sft, SFT, {"gradient_accumulation_steps": 3}, "batch_size"),
        (sft, SFT, {"train_data": "/nonexistent/sft.jsonl"}, "train_data"),
        (sft, SFT, {"max_examples": 10_000}, "max_examples"),
        (sft, SFT, {"trackers": ["mlflow"]}, "trackers"),
        (ei, EI, {"ei_batch_size": 0}, "ei_batch_size"),
        (ei, EI, {"gradient_accumulation_steps": 3}, "batch_size"),
        (ei, EI, {"ei_batch_size": 1000}, "ei_batch_size"),
    ],
)
def test_bad_settings_fail_fast_naming_the_setting(
    world, tmp_path, capsys, module, base, bad, setting
):
    out = tmp_path / "run"
    rc = module.main([*sets({**base, **bad, "model_path": str(world)}), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert repr(setting) in err or setting in err, err
    # Nothing was trained, evaluated or saved.
    assert not (out / "metrics.jsonl").exists() or not read_metrics(out)
    assert not (out / "done.json").exists()


def test_missing_model_path_fails_naming_it(tmp_path, capsys):
    rc = grpo.main(
        [*sets({**GRPO, "model_path": str(tmp_path / "nope")}), "--out", str(tmp_path / "r")]
    )
    assert rc == 2
    assert "'model_path'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
