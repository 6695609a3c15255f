# Settings and input functions of the supplement's rules (workflow/rules/supplement.smk); no
# rules here. Read only when the config has a `supplement` section.

if "supplement" in config:
    import json as _json

    SUP = config["supplement"]
    S = SUP.get("results_dir", "results/supplement")
    # Like `methods`, a relative dpo_config is read from the repository.
    SUP_DPO_CONFIG = str(ROOT / SUP.get("dpo_config", "workflow/config/methods/gpu_hh_dpo.yaml"))
    SUP.setdefault("dpo_checkpoint", "best_checkpoint")
    for _key in ("model_path", "judge_path", "sft_train_data", "hh_dir"):
        if not SUP.get(_key):
            raise ValueError(f"setting 'supplement.{_key}' is required (docs/supplement.md)")
    SUP_STAGES = ("base", "sft", "dpo")
    SUP_EVALS = ("mmlu", "gsm8k", "alpaca_eval", "sst", "sst_judge")
    SUP_TEMPLATE = {"base": "zero_shot_system_prompt", "sft": "alpaca_sft", "dpo": "alpaca_sft"}
    SUP_TASK = {"mmlu": "mmlu", "gsm8k": "gsm8k_supplement"}
    SUP_DATASET = {"alpaca_eval": "alpaca_eval", "sst": "simple_safety_tests"}
    # The handout's decoding of every evaluation: greedy, stopping at "# Query:" (dropped).
    SUP_DECODING = {
        "eval_temperature": 0.0,
        "stop": ["# Query:"],
        "include_stop_str_in_output": False,
    }

    def sup_sets(*mappings):
        """`--set key=value` (the value as JSON, which YAML reads) of each mapping in order."""
        merged = {}
        for mapping in mappings:
            merged.update(mapping or {})
        return " ".join(
            f"--set {shlex.quote(f'{key}={_json.dumps(value)}')}" for key, value in merged.items()
        )

    def sup_model(stage):
        """The model folder a stage's evaluations read."""
        if stage == "base":
            return SUP["model_path"]
        if stage == "sft":
            return f"{S}/train/sft/checkpoint"
        return f"{S}/train/dpo/{SUP['dpo_checkpoint']}"

    def sup_trained(wildcards):
        """The run a stage's evaluations wait for (none for the base model)."""
        return [] if wildcards.stage == "base" else [f"{S}/train/{wildcards.stage}/done.json"]

    def sup_stage_model(wildcards):
        """The model folder of the stage an evaluation rule's job reads."""
        return sup_model(wildcards.stage)

    def sup_eval_task(wildcards):
        """rrl eval's task of an evaluation (mmlu or gsm8k_supplement)."""
        return SUP_TASK[wildcards.ev]

    def sup_eval_settings(wildcards):
        """rrl eval's settings of one evaluation: the handout's decoding, the stage's template,
        then the config's `eval` section and the evaluation's own section."""
        return sup_sets(
            SUP_DECODING,
            {"template": SUP_TEMPLATE[wildcards.stage]},
            SUP.get("eval"),
            SUP.get(wildcards.ev),
        )

    def sup_generate_settings(wildcards):
        """rrl supplement-generate's settings: the data set, the template, the generator's name
        (the stage), then the config's `generate` section."""
        return sup_sets(
            {"dataset": SUP_DATASET[wildcards.ev], "template": SUP_TEMPLATE[wildcards.stage]},
            {"generator": f"{wildcards.stage}"},
            SUP.get("generate"),
        )

    def sup_judge_responses(wildcards):
        """The SimpleSafetyTests responses of a stage, which the judge reads."""
        return f"{S}/{wildcards.stage}/sst/simple_safety_tests.jsonl"

    def sup_out(wildcards, output):
        """A job's run folder: the folder of its done.json."""
        return posixpath.dirname(output.done)
