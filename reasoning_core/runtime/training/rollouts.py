"""Rollouts for training: pick a step's questions, sample ``group_size`` responses each, grade.

:func:`sample_and_grade` is what one step of expert iteration and one step of GRPO both begin
with. The questions a step samples and the engine's seed are functions of ``(seed, step)``
(:mod:`reasoning_core.runtime.run.rng`), so a resumed run samples what an uninterrupted run would.

Seeding (setting ``rollout_seeding``): ``batch`` (the default) samples a step's questions in one
engine call with one seed; ``group`` samples each question's group in its own call, seeded by
``(seed, step, round, group index)``, so a group's responses do not depend on which other
groups share its call. Under ``torchrun`` each rank samples and grades its contiguous share of
the groups (``group`` seeding: what one process would draw for them), and the ranks' shares are
gathered in group order, so every rank holds the whole rollout batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import envs
from envs.grade_stats import GradeStats
from envs.grader import METRIC_KEYS as GRADE_KEYS  # ("grade/timeouts", "grade/errors")
from reasoning_core.runtime.distributed.collectives import gather_objects, share
from reasoning_core.runtime.distributed.world import world_size
from reasoning_core.runtime.engines.rollout import Completion, RolloutEngine, SamplingParams
from reasoning_core.runtime.errors import ConfigError
from reasoning_core.runtime.run.rng import Stream, step_rng, step_seed


class RolloutSettings(Protocol):
    """The settings of training rollouts (EI, GRPO and DPO's configs have them)."""

    template: str
    seed: int
    stop: list[str]
    train_split: str
    train_examples: int | None
    group_size: int
    sampling_temperature: float
    sampling_top_p: float
    sampling_max_tokens: int
    sampling_min_tokens: int


class EvalSettings(Protocol):
    """The settings of a sampled evaluation, the same names in ``rrl eval`` and the trainers."""

    seed: int
    stop: list[str]
    eval_temperature: float
    eval_top_p: float
    eval_max_tokens: int
    eval_seed: int | None


# rrl eval's setting names before they became the trainers' (old -> new); an old name is
# refused with a message naming the new one (config.build_config).
EVAL_RENAMED = {
    "split": "eval_split",
    "limit": "eval_examples",
    "temperature": "eval_temperature",
    "top_p": "eval_top_p",
    "max_tokens": "eval_max_tokens",
    "min_tokens": "eval_min_tokens",
    "batch_size": "eval_batch_size",
    "n": "samples_per_problem",
}


def rollout_params(cfg: RolloutSettings) -> SamplingParams:
    """The ``SamplingParams`` of training rollouts: ``group_size`` samples per prompt from the
    ``sampling_*`` settings, stop strings kept in the output (the seed is set per step)."""
    return SamplingParams(
        n=cfg.group_size,
        temperature=cfg.sampling_temperature,
        top_p=cfg.sampling_top_p,
        max_tokens=cfg.sampling_max_tokens,
        min_tokens=cfg.sampling_min_tokens,
        stop=list(cfg.stop),
        include_stop_str_in_output=True,
    )


def eval_params(
    cfg: EvalSettings,
    *,
    n: int = 1,
    min_tokens: int = 0,
    include_stop_str_in_output: bool = True,
    stop: list[str] | None = None,
) -> SamplingParams:
    """The ``SamplingParams`` of an evaluation, a trainer's or a command's (``rrl eval``,
    ``eval-suite``, ``supplement-generate``, ``safety-judge``): the ``eval_*`` settings,
    seeded with ``eval_seed`` (null: ``seed``); ``n`` samples per problem; ``stop`` replaces
    the setting ``stop`` (``rrl eval-suite``'s stop strings are each template's). A value
    SamplingParams refuses is a ConfigError naming the setting it came from."""
    try:
        return SamplingParams(
            n=n,
            temperature=cfg.eval_temperature,
            top_p=cfg.eval_top_p,
            max_tokens=cfg.eval_max_tokens,
            min_tokens=min_tokens,
            stop=list(cfg.stop if stop is None else stop),
            include_stop_str_in_output=include_stop_str_in_output,
            seed=cfg.seed if cfg.eval_seed is None else cfg.eval_seed,
        )
    except ValueError as exc:  # its message starts with the field's name
        field_name = str(exc).split()[0]
        setting = EVAL_SAMPLING_SETTINGS.get(field_name, field_name)
        raise ConfigError(f"setting {setting!r}: {exc}") from None


# The setting each SamplingParams field of an evaluation comes from (eval_params).
EVAL_SAMPLING_SETTINGS = {
    "n": "samples_per_problem",
    "temperature": "eval_temperature",
    "top_p": "eval_top_p",
    "max_tokens": "eval_max_tokens",
    "min_tokens": "eval_min_tokens",
}


def load_questions(
    cfg: RolloutSettings, task: envs.Task, need: int, message: str
) -> list[envs.Example]:
    """The training questions (``train_split``, ``train_examples`` of them); ConfigError with
    ``message`` (``{n}``: the number loaded) when there are fewer than ``need``."""
    questions = task.load(cfg.train_split, limit=cfg.train_examples)
    if len(questions) < need:
        raise ConfigError(message.format(n=len(questions)))
    return questions


def grade(reward_fn: Callable, responses: list[str], ground_truths: list[str]) -> envs.GradeResults:
    """``reward_fn`` of each (response, ground truth), in order, through ``envs.grade_batch``
    (cheap cases in-process, the rest in a pool with a per-item timeout scored 0).

    The result is a list of reward dicts whose ``.metrics()`` gives
    ``{"grade/timeouts": n, "grade/errors": m}``: how many of the items scored 0 because
    grading timed out or raised. Keep the object (``list(...)`` drops the counts)."""
    return envs.grade_batch(reward_fn, responses, ground_truths)


def grade_counts(scores: list[dict]) -> dict[str, int]:
    """``{"grade/timeouts": n, "grade/errors": m}`` of a :func:`grade` result; a plain list
    (a stand-in grader that cannot time out or raise) counts 0 of each."""
    if isinstance(scores, envs.GradeResults):
        return scores.metrics()
    return dict.fromkeys(GRADE_KEYS, 0)


def reward_means(scores: list[dict]) -> dict[str, float]:
    """Means of ``reward``, ``format_reward`` and ``answer_reward`` (0 for no scores)."""
    n = max(1, len(scores))
    return {
        "reward": sum(s["reward"] for s in scores) / n,
        "format_reward": sum(s["format_reward"] for s in scores) / n,
        "answer_reward": sum(s["answer_reward"] for s in scores) / n,
    }


def truncated_share(finish_reasons: list[str]) -> float:
    """The share of responses the engine stopped at ``max_tokens`` without their stop string
    or EOS (finish reason ``"length"``); 0.0 for none."""
    n = len(finish_reasons)
    return sum(reason == "length" for reason in finish_reasons) / n if n else 0.0


@dataclass(frozen=True)
class Rollouts:
    """What every rollout of a run shares: the question pool, the task that formats prompts,
    the template, the reward function, the sampling settings, the run's seed, and how often
    the policy's weights go into the engine (``sync_every`` steps)."""

    questions: list[envs.Example]
    task: envs.Task
    template: str
    reward_fn: Callable[[str, str], dict]
    params: SamplingParams
    seed: int
    sync_every: int = 1
    seeding: str = "batch"  # setting rollout_seeding: one engine call per step, or per group
    env: str = "single_turn"  # setting env: the environment of multi-turn rollouts
    env_settings: dict[str, Any] = field(default_factory=dict)  # its settings (max_calls)

    @classmethod
    def from_config(
        cls,
        cfg: RolloutSettings,
        task: envs.Task,
        questions: list[envs.Example],
        sync_every: int = 1,
    ) -> Rollouts:
        return cls(
            questions,
            task,
            template=cfg.template,
            reward_fn=task.reward_fn(cfg.template),
            params=rollout_params(cfg),
            seed=cfg.seed,
            sync_every=sync_every,
            seeding=getattr(cfg, "rollout_seeding", "batch"),
            env=getattr(cfg, "env", "single_turn"),
            env_settings=getattr(cfg, "env_settings", {}),
        )


@dataclass
class RolloutBatch:
    """Graded rollouts, one entry per response (``group_size`` consecutive ones per question).

    ``prompts``/``ground_truths`` repeat each question's; ``lengths`` are response tokens;
    ``scores`` the reward dicts (an ``envs.GradeResults``, see :attr:`grade_metrics`);
    ``completions`` the engine's outputs in the same order (token ids, log-probs, entropies).
    ``seconds`` holds the wall-clock of the weight sync, the sampling and the grading under
    ``time/sync``, ``time/rollout``, ``time/grade``. ``versions``: the policy version (GRPO
    steps trained) that sampled each response, where the trainer records it (else empty)."""

    prompts: list[str]
    responses: list[str]
    ground_truths: list[str]
    lengths: list[int]
    scores: list[dict]
    seconds: dict[str, float]
    completions: list[Completion] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    # Multi-turn rollouts (setting env): each response's episode (token ids, policy mask),
    # trained on as sampled; empty for single-turn rollouts, trained on their text.
    episodes: list[Any] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [s["reward"] for s in self.scores]

    @property
    def grade_metrics(self) -> dict[str, int]:
        """``{"grade/timeouts": n, "grade/errors": m}``: responses of this batch that scored 0
        because grading timed out or raised."""
        return grade_counts(self.scores)

    @property
    def mean_length(self) -> float:
        """Mean response length in tokens."""
        return sum(self.lengths) / len(self.lengths)

    @property
    def truncated(self) -> float:
        """Share of the responses stopped at ``max_tokens`` without their stop string or EOS."""
        return truncated_share([c.finish_reason for c in self.completions])

    def correct(self) -> list[int]:
        """Indices of the responses with reward 1 (right format and answer)."""
        return [i for i, s in enumerate(self.scores) if s["reward"] >= 1.0]

    def rows(self, start: int, stop: int) -> RolloutBatch:
        """Responses ``start:stop`` (a plain list of their scores, no ``seconds``)."""
        part = slice(start, stop)
        return RolloutBatch(
            self.prompts[part],
            self.responses[part],
            self.ground_truths[part],
            self.lengths[part],
            list(self.scores[part]),
            {},
            self.completions[part],
            self.versions[part],
            self.episodes[part],
        )

    @classmethod
    def concat(cls, parts: list[RolloutBatch], seconds: dict[str, float] | None = None):
        """The responses of ``parts``, in order, with ``seconds`` (default none). When every
        part's scores carry grading counts (``envs.GradeResults``), so do the result's,
        summed."""
        out = cls([], [], [], [], [], dict(seconds or {}))
        scores: list[dict] = []
        for part in parts:
            out.prompts += part.prompts
            out.responses += part.responses
            out.ground_truths += part.ground_truths
            out.lengths += part.lengths
            out.completions += part.completions
            out.versions += part.versions
            out.episodes += part.episodes
            scores += part.scores
        out.scores = scores
        if parts and all(isinstance(p.scores, envs.GradeResults) for p in parts):
            counts = [p.grade_metrics for p in parts]
            out.scores = counted(scores, {k: sum(c[k] for c in counts) for k in GRADE_KEYS})
        return out


def counted(scores: list[dict], counts: dict[str, int]) -> envs.GradeResults:
    """``scores`` as an ``envs.GradeResults`` carrying the grading ``counts``
    (:func:`grade_counts`'s keys)."""
    results = envs.GradeResults(scores)
    results.stats = GradeStats(
        n=len(scores), timeouts=int(counts["grade/timeouts"]), errors=int(counts["grade/errors"])
    )
    return results


def sum_seconds(batches) -> dict[str, float]:
    """The ``seconds`` of ``batches`` summed key by key, in first-seen key order."""
    total: dict[str, float] = {}
    for batch in batches:
        for key, value in batch.seconds.items():
            total[key] = total.get(key, 0.0) + value
    return total


def step_questions(
    rollouts: Rollouts, *, step: int, count: int, round_: int = 0
) -> tuple[list[envs.Example], SamplingParams]:
    """Step ``step``'s ``count`` questions (round ``round_``) and its seeded sampling params
    (:func:`sample_and_grade` says how both are drawn)."""
    keys = (step,) if round_ == 0 else (step, round_)
    replace = count > len(rollouts.questions)
    picked = step_rng(rollouts.seed, Stream.QUESTIONS, *keys).choice(
        len(rollouts.questions), size=count, replace=replace
    )
    questions = [rollouts.questions[int(i)] for i in picked]
    params = rollouts.params.replace(seed=step_seed(rollouts.seed, Stream.ROLLOUT_SEED, *keys))
    return questions, params


def sample_and_grade(
    engine: RolloutEngine,
    model: Any,
    rollouts: Rollouts,
    *,
    step: int,
    count: int,
    round_: int = 0,
) -> RolloutBatch:
    """Step ``step``'s rollouts: ``count`` questions drawn without replacement from the pool
    (stream ``QUESTIONS``; with replacement when the pool holds fewer, e.g. one-example
    training), the policy's weights synced into the engine (on every ``sync_every``-th step;
    on the others the engine keeps the weights of its last sync), ``params.n`` responses per
    question sampled, graded.

    Seeds: with ``rollouts.seeding`` ``batch``, one engine call with the step's seed (stream
    ``ROLLOUT_SEED``); with ``group``, one call per question, seeded by the step, the round and
    the question's index in the batch (stream ``ROLLOUT_GROUP``). Under ``torchrun`` (group
    seeding only) this rank samples and grades its share of the questions
    (:func:`~reasoning_core.runtime.distributed.collectives.share`) and the shares are gathered:
    every rank returns the whole batch, as one process would draw it.

    ``round_`` > 0 is an extra round of the same step (dynamic sampling): other questions and
    other engine seeds, keyed by ``(step, round_)``, and no weight sync (the engine already
    holds the step's weights)."""
    questions, params = step_questions(rollouts, step=step, count=count, round_=round_)
    prompts = [rollouts.task.format_prompt(q, rollouts.template) for q in questions]
    t0, t1 = sync_for_step(engine, model, rollouts, step=step, round_=round_)
    if rollouts.seeding == "group":
        mine = list(share(range(count)))
        groups = [
            engine.generate(
                [prompts[g]],
                params.replace(
                    seed=step_seed(rollouts.seed, Stream.ROLLOUT_GROUP, step, round_, g)
                ),
            )[0]
            for g in mine
        ]
    else:
        if world_size() > 1:  # refused before any work (check_world); never N copies
            raise RuntimeError("rollout_seeding batch cannot be split over ranks")
        mine = list(range(count))
        groups = engine.generate(prompts, params)
    t2 = time.perf_counter()
    batch = RolloutBatch([], [], [], [], [], {})
    for g, group in zip(mine, groups, strict=True):
        assert len(group) == params.n, "engine returned the wrong number of samples"
        for completion in group:
            batch.prompts.append(prompts[g])
            batch.responses.append(completion.text)
            batch.ground_truths.append(questions[g].ground_truth)
            batch.lengths.append(len(completion.token_ids))
            batch.completions.append(completion)
    grade_batch_in_place(rollouts, batch, (t0, t1, t2))
    return gather_batches(batch) if world_size() > 1 else batch


def sync_for_step(
    engine: RolloutEngine, model: Any, rollouts: Rollouts, *, step: int, round_: int
) -> tuple[float, float]:
    """Sync the policy's weights into the engine on every ``sync_every``-th step's first round;
    the clock before and after."""
    t0 = time.perf_counter()
    if round_ == 0 and step % rollouts.sync_every == 0:
        engine.sync_weights(model)
    return t0, time.perf_counter()


def grade_batch_in_place(
    rollouts: Rollouts, batch: RolloutBatch, clock: tuple[float, float, float]
) -> None:
    """Grade ``batch``'s responses (:func:`grade`) into its ``scores``; its ``seconds`` from
    ``clock`` (before the sync, before sampling, after sampling) and the grading's own."""
    t0, t1, t2 = clock
    batch.scores = grade(rollouts.reward_fn, batch.responses, batch.ground_truths)
    batch.seconds = {
        "time/sync": t1 - t0,
        "time/rollout": t2 - t1,
        "time/grade": time.perf_counter() - t2,
    }


def gather_batches(batch: RolloutBatch) -> RolloutBatch:
    """Every rank's :class:`RolloutBatch`, concatenated in rank order (the ranks' shares of the
    groups are contiguous, so this is group order). The grading counts are summed; the
    ``time/`` measurements are this rank's own."""
    parts = gather_objects(
        (
            batch.prompts,
            batch.responses,
            batch.ground_truths,
            batch.lengths,
            list(batch.scores),
            grade_counts(batch.scores),
            batch.completions,
        )
    )
    keeps_counts = isinstance(batch.scores, envs.GradeResults)
    batches = []
    for prompts, responses, truths, lengths, scores, counts, completions in parts:
        if keeps_counts:
            scores = counted(scores, counts)
        batches.append(RolloutBatch(prompts, responses, truths, lengths, scores, {}, completions))
    return RolloutBatch.concat(batches, batch.seconds)
