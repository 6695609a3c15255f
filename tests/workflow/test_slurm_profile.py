"""The SLURM profile (workflow/profiles/slurm/config.yaml) places every job that needs a GPU:
each rule that declares a GPU, itself or through the rule it reuses (`use rule ... as ...
with:`), has a GPU partition, a runtime and threads there, and the profile names no rule that
does not exist. Read from the rule files, so a new GPU rule without a place fails here."""

from __future__ import annotations

import re

import yaml
from project_root import ROOT

RULES = ROOT / "workflow/rules"
PROFILE = ROOT / "workflow/profiles/slurm/config.yaml"
HEAD = re.compile(r"^\s*(?:rule (\w+):|use rule (\w+) as (\w+) with:)\s*$")
# How a rule's `resources:` asks for GPUs: `gpu=...`, or the training jobs' shared resources.
GPU_MARKERS = ("gpu=", "**TRAIN_RESOURCES")


def rules() -> dict[str, tuple[str | None, str]]:
    """Every rule of the workflow -> (the rule it reuses or None, its block's text)."""
    found: dict[str, tuple[str | None, list[str]]] = {}
    for path in sorted(RULES.glob("*.smk")):
        current = None
        for line in path.read_text().splitlines():
            if match := HEAD.match(line):
                name = match.group(1) or match.group(3)
                current = found[name] = (match.group(2), [])
            elif current is not None:
                current[1].append(line)
    return {name: (base, "\n".join(lines)) for name, (base, lines) in found.items()}


def gpu_rules() -> set[str]:
    table = rules()

    def needs_gpu(name: str) -> bool:
        base, text = table[name]
        return any(m in text for m in GPU_MARKERS) or (base is not None and needs_gpu(base))

    return {name for name in table if needs_gpu(name)}


def test_the_rule_reader_sees_the_reused_rules():
    table = rules()
    assert table["ei"][0] == "sft" and table["leaderboard"][0] == "grpo"
    assert {"zero_shot", "sft", "ei", "grpo", "dpo", "supplement_dpo"} <= gpu_rules()
    assert not {"tiny_world", "summary", "sft_data"} & gpu_rules()


def test_every_gpu_rule_has_a_gpu_partition_a_runtime_and_threads():
    profile = yaml.safe_load(PROFILE.read_text())
    placed, threads = profile["set-resources"], profile["set-threads"]
    missing = []
    for name in sorted(gpu_rules()):
        resources = placed.get(name, {})
        if resources.get("slurm_partition") != "<gpu-partition>":
            missing.append(f"{name}: no GPU partition")
        if not isinstance(resources.get("runtime"), int) or resources["runtime"] <= 0:
            missing.append(f"{name}: no runtime")
        if name not in threads:
            missing.append(f"{name}: no threads")
    assert missing == []


def test_the_profile_names_only_rules_that_exist():
    profile = yaml.safe_load(PROFILE.read_text())
    named = set(profile["set-resources"]) | set(profile["set-threads"])
    assert named - set(rules()) == set()
