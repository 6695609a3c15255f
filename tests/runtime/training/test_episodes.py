"""Multi-turn rollouts: token in, token out, over a scripted engine and the CPU engines."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import envs
from envs.environment import CalculatorEnvironment, Environment, Step, make_environment
from reasoning_core import get_response_log_probs, grpo_microbatch_train_step
from reasoning_core.runtime.engines import make_engine
from reasoning_core.runtime.engines.rollout import Completion, SamplingParams
from reasoning_core.runtime.training.batching import tokenize_pairs
from reasoning_core.runtime.training.engine_check import engine_log_probs
from reasoning_core.runtime.training.episodes import (
    episode_batch,
    episode_metrics,
    run_episodes,
    turn_seed,
)

PROBLEM = envs.Example(id="0", question="What is 12 times 34?", ground_truth="408")


@pytest.fixture(scope="module")
def tokenizer(world):
    return AutoTokenizer.from_pretrained(world)


@pytest.fixture(scope="module")
def policy(world):
    return AutoModelForCausalLM.from_pretrained(world, dtype=torch.float32)


class Scripted:
    """An engine that answers turn k of every episode with ``texts[k]`` (ids: the tokenizer's,
    log-probs: -0.5 each) and records every call's prompts and params."""

    def __init__(self, tokenizer, texts, eos_id=None):
        self.tokenizer, self.texts, self.eos_id = tokenizer, texts, eos_id
        self.calls: list[tuple[list, SamplingParams]] = []

    def generate(self, prompts, params):
        turn = len(self.calls)
        self.calls.append((list(prompts), params))
        text = self.texts[turn]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: params.max_tokens]
        reason = (
            "length" if len(ids) == params.max_tokens and turn < len(self.texts) - 1 else "stop"
        )
        if self.eos_id is not None and turn == len(self.texts) - 1:
            ids = [*ids, self.eos_id]
        out = Completion(text, ids, [-0.5] * len(ids), reason, [1.0] * len(ids), [-0.5] * len(ids))
        return [[out] * params.n for _ in prompts]

    def sync_weights(self, model):
        pass


def calculator(**kw):
    task = envs.get_task("arithmetic")
    return lambda: make_environment("calculator", task, grade=False, **kw)


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_episode_keeps_sampled_ids_and_marks_the_policy_tokens(tokenizer):
    texts = [" I compute <calc>12*34</calc>", " so </think> <answer> 408 </answer>"]
    engine = Scripted(tokenizer, texts, eos_id=tokenizer.eos_token_id)
    params = SamplingParams(n=2, max_tokens=200, seed=5)
    [[ep, other]] = run_episodes(
        engine, calculator(), [PROBLEM], params, tokenizer, eos_ids=[tokenizer.eos_token_id]
    )
    first, obs, last = (encode(tokenizer, t) for t in (texts[0], " <result>408</result>", texts[1]))
    # The trailing EOS is not kept (as the single-turn path trains on the text without it).
    assert ep.token_ids == first + obs + last
    assert ep.policy == [True] * len(first) + [False] * len(obs) + [True] * len(last)
    assert all(math.isnan(v) for v in ep.logprobs[len(first) : len(first) + len(obs)])
    assert ep.logprobs[: len(first)] == [-0.5] * len(first)
    assert ep.turns == 2 and ep.finish_reason == "stop"
    assert ep.info == {"tool_calls": 1, "tool_errors": 0, "tool_bonus": 0.0, "graded": False}
    assert ep.text == texts[0] + " <result>408</result>" + texts[1]
    assert other.token_ids == ep.token_ids
    # Turn 1: the text prompt with n samples (a single-turn call, plus the tool's stop string);
    # turn 2: each open episode as token ids (prompt, then its own ids), n=1, the budget left.
    (p1, params1), (p2, params2) = engine.calls
    prompt = make_environment("calculator", envs.get_task("arithmetic")).reset(PROBLEM)
    assert p1 == [prompt] and params1.n == 2 and params1.seed == 5
    assert params1.stop == ["</answer>", "</calc>"]
    assert p2 == [encode(tokenizer, prompt) + first + obs] * 2
    assert params2.n == 1 and params2.max_tokens == 200 - len(first) - len(obs)
    assert params2.seed == turn_seed(5, 1) != 5 and params2.min_tokens == 0
    # The engine check sees the policy's tokens only, aligned one for one.
    batch = episode_batch([ep, other], tokenizer.pad_token_id)
    values, aligned = engine_log_probs(
        batch.labels, batch.response_mask, [ep.completion(), other.completion()]
    )
    assert int(aligned[0].sum()) == len(first) + len(last) == int(batch.response_mask[0].sum())
    metrics = episode_metrics([ep, other])
    assert metrics["tool/call_rate"] == 1.0 and metrics["tool/turns"] == 2.0
    assert metrics["tool/observation_tokens"] == len(obs)


def test_episode_batch_masks_observations(tokenizer):
    texts = ["<calc>1+1</calc>", " done"]
    [[ep]] = run_episodes(
        Scripted(tokenizer, texts), calculator(), [PROBLEM], SamplingParams(), tokenizer
    )
    batch = episode_batch([ep], tokenizer.pad_token_id)
    p = len(ep.prompt_ids)
    seq = ep.prompt_ids + ep.token_ids
    assert batch.input_ids[0].tolist() == seq[:-1]
    assert batch.labels[0].tolist() == seq[1:]
    # labels[j] is seq[j + 1]: the mask is the policy flag of the token it predicts.
    assert batch.response_mask[0, p - 1 :].tolist() == ep.policy
    assert not batch.response_mask[0, : p - 1].any()
    assert int(batch.lengths[0]) == len(seq) - 1


def test_budgets_end_episodes(tokenizer):
    # The token budget: a call whose answer leaves no room for a policy token ends it.
    texts = ["<calc>1+1</calc>", " more"]
    first = len(encode(tokenizer, texts[0]))
    [[ep]] = run_episodes(
        Scripted(tokenizer, texts),
        calculator(),
        [PROBLEM],
        SamplingParams(max_tokens=first + 2),
        tokenizer,
    )
    assert ep.finish_reason == "length" and ep.turns == 1 and all(ep.policy)
    assert ep.info["truncated"]
    # The call budget: the environment answers max_calls calls, then ends the episode.
    texts = ["<calc>1</calc>"] * 5
    [[ep]] = run_episodes(
        Scripted(tokenizer, texts), calculator(max_calls=2), [PROBLEM], SamplingParams(), tokenizer
    )
    assert ep.turns == 3 and ep.info["tool_calls"] == 2 and ep.info["call_budget_spent"]


class Echo(Environment):
    """Every model text is answered (``turns`` times) with a fixed observation: multi-turn
    episodes from a model that never learned a tool syntax. Its stop string is the space,
    which the micro world's model writes often."""

    name = "echo"
    stop = (" ",)

    def __init__(self, task, turns=2):
        super().__init__(task, grade=False)
        self.turns = turns

    def step(self, model_text):
        self.parts.append(model_text)
        if len(self.parts) >= 2 * self.turns + 1:
            return self.finish({})
        self.parts.append(" = 7 ;")
        return Step(" = 7 ;", 0.0, False, {})


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_engine_log_probs_are_the_policy_s_on_the_episode(kind, policy, tokenizer, world):
    """Token in, token out: the engine's log-prob of every policy token of a 3-turn episode
    equals the policy's on the trained row (prompt, sampled ids, observation ids), so each
    turn was sampled in exactly the context it is trained in."""
    engine = make_engine(kind, policy, tokenizer)
    task = envs.get_task("arithmetic")
    problems = task.load("test", limit=3)
    params = SamplingParams(n=2, max_tokens=48, seed=11, stop=[])
    groups = run_episodes(
        engine, lambda: Echo(task), problems, params, tokenizer, eos_ids=engine.eos_ids
    )
    episodes = [e for g in groups for e in g]
    assert max(e.turns for e in episodes) >= 2  # the test saw multi-turn episodes
    batch = episode_batch(episodes, tokenizer.pad_token_id)
    with torch.no_grad():
        lp = get_response_log_probs(policy, batch.input_ids, batch.labels)["log_probs"]
    values, aligned = engine_log_probs(
        batch.labels, batch.response_mask, [e.completion() for e in episodes]
    )
    assert torch.equal(aligned, batch.response_mask)  # every policy token compared
    diff = (lp - values).abs()[aligned]
    assert float(diff.max()) < 1e-3, float(diff.max())
    # Re-tokenizing the text is not always the sampled ids for this tokenizer: the reason the
    # later turns go to the engine as ids. Count it (the assertion above holds either way).
    retok = [
        encode(tokenizer, e.prompt + tokenizer.decode(e.token_ids)) == e.prompt_ids + e.token_ids
        for e in episodes
    ]
    print(f"{kind}: {sum(retok)}/{len(retok)} episodes re-tokenize to their ids")


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_episode_without_tool_call_samples_the_single_turn_rollout(kind, policy, tokenizer):
    """With no tool call, an episode samples today's rollout: the same engine call, so the
    same ids (the trailing EOS aside), text and log-probs."""
    engine = make_engine(kind, policy, tokenizer)
    task = envs.get_task("arithmetic")
    problems = task.load("test", limit=4)
    params = SamplingParams(n=2, max_tokens=24, seed=3)  # stop: </answer>
    prompts = [task.format_prompt(p, "r1_zero") for p in problems]
    today = [c for g in engine.generate(prompts, params) for c in g]

    def single():
        return make_environment("single_turn", task, grade=False)

    groups = run_episodes(engine, single, problems, params, tokenizer, engine.eos_ids)
    episodes = [e for g in groups for e in g]
    for c, e in zip(today, episodes, strict=True):
        k = len(c.token_ids) - (c.token_ids[-1] in engine.eos_ids)
        assert e.token_ids == c.token_ids[:k] and e.logprobs == c.logprobs[:k]
        assert all(e.policy) and e.text == c.text and e.turns == 1


def test_episode_without_tool_call_trains_as_the_single_turn_rollout(policy, tokenizer):
    """Where the response text re-tokenizes to the sampled ids (the single-turn path trains on
    the text; a scripted engine makes it so here), an episode without a tool call gives the
    same token rows, mask, lengths and loss as today's batch."""
    task = envs.get_task("arithmetic")
    problems = task.load("test", limit=3)
    text = " 3 + 4 = 7 </think> <answer> 7 </answer>"
    engine = Scripted(tokenizer, [text], eos_id=tokenizer.eos_token_id)

    def single():
        return make_environment("single_turn", task, grade=False)

    params = SamplingParams(n=2)
    groups = run_episodes(engine, single, problems, params, tokenizer, [tokenizer.eos_token_id])
    episodes = [e for g in groups for e in g]
    mine = episode_batch(episodes, tokenizer.pad_token_id)
    theirs = tokenize_pairs([e.prompt for e in episodes], [e.text for e in episodes], tokenizer)
    for a, b in zip(mine, theirs, strict=True):
        assert torch.equal(a, b)
    losses = []
    for batch in (mine, theirs):
        lp = get_response_log_probs(policy, batch.input_ids, batch.labels)["log_probs"]
        adv = torch.linspace(-1, 1, len(episodes)).unsqueeze(1)
        loss, _ = grpo_microbatch_train_step(
            lp, batch.response_mask, 1, "reinforce_with_baseline", advantages=adv
        )
        losses.append(float(loss))
    assert losses[0] == losses[1]


def test_calculator_stop_string_is_added_once(tokenizer):
    engine = Scripted(tokenizer, [" </think> <answer> 1 </answer>"])
    params = SamplingParams(stop=["</answer>", "</calc>"])
    run_episodes(engine, calculator(), [PROBLEM], params, tokenizer)
    assert engine.calls[0][1].stop == ["</answer>", "</calc>"]
    assert CalculatorEnvironment.stop == ("</calc>",)


@pytest.mark.parametrize("kind", ["hf", "static"])
def test_token_id_prompts_sample_as_their_text(kind, policy, tokenizer):
    """A prompt given as token ids samples what its text samples (the ids being the text's
    tokenization), alone or mixed with text prompts in one call."""
    engine = make_engine(kind, policy, tokenizer)
    prompts = ["Mia has 5 apples. Mia gets 3.", "Ben has 2 coins."]
    ids = [encode(tokenizer, p) for p in prompts]
    params = SamplingParams(n=2, max_tokens=8, seed=1, stop=[])
    runs = [engine.generate(p, params) for p in (prompts, ids, [prompts[0], ids[1]])]
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            assert [c.token_ids for c in a] == [c.token_ids for c in b]
            assert [c.logprobs for c in a] == [c.logprobs for c in b]


def test_evaluation_over_episodes(tokenizer):
    """The evaluation's sampling loop over :class:`EpisodeEngine`: the environment's prompt,
    the transcript graded by the task's reward, the policy's tokens counted."""
    from reasoning_core.runtime.evaluation.loop import evaluate_policy
    from reasoning_core.runtime.training.episodes import EnvironmentTask, EpisodeEngine

    texts = [" <calc>12*34</calc>", " </think> <answer> 408 </answer>"]
    engine = EpisodeEngine(Scripted(tokenizer, texts), calculator(), [PROBLEM], tokenizer)
    result = evaluate_policy(
        engine, [PROBLEM], EnvironmentTask(calculator()), "r1_zero", SamplingParams(n=1)
    )
    [record] = result.records
    assert "<calc>12*34</calc>" in record["prompt"]  # the r1_zero_calc prompt
    assert record["response"] == texts[0] + " <result>408</result>" + texts[1]
    assert record["reward"] == 1.0 and result.summary["answer_reward"] == 1.0
    policy = sum(len(encode(tokenizer, t)) for t in texts)
    assert record["response_length"] == policy
