"""The distributed layer in one process and the world-size checks of each trainer's settings.

In one process every helper is the identity (nothing initialized, rank 0 of 1), so a plain run
computes what it always did; the checks refuse, naming the setting, a launch that would split
a group, a batch or its micro batches unevenly, or run N copies of a command that cannot split.
"""

from __future__ import annotations

import pytest
import torch

from reasoning_core.runtime.distributed import collectives, world
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.trainers import dpo, ei, grpo, instruction_sft, sft
from reasoning_core.runtime.trainers.dpo import DPOConfig
from reasoning_core.runtime.trainers.ei import EIConfig
from reasoning_core.runtime.trainers.grpo import GRPOConfig
from reasoning_core.runtime.trainers.instruction_sft import InstructionSFTConfig
from reasoning_core.runtime.trainers.sft import SFTConfig
from reasoning_core.runtime.training.settings import CommonConfig


def test_one_process_is_rank_0_of_1_and_every_helper_is_the_identity():
    assert not world.active() and world.rank() == 0 and world.world_size() == 1
    assert world.is_main()
    assert collectives.sum_values({"a": 1.5}) == {"a": 1.5}
    t = torch.arange(3.0)
    assert collectives.sum_tensor(t) is t
    assert collectives.gather_objects("x") == ["x"]
    assert collectives.broadcast_object(7) == 7
    assert list(collectives.share(range(5))) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("n", "parts", "expected"),
    [(8, 2, [[0, 1, 2, 3], [4, 5, 6, 7]]), (5, 2, [[0, 1, 2], [3, 4]]), (1, 2, [[0], []])],
)
def test_shares_are_contiguous_and_cover_every_item_once(n, parts, expected):
    got = [list(collectives.share(range(n), parts, i)) for i in range(parts)]
    assert got == expected


def test_the_backend_follows_the_device():
    assert world.backend_for("cpu") == "gloo"
    assert world.backend_for("cuda:1") == "nccl"


GRPO_OK = dict(
    rollout_batch_size=16,
    group_size=4,
    train_batch_size=8,
    gradient_accumulation_steps=2,
    rollout_seeding="group",
)


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"rollout_seeding": "batch"}, "rollout_seeding"),
        ({"rollout_batch_size": 12, "train_batch_size": 12, "gradient_accumulation_steps": 4},
         "rollout_batch_size"),
        ({"rollout_batch_size": 24, "train_batch_size": 12, "gradient_accumulation_steps": 3},
         "gradient_accumulation_steps"),
    ],
)  # fmt: skip
def test_grpo_refuses_a_world_it_cannot_split_naming_the_setting(change, setting):
    GRPOConfig(**GRPO_OK).check_world(2)  # the defaults above split over 2
    with pytest.raises(ConfigError, match=f"setting '{setting}'"):
        GRPOConfig(**{**GRPO_OK, **change}).check_world(2)


def test_sft_and_dpo_refuse_batches_that_do_not_split():
    SFTConfig(batch_size=8, gradient_accumulation_steps=2).check_world(2)
    with pytest.raises(ConfigError, match="setting 'batch_size'"):
        SFTConfig(batch_size=9, gradient_accumulation_steps=3).check_world(2)
    DPOConfig(pairs="jsonl", batch_size=4, gradient_accumulation_steps=2).check_world(2)
    with pytest.raises(ConfigError, match="setting 'rollout_seeding'"):
        DPOConfig(pairs="verified", batch_size=4, gradient_accumulation_steps=2).check_world(2)
    with pytest.raises(ConfigError, match="setting 'sample_only'"):
        DPOConfig(sample_only=True).check_world(2)


EI_OK = dict(
    ei_batch_size=8,
    group_size=4,
    batch_size=8,
    gradient_accumulation_steps=2,
    rollout_seeding="group",
)


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"rollout_seeding": "batch"}, "rollout_seeding"),
        ({"ei_batch_size": 5}, "ei_batch_size"),
        ({"batch_size": 9, "gradient_accumulation_steps": 3}, "batch_size"),
        ({"batch_size": 6, "gradient_accumulation_steps": 3}, "gradient_accumulation_steps"),
    ],
)
def test_ei_refuses_a_world_it_cannot_split_naming_the_setting(change, setting):
    EIConfig(**EI_OK).check_world(2)  # the settings above split over 2
    with pytest.raises(ConfigError, match=f"setting '{setting}'"):
        EIConfig(**{**EI_OK, **change}).check_world(2)


def test_instruction_sft_refuses_batches_that_do_not_split():
    InstructionSFTConfig(batch_size=8, gradient_accumulation_steps=2).check_world(2)
    with pytest.raises(ConfigError, match="setting 'batch_size'"):
        InstructionSFTConfig(batch_size=9, gradient_accumulation_steps=3).check_world(2)
    with pytest.raises(ConfigError, match="setting 'gradient_accumulation_steps'"):
        InstructionSFTConfig(batch_size=6, gradient_accumulation_steps=3).check_world(2)


def test_settings_of_no_trainer_refuse_any_launch_of_several():
    with pytest.raises(ConfigError, match="runs in one process only"):
        CommonConfig().check_world(2)


SHARDABLE = {
    "sft": (sft.main, SFTConfig, {}),
    "ei": (ei.main, EIConfig, EI_OK),
    "grpo": (grpo.main, GRPOConfig, GRPO_OK),
    "dpo": (dpo.main, DPOConfig, {"pairs": "jsonl"}),
}


@pytest.mark.parametrize("command", sorted(SHARDABLE))
def test_fsdp_needs_torchrun_and_no_out_of_memory_back_off(command, capsys, tmp_path):
    """Each trainer that offers sharding: fsdp refuses it in a plain run (nothing to shard
    over) and, under torchrun, with the out-of-memory back-off on, naming the setting."""
    main, config, ok = SHARDABLE[command]
    assert main(["--set", "sharding=fsdp", "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()  # refused before any work
    err = capsys.readouterr().err
    assert "setting 'sharding' is fsdp" in err and "torchrun" in err, err
    with pytest.raises(ConfigError, match="setting 'sharding' is fsdp"):
        config(sharding="fsdp").validate()
    with pytest.raises(ConfigError, match="setting 'oom_backoff' must be false"):
        config(**ok, sharding="fsdp").check_world(2)
    config(**ok, sharding="fsdp", oom_backoff=False).check_world(2)
    config(**ok).check_world(2)  # sharding: none keeps the back-off


def test_instruction_sft_refuses_fsdp_in_one_process_and_with_the_back_off(capsys, tmp_path):
    """The same two refusals for ``rrl instruction-sft``, whose data file must exist first."""
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "1 + 1?", "response": "2"}\n')
    argv = ["--set", f"train_data={data}", "--set", "sharding=fsdp", "--out", str(tmp_path / "r")]
    assert instruction_sft.main(argv) == 2
    assert not (tmp_path / "r").exists()
    err = capsys.readouterr().err
    assert "setting 'sharding' is fsdp" in err and "torchrun" in err, err
    fsdp = InstructionSFTConfig(train_data=str(data), sharding="fsdp", batch_size=8)
    with pytest.raises(ConfigError, match="setting 'oom_backoff' must be false"):
        fsdp.check_world(2)
    InstructionSFTConfig(sharding="fsdp", batch_size=8, oom_backoff=False).check_world(2)


@pytest.mark.parametrize("command", [*sorted(SHARDABLE), "instruction-sft"])
def test_each_shardable_command_lists_sharding_in_its_help(command, capsys):
    main = instruction_sft.main if command == "instruction-sft" else SHARDABLE[command][0]
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr()
    assert "sharding: Literal['none', 'fsdp']" in out.out + out.err


def test_fsdp_shards_dpos_reference_beside_the_policy():
    """A reference on another device than the policy cannot be sharded with it: refused."""
    cfg = DPOConfig(sharding="fsdp", reference_device="cuda:1")
    with pytest.raises(ConfigError, match="setting 'reference_device'"):
        cfg.validate()


def test_a_command_that_is_no_trainer_refuses_under_torchrun(monkeypatch, capsys):
    from reasoning_core.runtime import cli

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert cli.main(["summary", "--help"]) == 2
    assert "runs in one process only" in capsys.readouterr().err


def test_a_plain_run_leaves_a_process_group_it_did_not_make(tmp_path):
    """vLLM in-process makes its own one-process group; a trainer that ends in a plain run must
    not tear it down (the next engine in the same process would find no group)."""
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        assert not world.init("cpu")  # a plain run joins nothing
        world.shutdown()
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()


def test_ei_and_instruction_sft_refuse_a_bad_world_with_exit_2_naming_the_setting(
    monkeypatch, capsys, tmp_path
):
    """The entry point checks the world a launcher asked for (WORLD_SIZE) before joining any
    group or reading any data: exit 2, the setting named, nothing written."""
    from tiny_model import save_tiny_model

    from reasoning_core.runtime.trainers import ei, instruction_sft

    model = str(save_tiny_model(tmp_path / "model"))
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "Say x.", "response": "x"}\n')
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    cases = [
        (ei, {"task": "arithmetic", **EI_OK, "ei_batch_size": 5}, "ei_batch_size"),
        (ei, {"task": "arithmetic", **EI_OK, "rollout_seeding": "batch"}, "rollout_seeding"),
        (instruction_sft, {"train_data": str(data), "batch_size": 3,
                           "gradient_accumulation_steps": 1}, "batch_size"),
    ]  # fmt: skip
    for module, settings, setting in cases:
        out = tmp_path / f"out_{setting}"
        argv = [
            a for k, v in {**settings, "model_path": model}.items() for a in ("--set", f"{k}={v}")
        ]
        assert module.main([*argv, "--out", str(out)]) == 2
        assert f"setting '{setting}'" in capsys.readouterr().err
        assert not out.exists()
