"""The SmolLM2 calculator study's plan: `snakemake -n` on workflow/config/real_cpu_tools.yaml:
the model imported from the package's GGUF file, the SFT start of workflow/config/real_cpu.yaml
(same settings, seeds 0-2), GRPO from each SFT seed with the calculator, and tool_use.tsv
judging it against the committed GRPO runs of results/real_cpu (the recipe without the tool)."""

from __future__ import annotations

import shutil

from project_root import ROOT
from snakemake_runs import planned_jobs, snakemake

CONFIG = ROOT / "workflow/config/real_cpu_tools.yaml"


def test_smollm2_calculator_study_plans_grpo_with_the_tool_from_the_real_cpu_sft_start(tmp_path):
    shutil.copytree(
        ROOT / "results/real_cpu/leaderboard", tmp_path / "results/real_cpu/leaderboard"
    )
    result = snakemake("-n", "-p", "--cores", "2", "--configfile", str(CONFIG), cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    produced = {j.get("output") for j in planned_jobs(result.stdout)}
    assert any(out.startswith("results/real_cpu_tools/model,") for out in produced if out)
    for s in (0, 1, 2):
        assert f"results/real_cpu_tools/sft/default/seed~{s}/done.json" in produced
        assert f"results/real_cpu_tools/leaderboard/seed~{s}/done.json" in produced
    commands = [line.partition("Shell command: ")[2] for line in result.stdout.splitlines()]
    sft = [line for line in commands if line.startswith("rrl sft")]
    grpo = [line for line in commands if line.startswith("rrl grpo")]
    assert len(sft) == 3 and len(grpo) == 3
    for line in sft:  # the real_cpu study's SFT start: its methods file, no override
        assert "methods/smollm2_cpu.yaml" in line and "--set env" not in line
    for line in grpo:
        seed = line.split("--set seed=")[1].split()[0]
        assert f"model_path=results/real_cpu_tools/sft/default/seed~{seed}/checkpoint" in line
        for setting in ("env=calculator", "tool_prompt=r1_zero_calc", "sampling_max_tokens=64"):
            assert f"--set {setting}" in line
    tool_use = [line for line in commands if line.startswith("rrl tool-use")]
    assert len(tool_use) == 1
    assert "results/real_cpu/leaderboard results/real_cpu_tools/leaderboard" in tool_use[0]
