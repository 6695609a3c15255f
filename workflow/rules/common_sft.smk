# Helpers of the SFT runs' data (rules sft_data and sft); no rules here. Uses common.smk.
#
# What every SFT run trains on, decided while the study is planned:
#   - the `sft_data` setting: the user's file, checked now (a bad record stops snakemake before
#     any job runs, naming the file, the line and the field);
#   - `train_data` in the methods file or settings.sft: that file, passed on as it is;
#   - a task with a built-in SFT pool (the tiny world's arithmetic task): that pool, as before;
#   - any other task (MATH, GSM8K, Countdown): the set the `sft_data` rule builds from the
#     task's own worked solutions, unfiltered (the filtered SFT run filters it and records how
#     many examples it kept in its done.json).
SFT_SETTINGS = METHOD_SETTINGS["sft"]
SFT_TASK = SFT_SETTINGS.get("task", "math")  # defaults as in CommonConfig
SFT_SPLIT = SFT_SETTINGS.get("train_split", "train")
SFT_TEMPLATE = SFT_SETTINGS.get("template", "r1_zero")
SFT_DATA_RULE_OUTPUT = f"{R}/sft_data/{SFT_TASK}_{SFT_SPLIT}.jsonl"


def _sft_data_file():
    """(file every SFT run gets as `train_data`, or None; whether the sft_data rule makes it)."""
    import envs
    from envs.sft_data import check_examples_file

    if config.get("sft_data"):
        path = Path(config["sft_data"])
        path = path if path.is_absolute() else ROOT / path
        try:
            check_examples_file(path)
        except envs.DataError as exc:
            raise ValueError(f"setting 'sft_data': {exc}") from None
        return str(path), False
    if SFT_SETTINGS.get("train_data"):
        return None, False
    try:
        task = envs.get_task(SFT_TASK)
    except ValueError as exc:
        raise ValueError(f"{METHODS_FILE}: section sft, setting 'task': {exc}") from None
    if getattr(task, "sft_pool", None) is not None:
        return None, False
    return SFT_DATA_RULE_OUTPUT, True


SFT_DATA, SFT_DATA_BUILT = _sft_data_file()


def sft_data_input():
    """The SFT data file every SFT job reads, when the study names or builds one."""
    if SFT_DATA_BUILT:
        return [rules.sft_data.output.jsonl]
    return [SFT_DATA] if SFT_DATA else []


def sft_settings():
    """--set arguments of every SFT run: settings.sft, then the study's SFT data file."""
    args = command_settings("sft")
    if SFT_DATA:
        args = f"{args} {set_args({'train_data': SFT_DATA})}"
    return args.strip()


def sft_data_limit():
    limit = config.get("sft_data_limit")
    return f"--limit {int(limit)}" if limit else ""
