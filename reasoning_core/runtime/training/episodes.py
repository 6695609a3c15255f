"""Multi-turn rollouts: episodes of an environment (:mod:`envs.environment`) over any engine.

A loop over the engines' own ``generate`` (no engine internals): sample until the
environment's stop string (``</calc>``) or the end, give the model's text to the environment,
append its observation, continue, until the environment says done or the token budget is
spent.

Token in, token out. The episode keeps the ids the engine sampled (and the engine's
log-probs of them) and tokenizes only the environment's observations; each later turn is
sent to the engine as token ids (``generate`` takes a list of ids as a prompt), never as
re-tokenized text, so the policy is trained on exactly the tokens it sampled, in the context
it sampled them in. :attr:`Episode.policy` marks the tokens the policy produced;
:func:`episode_batch` lays the episodes out as the trainers' :class:`TokenBatch` with the
observations' tokens left out of the response mask, so no loss, log-prob, KL, entropy or
engine check ever counts them.

Budgets: the episode's tokens after the prompt (the policy's and the observations') are at
most ``params.max_tokens``: each turn samples at most what is left, and an observation that
leaves no room for one more policy token ends the episode (finish reason ``length``, graded
as it stands). The environment bounds the turns (the calculator's ``max_calls``).

Seeds: the first turn is one engine call with ``params`` (``n`` samples per prompt), the call
a single-turn rollout makes, so an episode without a tool call samples what today's rollout
samples; turn ``k > 0`` is one call over the open episodes (``n=1``), seeded by
:func:`turn_seed`.

A trailing EOS id is kept out of the trained tokens, as the single-turn path (which trains on
the response text) keeps it out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from envs.base import Example
from envs.environment import Environment, make_environment
from reasoning_core.runtime.engines.rollout import Completion, RolloutEngine, SamplingParams
from reasoning_core.runtime.run.rng import Stream, step_seed
from reasoning_core.runtime.training.batching import TokenBatch, token_batch, tokenize_pairs
from reasoning_core.runtime.training.rollouts import (
    RolloutBatch,
    Rollouts,
    grade_batch_in_place,
    step_questions,
    sync_for_step,
)


@dataclass
class Episode:
    """One episode: the prompt, then every token after it in order.

    ``token_ids[i]`` was sampled by the policy where ``policy[i]`` (its engine log-probs in
    ``logprobs[i]``, ``sampling_logprobs[i]``, ``entropies[i]``), else it is an observation's
    token (NaN there). ``text`` is the environment's transcript (graded), ``finish_reason``
    ``stop`` or ``length`` (the token budget), ``turns`` the engine calls, ``info`` the
    environment's last ``info`` (``tool_calls``, ``tool_errors``, ...)."""

    prompt: str
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    policy: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    sampling_logprobs: list[float] | None = field(default_factory=list)
    entropies: list[float] | None = field(default_factory=list)
    text: str = ""
    finish_reason: str = "stop"
    turns: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def add(self, ids: Sequence[int], completion: Completion | None) -> None:
        """Append ``ids``: the policy's (``completion``'s values with them) or, with None, an
        observation's."""
        k = len(ids)
        nan = [math.nan] * k
        self.token_ids += list(ids)
        self.policy += [completion is not None] * k
        self.logprobs += nan if completion is None else list(completion.logprobs[:k])
        for name in ("sampling_logprobs", "entropies"):
            mine = getattr(self, name)
            theirs = None if completion is None else getattr(completion, name)
            if mine is None or (completion is not None and theirs is None):
                setattr(self, name, None)  # the engine does not give them
            else:
                mine += nan if theirs is None else list(theirs[:k])

    @property
    def policy_tokens(self) -> int:
        return sum(self.policy)

    def completion(self) -> Completion:
        """The policy's tokens as one :class:`Completion` (ids, log-probs, entropies in order):
        what the engine check compares with the training forward at the policy positions of
        :func:`episode_batch`."""
        keep = [i for i, p in enumerate(self.policy) if p]

        def pick(values: list[float] | None) -> list[float] | None:
            return None if values is None else [values[i] for i in keep]

        return Completion(
            text=self.text,
            token_ids=[self.token_ids[i] for i in keep],
            logprobs=pick(self.logprobs) or [],
            finish_reason=self.finish_reason,
            entropies=pick(self.entropies),
            sampling_logprobs=pick(self.sampling_logprobs),
        )


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The engine seed of turn ``turn`` of a rollout seeded ``seed`` (turn 0: ``seed``)."""
    if seed is None or turn == 0:
        return seed
    return (seed * 1_000_003 + turn) % (2**63 - 1)


def encode(tokenizer: Any, text: str) -> list[int]:
    """``text``'s ids as the engines tokenize a prompt (no special tokens added)."""
    return list(map(int, tokenizer(text, add_special_tokens=False)["input_ids"]))


def run_episodes(
    engine: RolloutEngine,
    make_env: Callable[[], Environment],
    problems: list[Example],
    params: SamplingParams,
    tokenizer: Any,
    eos_ids: Sequence[int] = (),
) -> list[list[Episode]]:
    """``params.n`` episodes of a fresh environment (``make_env()``) for each problem, in
    problem order. The environments grade nothing themselves when built with ``grade=False``
    (the caller grades :attr:`Episode.text`); ``eos_ids`` are kept out of the trained tokens
    when they end an episode."""
    if not problems:
        return []
    n, budget = params.n, params.max_tokens
    envs = [make_env() for _ in range(len(problems) * n)]
    prompts = [envs[q * n].reset(p) for q, p in enumerate(problems)]
    for q, p in enumerate(problems):
        for env in envs[q * n + 1 : (q + 1) * n]:
            env.reset(p)
    stop = list(dict.fromkeys([*params.stop, *envs[0].stop]))
    prompt_ids = [encode(tokenizer, p) for p in prompts]
    episodes = [Episode(prompts[i // n], prompt_ids[i // n]) for i in range(len(envs))]
    first = engine.generate(prompts, params.replace(stop=stop))
    completions = [c for group in first for c in group]
    open_ = list(range(len(envs)))
    turn = 0
    while open_:
        still: list[int] = []
        for i, completion in zip(open_, completions, strict=True):
            ep, env = episodes[i], envs[i]
            ep.turns += 1
            ep.add(completion.token_ids, completion)
            used = len(ep.token_ids)
            if completion.finish_reason == "length" or used >= budget:
                step = env.end(completion.text)
                ep.finish_reason = "length"
            else:
                step = env.step(completion.text)
            if not step.done:
                obs = encode(tokenizer, step.observation)
                if used + len(obs) >= budget:  # no room left for a policy token
                    step = env.end("")
                    ep.finish_reason = "length"
                else:
                    ep.add(obs, None)
                    still.append(i)
            if step.done:
                ep.text, ep.info = env.transcript, step.info
                if ep.finish_reason != "length" and ep.token_ids and ep.token_ids[-1] in eos_ids:
                    drop_last(ep)
        open_ = still
        if not open_:
            break
        turn += 1
        rest = [
            params.replace(
                n=1,
                max_tokens=budget - len(episodes[i].token_ids),
                min_tokens=0,
                stop=stop,
                seed=turn_seed(params.seed, turn),
            )
            for i in open_
        ]
        # One call per distinct budget (the engines take one SamplingParams per call).
        completions = [None] * len(open_)
        by_budget: dict[int, list[int]] = {}
        for k, p in enumerate(rest):
            by_budget.setdefault(p.max_tokens, []).append(k)
        for ks in by_budget.values():
            ids = [episodes[open_[k]].prompt_ids + episodes[open_[k]].token_ids for k in ks]
            out = engine.generate(ids, rest[ks[0]])
            for k, group in zip(ks, out, strict=True):
                completions[k] = group[0]
    return [episodes[q * n : (q + 1) * n] for q in range(len(problems))]


def drop_last(ep: Episode) -> None:
    """Remove the last token of ``ep`` (a trailing EOS), with its values."""
    for name in ("token_ids", "policy", "logprobs", "sampling_logprobs", "entropies"):
        values = getattr(ep, name)
        if values is not None:
            values.pop()


def episode_batch(episodes: list[Episode], pad_id: int) -> TokenBatch:
    """The episodes as a :class:`TokenBatch`: each row the prompt's ids then the episode's,
    right-padded, with ``response_mask`` true only at the policy's tokens (the observations'
    tokens are context, never trained on or counted) and ``lengths`` one past each row's last
    policy token."""
    batch = token_batch([e.prompt_ids for e in episodes], [e.token_ids for e in episodes], pad_id)
    mask = torch.zeros_like(batch.response_mask)
    for row, e in enumerate(episodes):
        start = max(len(e.prompt_ids) - 1, 0)
        policy = torch.tensor(e.policy, dtype=torch.bool)
        mask[row, start : start + len(policy)] = policy
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    lengths = torch.where(mask, positions + 1, torch.zeros_like(positions)).amax(dim=1)
    return TokenBatch(batch.input_ids, batch.labels, mask, lengths)


def episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Means over the episodes: ``tool/call_rate`` (episodes with a tool call),
    ``tool/calls``, ``tool/errors`` (tool calls refused, per episode), ``tool/turns``
    (engine calls per episode), ``tool/policy_tokens``, ``tool/observation_tokens`` and
    ``tool/bonus`` (the shaping reward added, setting ``tool_bonus``)."""
    n = max(1, len(episodes))
    calls = [e.info.get("tool_calls", 0) for e in episodes]
    return {
        "tool/call_rate": sum(c > 0 for c in calls) / n,
        "tool/calls": sum(calls) / n,
        "tool/errors": sum(e.info.get("tool_errors", 0) for e in episodes) / n,
        "tool/turns": sum(e.turns for e in episodes) / n,
        "tool/policy_tokens": sum(e.policy_tokens for e in episodes) / n,
        "tool/observation_tokens": sum(len(e.token_ids) - e.policy_tokens for e in episodes) / n,
        "tool/bonus": sum(e.info.get("tool_bonus", 0.0) for e in episodes) / n,
    }


def sample_episodes(
    engine: Any, model: Any, rollouts: Rollouts, *, step: int, count: int, round_: int = 0
) -> RolloutBatch:
    """:func:`~reasoning_core.runtime.training.rollouts.sample_and_grade` with episodes of
    ``rollouts.env``: the same questions, seeds and weight sync, ``params.n`` episodes per
    question (:func:`run_episodes`), each transcript graded by the task's reward function in
    one batch (``envs.grade_batch``: worker processes, a time limit per item). The batch's
    ``responses`` are the transcripts, ``lengths`` the episodes' tokens after the prompt (the
    token budget's count: policy and observation tokens), ``completions`` the policy's tokens
    (:meth:`Episode.completion`) and ``episodes`` the episodes. ``rollout_seeding: group``
    samples each group's episodes in their own calls, seeded as ``sample_and_grade`` seeds
    the group."""
    questions, params = step_questions(rollouts, step=step, count=count, round_=round_)
    tokenizer = engine.tokenizer
    eos = getattr(engine, "eos_ids", None) or [tokenizer.eos_token_id]

    def make_env() -> Environment:
        return make_environment(
            rollouts.env, rollouts.task, rollouts.template, grade=False, **rollouts.env_settings
        )

    t0, t1 = sync_for_step(engine, model, rollouts, step=step, round_=round_)
    if rollouts.seeding == "group":
        groups = []
        for g, question in enumerate(questions):
            seed = step_seed(rollouts.seed, Stream.ROLLOUT_GROUP, step, round_, g)
            groups += run_episodes(
                engine, make_env, [question], params.replace(seed=seed), tokenizer, eos
            )
    else:
        groups = run_episodes(engine, make_env, questions, params, tokenizer, eos)
    t2 = time.perf_counter()
    batch = RolloutBatch([], [], [], [], [], {})
    for question, group in zip(questions, groups, strict=True):
        for ep in group:
            batch.prompts.append(ep.prompt)
            batch.responses.append(ep.text)
            batch.ground_truths.append(question.ground_truth)
            batch.lengths.append(len(ep.token_ids))
            batch.completions.append(ep.completion())
            batch.episodes.append(ep)
    grade_batch_in_place(rollouts, batch, (t0, t1, t2))
    add_tool_bonus(batch)
    return batch


def add_tool_bonus(batch: RolloutBatch) -> None:
    """Each episode's tool bonus (``info["tool_bonus"]``: the environment's shaping term for a
    call answered without an error) added to its graded ``reward``; ``answer_reward`` and
    ``format_reward`` stay the task's."""
    for score, ep in zip(batch.scores, batch.episodes, strict=True):
        bonus = ep.info.get("tool_bonus", 0.0)
        if bonus:
            score["reward"] = float(score["reward"]) + bonus


def rollout_tokens(batch: RolloutBatch, tokenizer: Any) -> TokenBatch:
    """The token batch a trainer trains on: the episodes as sampled (:func:`episode_batch`)
    when the batch has them, else the single-turn responses' text tokenized
    (``tokenize_pairs``)."""
    if batch.episodes:
        return episode_batch(batch.episodes, tokenizer.pad_token_id)
    return tokenize_pairs(batch.prompts, batch.responses, tokenizer)


class EpisodeEngine:
    """A rollout engine whose completions are whole episodes, for an evaluation that samples
    through ``generate(prompts, params)``: each prompt (an environment's prompt of one of
    ``problems``) becomes ``params.n`` episodes over ``inner`` (:func:`run_episodes`), each
    returned as :meth:`Episode.completion` (the transcript as ``text``; the policy's tokens,
    log-probs and entropies). ``episodes`` keeps the episodes sampled, for their
    :func:`episode_metrics`."""

    def __init__(
        self,
        inner: RolloutEngine,
        make_env: Callable[[], Environment],
        problems: list[Example],
        tokenizer: Any,
    ) -> None:
        self.inner, self.make_env, self.tokenizer = inner, make_env, tokenizer
        self.problems = {make_env().reset(p): p for p in problems}
        self.eos_ids = getattr(inner, "eos_ids", None) or [tokenizer.eos_token_id]
        self.episodes: list[Episode] = []  # every episode sampled so far, in order

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        problems = [self.problems[p] for p in prompts]
        groups = run_episodes(
            self.inner, self.make_env, problems, params, self.tokenizer, self.eos_ids
        )
        self.episodes += [e for group in groups for e in group]
        return [[e.completion() for e in group] for group in groups]

    def sync_weights(self, model: Any) -> None:
        self.inner.sync_weights(model)


class EnvironmentTask:
    """A task as an environment shows it: its prompts (``format_prompt``) and reward function
    (``reward_fn``) are the environment's, whatever template is asked for."""

    def __init__(self, make_env: Callable[[], Environment]) -> None:
        self.env = make_env()

    def format_prompt(self, example: Example, template: str = "") -> str:
        return self.env.reset(example)

    def reward_fn(self, template: str = "") -> Callable[[str, str], dict]:
        return self.env.reward_fn


def environment_factory(cfg: Any, task: Any) -> Callable[[], Environment] | None:
    """The environments of ``cfg``'s setting ``env`` (ungraded: the caller grades in batch),
    or None for ``single_turn`` (and for commands without the setting)."""
    name = getattr(cfg, "env", "single_turn")
    if name == "single_turn":
        return None
    settings = getattr(cfg, "env_settings", {})

    def make_env() -> Environment:
        return make_environment(name, task, cfg.template, grade=False, **settings)

    return make_env
