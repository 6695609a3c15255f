"""A training run's life cycle: the run folder, the evaluator, set-up, after each iteration, finish.

Every trainer goes through the same stages::

    start_run        done.json there? stop. Else threads, seeds, device, task.
    setup_training   RunContext (config.yaml, metrics), policy, AdamW + schedule, resume from
                     state/, rollout engine, Evaluator; evaluate at step 0 on a fresh start
    ... the trainer's own loop, logging through run.log ...
    after_iteration  evaluate every eval_every and at the end; save state every save_every;
                     True once the run's wall time passes max_wall_seconds (the loop stops)
    finish_training  final evaluation if not just done, checkpoint/, done.json; drop state/

:func:`run_main` is the ``rrl <trainer>`` entry point: bad settings exit 2 before any work.

Under ``torchrun`` (``WORLD_SIZE`` > 1) :func:`run_main` first asks the settings whether they
split over that many processes (``check_world``; refused with exit 2 naming the setting, before
any work), then joins the process group. Rank 0 decides whether the folder may be written
(:func:`start_run`) and alone evaluates (the others only sync their engine's weights, as an
evaluation does); the trainers' own loops are the same on every rank.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tqdm.auto import tqdm

import envs
from reasoning_core.runtime import engines
from reasoning_core.runtime.distributed import world as dist_world
from reasoning_core.runtime.distributed.collectives import broadcast_object
from reasoning_core.runtime.distributed.sharding import (
    FullWeightsEngine,
    is_sharded,
    shard_policy,
    unsharded_copy,
)
from reasoning_core.runtime.distributed.world import is_main, launched_rank, launched_world_size
from reasoning_core.runtime.engines import make_engine, resolve_engine
from reasoning_core.runtime.engines.rollout import RolloutEngine
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.evaluation.loop import evaluation_steps, finish_steps
from reasoning_core.runtime.evaluation.summary import eval_line_stats, load_eval_examples
from reasoning_core.runtime.run import ownership
from reasoning_core.runtime.run.folder import RunContext
from reasoning_core.runtime.run.metrics import write_generations
from reasoning_core.runtime.run.resume import RESUME_MAY_CHANGE
from reasoning_core.runtime.settings.config import resolve_command
from reasoning_core.runtime.training.batching import MicroBatchSize
from reasoning_core.runtime.training.episodes import (
    EnvironmentTask,
    EpisodeEngine,
    environment_factory,
    episode_metrics,
)
from reasoning_core.runtime.training.policy import (
    load_policy,
    make_optimizer,
    make_scheduler,
    resolve_device,
    setup_torch,
)
from reasoning_core.runtime.training.rollouts import eval_params
from reasoning_core.runtime.training.settings import CommonConfig, engine_options

# The resumable state's record of the evaluations (their steps) asked for and not yet logged.
PENDING_EVALS = "pending_evals"


def evaluate_pending(t: Training) -> None:
    """On resume, ask again for the evaluations the saved state records as not yet logged
    (:func:`after_iteration`), in their order: their lines go right after the saved ones."""
    for step in (t.run.resumed_extra or {}).get(PENDING_EVALS, []):
        t.evaluator(t.engine, t.model, step, t.run)


def start_run(
    cfg: CommonConfig, out: str | Path, method: str
) -> tuple[torch.device, envs.Task] | None:
    """How every trainer starts: None (after saying so) when ``out`` holds this run finished,
    else threads, seeds and ``(device, task)``; see :func:`ownership.check_run_folder`. Under
    ``torchrun`` rank 0 alone reads the folder and tells the others (no rank races it)."""
    verdict: tuple[str, str] = ("go", "")
    if is_main():
        try:
            if ownership.check_run_folder(out, method, cfg, may_change=RESUME_MAY_CHANGE):
                verdict = ("done", "")
        except ConfigError as exc:
            broadcast_object(("refused", str(exc)))
            raise
    verdict = broadcast_object(verdict)
    if verdict[0] == "refused":
        raise ConfigError(verdict[1])
    if verdict[0] == "done":
        return None
    setup_torch(cfg)
    return resolve_device(cfg.device), envs.get_task(cfg.task)


class Evaluator:
    """Sampled evaluation on a fixed list of eval problems with a fixed seed (``eval_seed``, or
    the run's ``seed`` when unset; each engine call its own, see ``eval_loop.chunk_seed``).

    Each ``eval`` line also carries ``entropy``: the policy's mean token entropy over the
    responses, token-weighted (every response token of every response counts once), from a
    no-gradient forward of the policy module itself (eval mode, micro batches of
    ``max(8, micro_batch_size)`` rows with their own out-of-memory back-off). It draws no
    random numbers, so no other metric changes; its time is in ``time/eval`` and apart as
    ``time/entropy``."""

    def __init__(self, cfg: CommonConfig, task: envs.Task, tokenizer: Any):
        self.cfg = cfg
        self.task = task
        self.tokenizer = tokenizer
        self.examples = load_eval_examples(task, cfg)
        self.params = eval_params(cfg)
        self.entropy_micro = MicroBatchSize(
            max(8, cfg.micro_batch_size),
            backoff=cfg.oom_backoff,
            name="eval entropy",
        )

    def __call__(self, engine: RolloutEngine, model, step: int, run: RunContext) -> dict | None:
        """Sync weights, evaluate, write generations, log an ``eval`` line; return it. Under
        ``torchrun`` rank 0 evaluates; another rank only syncs its engine (the weights an
        evaluation leaves in the engine are the next rollouts' with ``sync_every`` > 1) and
        returns None."""
        if not is_main():
            engine.sync_weights(model)
            return None
        t0 = time.perf_counter()
        engine.sync_weights(model)
        # A sharded policy (FSDP2) cannot run forwards on rank 0 alone: the entropy pass runs
        # on the engine's full copy, just synced.
        model = getattr(engine, "full_model", model)
        values, records = finish_steps(self.steps(engine, model))
        values["time/sync"] = time.perf_counter() - t0 - values["time/eval"]
        return self.record(run, step, values, records)

    def steps(self, engine: RolloutEngine, model) -> Generator[None, None, tuple[dict, list]]:
        """The evaluation of the weights ``engine`` holds (``model``: the same weights as a
        module, for the entropy pass), as a generator that pauses between engine calls
        (:func:`~reasoning_core.runtime.evaluation.loop.evaluation_steps`) and returns the
        ``eval`` line's values (``time/eval``: its own time, pauses left out) and the
        generations' records, for :meth:`record`."""
        active = 0.0
        resumed = time.perf_counter()
        was_training = model.training
        model.eval()
        sampler, task = engine, self.task
        make_env = environment_factory(self.cfg, self.task)
        if make_env is not None:  # setting env: evaluated on episodes, the tool at hand
            sampler = EpisodeEngine(engine, make_env, self.examples, self.tokenizer)
            task = EnvironmentTask(make_env)
        steps = evaluation_steps(
            sampler,
            self.examples,
            task,
            self.cfg.template,
            self.params,
            batch_size=self.cfg.eval_batch_size,
            progress=self.cfg.progress,  # a full MATH eval takes minutes even on a GPU
            model=model,
            tokenizer=self.tokenizer,
            entropy_micro_batch_size=self.entropy_micro,
        )
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                result = stop.value
                break
            active += time.perf_counter() - resumed
            yield
            resumed = time.perf_counter()
        model.train(was_training)
        summary = result.summary
        values = {
            "accuracy": summary["answer_reward"],
            "format_reward": summary["format_reward"],
            "reward": summary["reward"],
            "num_examples": summary["num_examples"],
            **eval_line_stats(summary),
            "time/sync": 0.0,
            "time/eval": active + time.perf_counter() - resumed,
            "time/entropy": summary["time/entropy"],
        }
        if make_env is not None:  # what the tool did in the evaluation's episodes
            values.update(episode_metrics(sampler.episodes))
        return values, result.records

    def wait(self) -> None:
        """Until every evaluation asked for is logged: nothing to wait for here (each is
        logged when asked); a rollout worker's evaluations
        (:class:`~reasoning_core.runtime.training.async_rollout.WorkerEvaluator`) come back
        later."""

    def settle(self, wait: bool = False) -> list[int] | None:
        """Before a state is saved: the steps of the evaluations still out, all of the weights
        about to be saved (a resumed run asks for them again), or None while a metrics line
        waits for one (the state cannot be saved yet; ``wait``: wait until none does). Here
        none is ever out: ``[]``."""
        return []

    def record(
        self, run: RunContext, step: int, values: dict, records: list, slot: Any = None
    ) -> dict:
        """Write an evaluation's generations and its ``eval`` line at ``step`` (into the place
        ``slot`` kept for it, when given: :meth:`RunContext.reserve`); return the line."""
        write_generations(run.out, step, records)
        record = run.log(values, step=step, split="eval", slot=slot)
        run.last_eval = record
        return record


class Training(NamedTuple):
    """What a trainer works with once set up (see :func:`setup_training`)."""

    run: RunContext
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    counters: dict[str, Any] | None  # the resumed counters; None on a fresh start
    engine: RolloutEngine
    evaluator: Evaluator

    def resumed(self, counter: str) -> int:
        """The saved value of ``counter`` on a resumed run; 0 on a fresh start."""
        return self.counters[counter] if self.counters else 0


def rollout_engine_kind(cfg: CommonConfig, model) -> str:
    """The engine ``cfg.engine`` means for a policy on ``model``'s device (``auto`` resolved by
    :func:`engines.resolve_engine`)."""
    return resolve_engine(cfg.engine, next(model.parameters()).device)


def make_rollout_engine(cfg: CommonConfig, model, tokenizer):
    """The engine a run samples with: :func:`rollout_engine_kind` built by
    :func:`engines.make_engine` with its options from ``cfg.engine_kwargs``
    (:func:`settings.engine_options`). One seam for tests that wrap the engine a trainer builds.

    The hf and static engines sample from the module they are given, the live policy, unless
    setting ``sync_every`` (EI, GRPO) is above 1 or ``rollout_lag`` (GRPO) above 0: then they
    get a copy of their own, which keeps the weights of its last sync between syncs (vLLM
    always holds its own).

    vLLM computes in the policy's dtype unless ``engine_kwargs`` names another: its own
    ``auto`` turns a float32 checkpoint into bfloat16 (on a CPU too), which put SmolLM2-135M's
    engine 0.039 nats per token from its float32 policy in sync (docs/real_weights.md)."""
    kind = rollout_engine_kind(cfg, model)
    own_copy = getattr(cfg, "sync_every", 1) > 1 or getattr(cfg, "rollout_lag", 0) > 0
    if own_copy and kind in ("hf", "static"):
        model = copy.deepcopy(model)
    options = engine_options(cfg.engine_kwargs, kind)
    if kind == "vllm":
        options.setdefault("dtype", str(next(model.parameters()).dtype).removeprefix("torch."))
    return make_engine(kind, model, tokenizer, **options)


def auto_reason(model) -> str:
    """Why ``engine: auto`` chose what it did, for the run's log."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return f"policy on {device}"
    return f"policy on {device}, vllm " + (
        "imports" if engines.vllm_importable() else "does not import"
    )


def setup_training(
    cfg: CommonConfig,
    out: str | Path,
    method: str,
    task: envs.Task,
    total_steps: int,
    optimizer_fn: Any = make_optimizer,
    evaluate_at_start: bool = True,
) -> Training:
    """Open the run folder, load the policy, build its optimizer (``optimizer_fn(model, cfg)``,
    AdamW unless the trainer says otherwise) and its ``total_steps`` schedule, resume from
    ``out/state`` if there is one, start the rollout engine and the evaluator, and evaluate at
    step 0 on a fresh start (``eval_at_start``; ``evaluate_at_start`` False: the trainer does,
    with an evaluator of its own)."""
    run = RunContext(cfg, out, method)
    model, tokenizer = load_policy(cfg)
    full_model = None
    if getattr(cfg, "sharding", "none") == "fsdp":  # torchrun only (check_world)
        full_model = unsharded_copy(model)  # the rollout engine's weights
        shard_policy(model)
    optimizer = optimizer_fn(model, cfg)
    scheduler = make_scheduler(optimizer, cfg, total_steps)
    counters = run.resume(model, optimizer, scheduler)
    run.engine = rollout_engine_kind(cfg, model)
    why = "" if cfg.engine == run.engine else f" (engine: {cfg.engine}; {auto_reason(model)})"
    print(f"[{method}] rollout engine: {run.engine}{why}", file=sys.stderr)
    if full_model is None:
        engine = make_rollout_engine(cfg, model, tokenizer)
    else:
        engine = FullWeightsEngine(make_rollout_engine(cfg, full_model, tokenizer), full_model)
    evaluator = Evaluator(cfg, task, tokenizer)
    if counters is None and cfg.eval_at_start and evaluate_at_start:
        evaluator(engine, model, 0, run)
    return Training(run, model, tokenizer, optimizer, scheduler, counters, engine, evaluator)


def after_iteration(
    t: Training, total: int, state_extra: dict[str, Any] | None = None, **counters: int
) -> bool:
    """After an iteration of the trainer's loop of ``total``: evaluate at the last one and
    every ``eval_every``; save resumable state (``counters``) every ``save_every`` but the last
    (the finished run's checkpoint follows).

    ``counters`` are what the state saves and a resumed run reads back (:meth:`Training.resumed`):
    ``opt_step``, the optimizer step reached, and the trainer's iteration count when it has
    one besides (``grpo_step``, ``ei_step``); the iterations done are that count, else
    ``opt_step`` (SFT's iteration is its optimizer step). ``state_extra``: more the state
    keeps (GRPO's policy versions under ``rollout_lag``), read back as
    ``t.run.resumed_extra``.

    Returns True when the run must stop early because its elapsed wall time passed
    ``max_wall_seconds``: nothing is evaluated or saved here then; the trainer leaves its loop
    and :func:`finish_training` evaluates at ``opt_step``, saves the checkpoint and writes
    ``done.json`` with ``stopped_on_budget: true``."""
    step = counters["opt_step"]
    iterations = [value for name, value in counters.items() if name != "opt_step"]
    if len(iterations) > 1:
        raise ValueError(f"one iteration counter besides opt_step, got {sorted(counters)}")
    done = iterations[0] if iterations else step
    cfg = t.run.cfg
    is_last = done == total
    t.run.iterations = {"iterations_done": done, "iterations_planned": total}
    if not is_last and t.run.over_budget():
        t.run.budget_stop = {"iterations_done": done, "iterations_planned": total}
        print(
            f"[{t.run.method}] max_wall_seconds ({cfg.max_wall_seconds:g} s) spent after "
            f"{done} of {total} iterations (optimizer step {step}): evaluating and saving",
            file=sys.stderr,
        )
        return True
    if is_last or (cfg.eval_every and done % cfg.eval_every == 0):
        t.evaluator(t.engine, t.model, step, t.run)
    if not is_last and cfg.save_every and done % cfg.save_every == 0 and t.run.save_due is None:
        t.run.save_due = done
    if t.run.save_due is not None and not is_last:
        # The state counts every line logged before it: while a line waits for an evaluation
        # a rollout worker runs, the save waits for a later iteration rather than the learner
        # for the worker, for save_every iterations at most (then the learner waits). An
        # evaluation of the very weights it saves that has not come back yet is asked for
        # again on resume.
        pending = t.evaluator.settle(wait=done - t.run.save_due >= cfg.save_every)
        if pending is not None:
            if pending:
                state_extra = {**(state_extra or {}), PENDING_EVALS: pending}
            t.run.save_state(t.model, t.optimizer, t.scheduler, extra=state_extra, **counters)
            t.run.save_due = None
    return False


def finish_training(
    t: Training,
    *,
    step: int,
    extra: dict[str, Any] | None = None,
    evaluated: Callable[[], None] | None = None,
) -> dict:
    """Evaluate at ``step`` unless that was just done, then finish the run folder.
    ``evaluated``: called once every evaluation is back, before the final save (GRPO's
    rollout worker is told to end there, and ends while the weights are written)."""
    t.evaluator.wait()
    if broadcast_object(t.run.last_eval is None or t.run.last_eval["step"] != step):
        t.evaluator(t.engine, t.model, step, t.run)
        t.evaluator.wait()
    if evaluated is not None:
        evaluated()
    return t.run.finish(whole_policy(t), t.tokenizer, step=step, extra=extra)


def whole_policy(t: Training) -> torch.nn.Module:
    """The policy with all its weights, to save: the module itself, or for a sharded one
    (FSDP2) the engine's full copy with the shards gathered into it on every rank (a
    collective; the engine itself keeps its weights until its next sync)."""
    if is_sharded(t.model):
        return t.engine.gather(t.model)
    return t.model


def progress(*, total: int, desc: str, initial: int = 0, enabled: bool = True) -> tqdm:
    """A tqdm progress bar on stderr (updated at most every 2 s); under ``torchrun``, rank 0's
    only."""
    return tqdm(
        total=total,
        desc=desc,
        initial=initial,
        disable=not (enabled and is_main()),
        mininterval=2.0,
        file=sys.stderr,
        dynamic_ncols=True,
    )


def run_main(cls: type, section: str, train_fn, argv: list[str] | None, description: str) -> int:
    """Entry point of ``rrl <section>``: parse, validate (bad settings exit 2 with a message
    naming the setting, before any work), train."""
    resolved = resolve_command(cls, section, argv, description)
    if resolved is None:
        return 2
    cfg, args = resolved
    world = launched_world_size()
    if world > 1:  # torchrun: the settings must split over the ranks, checked before any work
        try:
            cfg.check_world(world)
        except ConfigError as exc:
            if launched_rank() == 0:
                print(f"rrl {section}: {exc}", file=sys.stderr)
            return 2
        dist_world.init(cfg.device)
    try:
        train_fn(cfg, args.out)
    except ConfigError as exc:  # data-dependent settings checked after loading the data
        print(f"rrl {section}: {exc}", file=sys.stderr)
        dist_world.shutdown(wait=False)
        return 2
    dist_world.shutdown()
    return 0
