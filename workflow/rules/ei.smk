# Expert iteration over the `ei` table (G x SFT epochs x question batch size).


use rule sft as ei with:
    input:
        base=base_model_input(),
    output:
        done=f"{R}/ei/{{variant}}/seed~{{seed}}/done.json",
    log:
        f"{R}/logs/ei/{{variant}}/seed~{{seed}}.log",
    benchmark:
        f"{R}/job_times/ei/{{variant}}/seed~{{seed}}.tsv"
    params:
        methods=METHODS_FILE,
        section=section_digest("ei"),
        command="ei",
        out=run_dir,
        model=base_model,
        settings=command_settings("ei"),
        variant=variant_args,
