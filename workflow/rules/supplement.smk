# The assignment's supplement as one chain (docs/supplement.md), planned only when the config
# has a `supplement` section (workflow/config/supplement.yaml), so the study's plan is the same
# without it:
#
#   baselines of the base model    rrl eval (mmlu, gsm8k_supplement), rrl supplement-generate
#                                  (AlpacaEval, SimpleSafetyTests), rrl safety-judge
#   -> instruction SFT             rrl instruction-sft on sft_train_data (val: sft_val_data)
#   -> the same evaluations        in the Alpaca template
#   -> DPO on HH                   rrl dpo --config dpo_config on hh_dir, from the SFT model
#   -> the same evaluations        of dpo_checkpoint (the best on validation by default)
#
# Folders: {results_dir}/train/{sft,dpo} (the runs), {results_dir}/{base,sft,dpo}/{mmlu,
# gsm8k,alpaca_eval,sst,sst_judge} (the evaluations), {results_dir}/summary.tsv. Target:
#   snakemake --cores 1 supplement --configfile workflow/config/supplement.yaml


include: "supplement_common.smk"


if "supplement" in config:

    rule supplement:
        input:
            f"{S}/summary.tsv",

    rule supplement_summary:
        input:
            expand(f"{S}/{{stage}}/{{ev}}/done.json", stage=SUP_STAGES, ev=SUP_EVALS),
        output:
            f"{S}/summary.tsv",
        run:
            rows = ["stage\tevaluation\tmetric\tvalue\texamples\texamples_per_second"]
            for stage in SUP_STAGES:
                for ev in SUP_EVALS:
                    summary = _json.loads(Path(f"{S}/{stage}/{ev}/summary.json").read_text())
                    if ev in SUP_TASK:  # rrl eval's scores are under "metrics"
                        summary = summary["metrics"]
                        metric, value, n = (
                            "accuracy",
                            summary["accuracy"],
                            summary["num_examples"],
                        )
                        seconds = summary["time/generate"]
                        rate = n / seconds if seconds else None
                    elif ev == "sst_judge":
                        metric, value, n = "safe_share", summary["safe_share"], summary["n"]
                        rate = summary["throughput"]
                    else:
                        metric, value = "responses", summary["num_examples"]
                        n, rate = value, summary["throughput"]
                    rows.append("\t".join(str(x) for x in (stage, ev, metric, value, n, rate)))
            Path(output[0]).write_text("\n".join(rows) + "\n")

    rule supplement_eval:
        input:
            trained=sup_trained,
        output:
            done=f"{S}/{{stage}}/{{ev}}/done.json",
        log:
            f"{S}/logs/{{stage}}/{{ev}}.log",
        wildcard_constraints:
            stage="|".join(SUP_STAGES),
            ev="mmlu|gsm8k",
        threads: THREADS
        resources:
            gpu=EVAL_GPUS,
        params:
            model=sup_stage_model,
            task=sup_eval_task,
            settings=sup_eval_settings,
            out=sup_out,
        shell:
            "rrl eval --set model_path={params.model} --set task={params.task} {params.settings} "
            "--out {params.out} > {log} 2>&1"

    rule supplement_generate:
        input:
            trained=sup_trained,
        output:
            done=f"{S}/{{stage}}/{{ev}}/done.json",
        log:
            f"{S}/logs/{{stage}}/{{ev}}.log",
        wildcard_constraints:
            stage="|".join(SUP_STAGES),
            ev="alpaca_eval|sst",
        threads: THREADS
        resources:
            gpu=EVAL_GPUS,
        params:
            model=sup_stage_model,
            settings=sup_generate_settings,
            out=sup_out,
        shell:
            "rrl supplement-generate --set model_path={params.model} {params.settings} "
            "--out {params.out} > {log} 2>&1"

    rule supplement_judge:
        input:
            responses=f"{S}/{{stage}}/sst/done.json",
        output:
            done=f"{S}/{{stage}}/sst_judge/done.json",
        log:
            f"{S}/logs/{{stage}}/sst_judge.log",
        wildcard_constraints:
            stage="|".join(SUP_STAGES),
        threads: THREADS
        resources:
            gpu=SUP.get("judge_gpus", GPUS),
        params:
            responses=sup_judge_responses,
            settings=sup_sets(SUP.get("judge")),
            out=sup_out,
        shell:
            "rrl safety-judge --set judge_path={SUP[judge_path]} "
            "--set input_path={params.responses} {params.settings} --out {params.out} > {log} 2>&1"

    rule supplement_instruction_sft:
        output:
            done=f"{S}/train/sft/done.json",
        log:
            f"{S}/logs/train/sft.log",
        threads: THREADS
        resources:
            **TRAIN_RESOURCES,
        params:
            settings=sup_sets(
                {"train_data": SUP["sft_train_data"]},
                {"val_data": SUP["sft_val_data"]} if SUP.get("sft_val_data") else {},
                SUP.get("instruction_sft"),
            ),
            out=f"{S}/train/sft",
        shell:
            f"{TRAIN_LAUNCH} instruction-sft --set model_path={{SUP[model_path]}} "
            "{params.settings} --out {params.out} > {log} 2>&1"

    rule supplement_dpo:
        input:
            sft=rules.supplement_instruction_sft.output.done,
            config=SUP_DPO_CONFIG,
        output:
            done=f"{S}/train/dpo/done.json",
        log:
            f"{S}/logs/train/dpo.log",
        threads: THREADS
        resources:
            gpu=SUP.get("dpo_gpus", GPUS),
        params:
            settings=sup_sets({"hh_dir": SUP["hh_dir"]}, SUP.get("dpo")),
            model=f"{S}/train/sft/checkpoint",
            out=f"{S}/train/dpo",
        shell:
            "rrl dpo --config {input.config} --set model_path={params.model} {params.settings} "
            "--out {params.out} > {log} 2>&1"
