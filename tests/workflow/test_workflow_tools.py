"""The tool study's plan: `snakemake -n` on workflow/config/tools.yaml (the tiny world, three
seeds, its own results folder): the SFT run on the multiply task's transcripts, and GRPO
without the tool, with the calculator and with its bonus, each seed N started from the SFT
run's seed N."""

from __future__ import annotations

import shutil

from project_root import ROOT
from snakemake_runs import planned_jobs, snakemake
from test_workflow_pg_family import SHIPPED_BASE, grpo_outputs

CONFIG = ROOT / "workflow/config/tools.yaml"
RUNS = [
    "default",
    "env~calculator/tool_prompt~r1_zero",
    "env~calculator/tool_bonus~0.1/tool_prompt~r1_zero",
]


def test_tools_study_plans_three_arms_from_the_sft_start(tmp_path):
    shutil.copytree(ROOT / SHIPPED_BASE, tmp_path / SHIPPED_BASE)
    result = snakemake("-n", "-p", "--cores", "2", "--configfile", str(CONFIG), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    outputs = sorted(grpo_outputs(result.stdout))
    assert outputs == sorted(
        f"results/tools/grpo/{run}/seed~{s}/done.json" for run in RUNS for s in (0, 1, 2)
    )
    produced = {j.get("output") for j in planned_jobs(result.stdout)}
    for s in (0, 1, 2):
        assert f"results/tools/sft/default/seed~{s}/done.json" in produced
    assert "results/tools/plots/grpo_tools_training.png" in produced
    assert "results/tools/tool_use.tsv" in produced
    tool_use = [line for line in result.stdout.splitlines() if "rrl tool-use" in line]
    assert len(tool_use) == 1 and "--root results/tools" in tool_use[0]
    for run in RUNS:
        assert f"results/tools/grpo/{run} " in tool_use[0]
    # Every GRPO seed starts from its SFT seed's checkpoint, on the multiply task.
    commands = [line.partition("Shell command: ")[2] for line in result.stdout.splitlines()]
    grpo_commands = [line for line in commands if line.startswith("rrl grpo")]
    assert len(grpo_commands) == 9
    for line in grpo_commands:
        seed = line.split("--set seed=")[1].split()[0]
        assert f"model_path=results/tools/sft/default/seed~{seed}/checkpoint" in line
        assert "--set task=multiply" in line and "--set share_prompts=false" in line
    sft_commands = [line for line in commands if line.startswith("rrl sft")]
    assert len(sft_commands) == 3
    assert all("--set task=multiply" in line for line in sft_commands)
    assert sum("--set tool_bonus=0.1" in line for line in grpo_commands) == 3
    assert sum("--set env=calculator" in line for line in grpo_commands) == 6
