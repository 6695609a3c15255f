"""Runs under ``torchrun`` on 2 CPU processes (gloo) against the same run in one process.

Each test runs the micro world's trainers with the stand-in grader ``fake_grade`` (so groups
have different rewards and every update is non-zero) once in the test's own process and once
under ``torchrun --nproc_per_node 2`` through ``tests/helpers/graded_rrl.py`` (``rrl`` with that
grader), with the same global batch, and compares ``metrics.jsonl`` apart from ``time/`` and
the final weights.

Tolerance (:data:`RTOL`, :data:`ATOL`). The two runs compute the same sums in another order:
rank r accumulates its own micro batches and the ranks' gradients are added after (with FSDP2,
reduce-scattered after every micro batch), where one process adds the micro batches one after
another; the old log-probs of a rank's share are scored in other micro batches (another padded
width). In float32 that moves a gradient by a few units in the last place and the logged means
by as little. Measured on this machine (largest relative difference of a logged number of
magnitude 1e-3 or more; largest absolute difference of a final weight): GRPO on-policy
2.3e-7 and 8.3e-7; grpo_clip 6.6e-8 and 7.3e-7, with FSDP2 2.7e-6 and 7.1e-7; SFT 7.3e-8 and
1.3e-7, with FSDP2 1.0e-6 and 2.4e-7; DPO with FSDP2 (policy and reference sharded) 6.3e-6 and
2.5e-6; expert iteration with FSDP2 1.3e-6 and 4.7e-7; instruction SFT with FSDP2 1.4e-6 and
6.5e-7; without FSDP2, DPO, expert iteration and
instruction SFT bitwise equal (in these settings each rank's
micro batch is one of one process's, and the ranks' sum is the one addition one process makes).
The tolerances are 40x to 1000x that, far below what a wrong normalizer (a factor of 2 in the
loss, TRL #3021) or a rank's rollouts counted twice would move (the loss and gradient norm by
tens of percent). A sampled token could still flip where
the weights differ in the last place; with per-group seeding a group is sampled in its own
engine call on either side, so its draws never depend on the split (no padding from other
prompts), and none flipped here: the rewards, response lengths and every metric agree.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from micro_world import COMMON, EI, GRPO, SFT, fake_grade, write_addition_pairs
from project_root import ROOT
from safetensors.torch import load_file

from reasoning_core.runtime.cli import main
from reasoning_core.runtime.run.metrics import read_metrics, without_time
from reasoning_core.runtime.training import rollouts

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "tests" / "helpers" / "graded_rrl.py"
RTOL = 1e-4
ATOL = 1e-5

# Quiet runs: evaluation only at the end (rank 0 evaluates alone), two steps.
GRPO_2 = {
    **GRPO,
    "n_grpo_steps": 2,
    "eval_every": 0,
    "eval_at_start": False,
    "eval_examples": 4,
    "save_every": 0,
    "rollout_seeding": "group",
}
ON_POLICY = {
    **GRPO_2,
    "loss_type": "reinforce_with_baseline",
    "train_batch_size": 16,
    "gradient_accumulation_steps": 4,
    "length_normalization": "token_mean",
}
# grpo_clip over two train batches per rollout batch: the second step is off-policy.
OFF_POLICY = {**GRPO_2, "loss_type": "grpo_clip", "advantage_estimator": "batch_std"}


def sets(values: dict) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def launch(command: str, cfg: dict, world: Path, out: Path, *, nproc: int = 2, env=None):
    """``rrl <command>`` with the stand-in grader under torchrun on ``nproc`` processes."""
    argv = [str(SCRIPT), command, *sets({**cfg, "model_path": str(world)}), "--out", str(out)]
    argv = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *argv]
    environ = {**os.environ, **(env or {})}
    paths = [str(ROOT), str(ROOT / "tests" / "helpers"), environ.get("PYTHONPATH")]
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return subprocess.run(
        [sys.executable, *argv], env=environ, capture_output=True, text=True, timeout=600
    )


def run(command: str, cfg: dict, world: Path, out: Path, *, nproc: int = 1) -> list[dict]:
    """The run's metrics (apart from ``time/``): ``nproc`` 1 in this test's own process (a
    fresh interpreter's start and imports were most of a micro run's time), more under
    torchrun; both with the stand-in grader."""
    if nproc == 1:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(rollouts, "grade", fake_grade)  # as graded_rrl.py does
            argv = [command, *sets({**cfg, "model_path": str(world)}), "--out", str(out)]
            assert main(argv) == 0
    else:
        done = launch(command, cfg, world, out, nproc=nproc)
        assert done.returncode == 0, done.stderr[-3000:]
    return without_time(read_metrics(out / "metrics.jsonl"))


def assert_close_records(a: list[dict], b: list[dict]) -> float:
    """Same lines, same keys, strings and integers equal, floats within the tolerance; returns
    the largest relative difference seen among the values of magnitude 1e-3 or more."""
    assert len(a) == len(b)
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys(), (x["step"], set(x) ^ set(y))
        for key, u in x.items():
            v = y[key]
            if isinstance(u, float) and isinstance(v, float):
                assert math.isclose(u, v, rel_tol=RTOL, abs_tol=ATOL), (x["step"], key, u, v)
                if max(abs(u), abs(v)) >= 1e-3:
                    worst = max(worst, abs(u - v) / max(abs(u), abs(v)))
            else:
                assert u == v, (x["step"], key, u, v)
    return worst


def assert_close_weights(a: Path, b: Path, tol: float = ATOL) -> float:
    wa, wb = (
        load_file(a / "checkpoint" / "model.safetensors"),
        load_file(b / "checkpoint" / "model.safetensors"),
    )
    assert wa.keys() == wb.keys()
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= tol, worst
    return worst


def moved(start: Path, run_dir: Path) -> float:
    """How far training moved the weights (so an equality is not one of untouched models)."""
    w0, w1 = (
        load_file(start / "model.safetensors"),
        load_file(run_dir / "checkpoint" / "model.safetensors"),
    )
    return max(float((w0[k] - w1[k]).abs().max()) for k in w1)


def only_rank_0_wrote(one: Path, two: Path) -> None:
    """The 2-rank folder holds what the one-process folder holds: no file of another rank."""
    assert (two / "done.json").is_file()
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())


def resume_after_kill(
    cfg: dict, world: Path, out: Path, *, also_in_one: Path | None = None, command: str = "grpo"
):
    """A 2-rank run killed right after optimizer step 3 (state saved after an earlier step),
    then the same command again: the resumed run's metrics. ``also_in_one``: a copy of the
    killed folder resumed there by one process first (another world size)."""
    killed = launch(command, cfg, world, out, nproc=2, env={"RRL_EXIT_AFTER_STEP": "3"})
    assert killed.returncode != 0 and not (out / "done.json").exists()
    state = torch.load(out / "state" / "trainer_state.pt", weights_only=False)
    assert state["counters"]["opt_step"] < 3 and len(state["rng_ranks"]) == 2
    if also_in_one is not None:
        shutil.copytree(out, also_in_one)
        run(command, cfg, world, also_in_one)
    return run(command, cfg, world, out, nproc=2)


def assert_same_weights(a: Path, b: Path) -> None:
    wa = load_file(a / "checkpoint" / "model.safetensors")
    wb = load_file(b / "checkpoint" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_on_policy_grpo_on_two_ranks_equals_one_process_and_resumes_exactly(world, tmp_path):
    """3 on-policy GRPO steps (token_mean, 4 micro batches, so each rank sums 2 of them before
    the ranks' sum): one process's metrics and weights within the tolerance. Then the 2-rank
    run killed after step 3 and resumed from the state saved after step 2: the uninterrupted
    2-rank run exactly (the same world size, the same sums in the same order), each rank's RNG
    state saved; the same state resumed by one process: the one-process run within the
    tolerance (a state loads at another world size)."""
    cfg = {**ON_POLICY, "n_grpo_steps": 3, "save_every": 1}
    one = run("grpo", cfg, world, tmp_path / "one")
    two = run("grpo", cfg, world, tmp_path / "two", nproc=2)
    worst = assert_close_records(one, two)
    worst_w = assert_close_weights(tmp_path / "one", tmp_path / "two")
    print(f"grpo on-policy: metrics rel diff {worst:.2e}, weights {worst_w:.2e}")
    assert any(r["grad_norm"] > 0 for r in one if r["split"] == "train")
    assert moved(world, tmp_path / "one") > 1e-4
    only_rank_0_wrote(tmp_path / "one", tmp_path / "two")
    one_more = tmp_path / "resumed_in_one"
    assert resume_after_kill(cfg, world, tmp_path / "killed", also_in_one=one_more) == two
    assert_same_weights(tmp_path / "two", tmp_path / "killed")
    # The 2-rank state resumed by one process: the one-process run, up to the same rounding.
    assert_close_records(one, without_time(read_metrics(one_more / "metrics.jsonl")))
    assert_close_weights(tmp_path / "one", one_more)


def test_grpo_clip_on_two_ranks_equals_one_process_with_and_without_fsdp(world, tmp_path):
    """grpo_clip with batch_std advantages over two train batches per rollout batch (the second
    optimizer step off-policy), 2 steps: on 2 ranks with the policy whole on each rank
    (``sharding: none``) and sharded (``sharding: fsdp``, FSDP2, float32 on CPU: the gradients
    reduce-scattered after every micro batch, another summation order again; the engine
    sampling from gathered full weights), each within the tolerance of one process. The sharded
    run killed after optimizer step 3 of 4 resumes from its gathered state to the uninterrupted
    sharded run exactly.

    AdamW divides each gradient element by its own running scale, so an element near zero whose
    last bits differ can move its weight by a visible share of ``lr`` (1e-3 here): the sharded
    run's weights are asserted within 1e-4 (a tenth of one step's largest move); measured
    below 5e-6 on this machine."""
    cfg = {**OFF_POLICY, "gradient_accumulation_steps": 4, "oom_backoff": False, "save_every": 1}
    one = run("grpo", cfg, world, tmp_path / "one")
    assert moved(world, tmp_path / "one") > 1e-4
    for sharding in ("none", "fsdp"):
        out = tmp_path / sharding
        two = run("grpo", {**cfg, "sharding": sharding}, world, out, nproc=2)
        worst = assert_close_records(one, two)
        worst_w = assert_close_weights(tmp_path / "one", out, tol=1e-4)
        print(f"grpo_clip sharding {sharding}: metrics rel diff {worst:.2e}, weights {worst_w:.2e}")
        only_rank_0_wrote(tmp_path / "one", out)
    fsdp = {**cfg, "sharding": "fsdp"}
    assert resume_after_kill(fsdp, world, tmp_path / "killed") == two
    assert_same_weights(tmp_path / "fsdp", tmp_path / "killed")


SFT_3 = {
    **SFT,
    "batch_size": 8,
    "gradient_accumulation_steps": 4,
    "max_steps": 3,
    "eval_every": 0,
    "eval_at_start": False,
    "eval_examples": 4,
    "save_every": 0,
}


def assert_two_ranks_equal_one(command, cfg, world, tmp_path) -> list[dict]:
    """The run on 2 ranks ends with the metrics and weights of the one-process run, which
    trained (its weights moved); the one-process metrics."""
    one = run(command, cfg, world, tmp_path / "one")
    two = run(command, cfg, world, tmp_path / "two", nproc=2)
    worst = assert_close_records(one, two)
    worst_w = assert_close_weights(tmp_path / "one", tmp_path / "two")
    print(f"{command}: metrics rel diff {worst:.2e}, weights {worst_w:.2e}")
    assert moved(world, tmp_path / "one") > 1e-4
    return one


def test_sft_on_two_ranks_equals_one_process(world, tmp_path):
    assert_two_ranks_equal_one("sft", SFT_3, world, tmp_path)


DPO_1 = {
    **COMMON,
    "pairs": "jsonl",
    "n_dpo_rounds": 1,
    "val_pairs": 4,
    "val_every": 1,
    "batch_size": 4,
    "gradient_accumulation_steps": 2,
    "lr": 1e-3,
    "beta": 0.5,
    "eval_at_start": False,
    "eval_examples": 4,
    "eval_max_tokens": 16,
    "save_every": 0,
}


def test_dpo_on_two_ranks_equals_one_process(world, tmp_path):
    pairs = write_addition_pairs(tmp_path / "pairs.jsonl", 12, lead=" ")
    assert_two_ranks_equal_one("dpo", {**DPO_1, "train_pairs": str(pairs)}, world, tmp_path)


def assert_sharded_equals_one(command, cfg, world, tmp_path, *, one=None) -> list[dict]:
    """The run with ``sharding: fsdp`` on 2 ranks (no out-of-memory back-off) ends with the
    metrics and weights of the one-process run, which trained; the 2-rank metrics. ``one``:
    the metrics of that run, already in ``tmp_path / "one"`` (run here when None)."""
    if one is None:
        one = run(command, cfg, world, tmp_path / "one")
    fsdp = {**cfg, "sharding": "fsdp", "oom_backoff": False}
    two = run(command, fsdp, world, tmp_path / "fsdp", nproc=2)
    worst = assert_close_records(one, two)
    worst_w = assert_close_weights(tmp_path / "one", tmp_path / "fsdp", tol=1e-4)
    print(f"{command} fsdp: metrics rel diff {worst:.2e}, weights {worst_w:.2e}")
    assert moved(world, tmp_path / "one") > 1e-4
    only_rank_0_wrote(tmp_path / "one", tmp_path / "fsdp")
    return two


def test_sharded_sft_on_two_ranks_equals_one_process_and_resumes_exactly(world, tmp_path):
    """9 examples in batches of 4 (one micro batch per rank): the third step's batch is one
    example, so rank 1 runs its micro batch as a pass of zero loss, in step with rank 0's
    sharded forward. Then the sharded run killed after step 3 (state saved after step 2)
    resumes to the same metrics and weights."""
    cfg = {**SFT_3, "batch_size": 4, "gradient_accumulation_steps": 2, "max_examples": 9,
           "max_steps": None, "save_every": 2}  # fmt: skip
    two = assert_sharded_equals_one("sft", cfg, world, tmp_path)
    assert [r["step"] for r in two if r["split"] == "train"] == [1, 2, 3]
    fsdp = {**cfg, "sharding": "fsdp", "oom_backoff": False}
    assert resume_after_kill(fsdp, world, tmp_path / "killed", command="sft") == two
    assert_same_weights(tmp_path / "fsdp", tmp_path / "killed")


def test_sharded_dpo_on_two_ranks_equals_one_process(world, tmp_path):
    """DPO with the policy and the frozen reference both sharded: 9 training pairs in batches
    of 4 (the last one pair, rank 1 idle in step), validated at every step, the best policy
    gathered into best_checkpoint/."""
    pairs = write_addition_pairs(tmp_path / "pairs.jsonl", 13, lead=" ")
    two = assert_sharded_equals_one("dpo", {**DPO_1, "train_pairs": str(pairs)}, world, tmp_path)
    assert sum("val/preference_accuracy" in r for r in two) == 3
    assert_close_weights_in(tmp_path / "one", tmp_path / "fsdp", "best_checkpoint")


def assert_close_weights_in(a: Path, b: Path, folder: str) -> None:
    wa = load_file(a / folder / "model.safetensors")
    wb = load_file(b / folder / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-4


# Expert iteration: 2 rounds of 8 questions in groups of 4, the kept (reward-1) responses
# trained on in batches of 4 (2 micro batches: one per rank). The stand-in grader keeps about a
# quarter, so the last batch of a round is often shorter (shared unevenly over the ranks).
EI_2 = {
    **EI,
    "n_ei_steps": 2,
    "ei_batch_size": 8,
    "batch_size": 4,
    "gradient_accumulation_steps": 2,
    "rollout_seeding": "group",
    "eval_every": 0,
    "eval_at_start": False,
    "eval_examples": 4,
    "save_every": 0,
}


def test_ei_on_two_ranks_equals_one_process_with_and_without_fsdp(world, tmp_path):
    """Each rank samples and grades 4 of the 8 questions; both then hold the same kept set and
    train on it, each on its share of every batch: one process's metrics and weights. Then the
    same with the policy sharded: each rank samples from its full copy of the weights, scores
    its share of the rollouts with the sharded policy, and trains on the kept responses (a
    round's last batch often shorter, so a rank may run a pass of zero loss). Both 2-rank runs
    are held against the one one-process run."""
    one = assert_two_ranks_equal_one("ei", EI_2, world, tmp_path)
    only_rank_0_wrote(tmp_path / "one", tmp_path / "two")
    assert sum(r.get("kept", 0) for r in one) > 0
    assert any("grad_norm" in r for r in one)
    assert_sharded_equals_one("ei", EI_2, world, tmp_path, one=one)


def instruction_settings(folder: Path, n_train: int, **settings) -> dict:
    """Instruction-SFT settings over ``train.jsonl`` (``n_train`` {prompt, response} pairs) and
    ``val.jsonl`` (5), both written into ``folder``, packed in chunks of 16 tokens."""
    pairs = [(f"What is {i} + 3?", f"{i} + 3 = {i + 3}") for i in range(n_train)]
    for name, part in (("train", pairs), ("val", pairs[:5])):
        lines = [json.dumps({"prompt": p, "response": r}) + "\n" for p, r in part]
        (folder / f"{name}.jsonl").write_text("".join(lines))
    return {
        "device": "cpu",
        "train_data": str(folder / "train.jsonl"),
        "val_data": str(folder / "val.jsonl"),
        "seq_length": 16,
        "lr": 1e-3,
        "progress": False,
        **settings,
    }


def test_instruction_sft_on_two_ranks_equals_one_process(world, tmp_path):
    """Packed chunks of 16 tokens in batches of 4 (2 micro batches), 3 steps, the validation
    loss at every step: each rank accumulates its 2 chunks over the batch's token count and
    sums its share of the validation chunks."""
    cfg = instruction_settings(
        tmp_path, 12, val_every=1, batch_size=4, gradient_accumulation_steps=2, max_steps=3,
        save_every=0,
    )  # fmt: skip
    assert_two_ranks_equal_one("instruction-sft", cfg, world, tmp_path)
    only_rank_0_wrote(tmp_path / "one", tmp_path / "two")
    records = read_metrics(tmp_path / "one" / "metrics.jsonl")
    assert sum("val/loss" in r for r in records) >= 4  # step 0 and each of the 3 steps


def test_sharded_instruction_sft_on_two_ranks_equals_one_process_and_resumes_exactly(
    world, tmp_path
):
    """Instruction SFT with the model sharded, one chunk per micro batch: 8 pairs pack into 63
    chunks of 16 tokens, so the epoch's fourth and last batch of 16 has 15 and rank 1 runs its
    eighth micro batch as a pass of zero loss; the first 5 validation chunks split 3 and 2, so
    rank 1 runs one discarded forward. Rank 0 gathers the shards into its CPU copy for checkpoint/.
    Then the sharded run killed after step 3 (state saved after step 2) resumes to the same
    metrics and weights."""
    cfg = instruction_settings(
        tmp_path, 8, val_every=2, val_chunks=5, batch_size=16, gradient_accumulation_steps=16,
        save_every=2,
    )  # fmt: skip
    two = assert_sharded_equals_one("instruction-sft", cfg, world, tmp_path)
    done = json.loads((tmp_path / "fsdp" / "done.json").read_text())
    assert done["train_chunks"] == 63 and done["step"] == 4
    assert [r["step"] for r in two if r["split"] == "train" and "loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in two if r["split"] == "train" and "val/loss" in r] == [0, 2, 4]
    fsdp = {**cfg, "sharding": "fsdp", "oom_backoff": False}
    killed = tmp_path / "killed"
    assert resume_after_kill(fsdp, world, killed, command="instruction-sft") == two
    assert_same_weights(tmp_path / "fsdp", killed)


def test_a_world_size_that_does_not_divide_is_refused_before_any_work(world, tmp_path):
    """3 groups over 2 ranks: refused by every rank at once, naming the setting, with nothing
    written (the folder is not even created)."""
    cfg = {**GRPO_2, "rollout_batch_size": 12, "train_batch_size": 12}
    done = launch("grpo", cfg, world, tmp_path / "bad", nproc=2)
    assert done.returncode != 0
    assert "setting 'rollout_batch_size' (12) holds 3 groups" in done.stderr
    assert not (tmp_path / "bad").exists()
