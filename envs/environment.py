"""Environments: a task seen as turns of text, registered by name.

An environment holds one episode at a time::

    env = envs.make_environment("calculator", envs.get_task("arithmetic"))
    prompt = env.reset(problem)              # the first observation: the prompt
    step = env.step(model_text)              # -> Step(observation, reward, done, info)
    while not step.done:                     # the observation is appended to the context
        step = env.step(more_model_text)

``reset(problem)`` starts an episode for an :class:`~envs.base.Example` and returns the prompt.
``step(model_text)`` takes what the model wrote since the last observation and returns a
:class:`Step`: the observation to append (text the model did not write, e.g. a tool's answer;
empty on the last step), the reward (0 until the episode is done; then the task's reward of
the whole transcript), whether the episode is done, and an ``info`` dict (what happened:
``tool_calls``, ``tool_errors``, on the last step the reward dict as ``scores``).

The transcript graded at the end (:attr:`Environment.transcript`) is every model text and
observation in order: what a reader of the episode sees after the prompt. Its reward is the
task's reward function for the environment's template, unchanged (``single_turn`` is exactly
today's one-completion rollout). A trainer that grades many episodes at once, in worker
processes with a time limit (``envs.grade_batch``), builds environments with
``grade=False``: the last step then returns reward 0.0 and ``info["graded"] = False``, and
the trainer grades :attr:`Environment.transcript` with :attr:`Environment.reward_fn` itself.

``stop`` lists the strings at which generation must pause for the environment to answer
(``</calc>`` for the calculator); a rollout loop adds them to its sampling stop strings.

Registered environments (:func:`environment_names`): ``single_turn`` (any task, one step:
the response is graded, done) and ``calculator`` (:class:`CalculatorEnvironment`).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from envs.base import Example, RewardFn, Task, load_prompt, render
from envs.tools.calculator import calculate, is_error


class Step(NamedTuple):
    """What :meth:`Environment.step` returns (SkyRL-gym's and Gymnasium's order)."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any]


class Environment:
    """The interface, and the one-step case: the model's text is the whole response.

    ``task`` formats prompts (``template``) and gives the reward function; ``grade``: grade
    the transcript in :meth:`step` (True) or leave it to the caller (False, see the module)."""

    name = "single_turn"
    summary = "one completion per prompt, graded by the task (its rewards unchanged)"
    stop: tuple[str, ...] = ()

    def __init__(self, task: Task, template: str = "r1_zero", *, grade: bool = True) -> None:
        self.task, self.template, self.grade = task, template, grade
        self.reward_fn: RewardFn = task.reward_fn(template)
        self.problem: Example | None = None
        self.parts: list[str] = []

    def prompt(self, problem: Example) -> str:
        return self.task.format_prompt(problem, self.template)

    def reset(self, problem: Example) -> str:
        """Start an episode for ``problem``; the prompt."""
        self.problem, self.parts = problem, []
        return self.prompt(problem)

    @property
    def transcript(self) -> str:
        """The episode's text after the prompt: model texts and observations in order."""
        return "".join(self.parts)

    def step(self, model_text: str) -> Step:
        self._check_started()
        self.parts.append(model_text)
        return self.finish({})

    def end(self, model_text: str) -> Step:
        """The last step whatever ``model_text`` says: the episode's token budget is spent
        (a tool call in it is not answered). The transcript is graded as it stands."""
        self._check_started()
        self.parts.append(model_text)
        return self.finish({**self.counts(), "truncated": True})

    def counts(self) -> dict[str, Any]:
        """What the episode did so far, for ``info`` (nothing in the one-step case)."""
        return {}

    def finish(self, info: dict[str, Any]) -> Step:
        """The last step: the transcript graded (when ``grade``), done."""
        assert self.problem is not None
        if not self.grade:
            return Step("", 0.0, True, {**info, "graded": False})
        scores = self.reward_fn(self.transcript, self.problem.ground_truth)
        return Step("", float(scores["reward"]), True, {**info, "graded": True, "scores": scores})

    def _check_started(self) -> None:
        if self.problem is None:
            raise RuntimeError(f"environment {self.name!r}: step() before reset()")


class CalculatorEnvironment(Environment):
    """The model may call a calculator (:func:`envs.tools.calculator.calculate`) while it
    thinks: it writes ``<calc>12*34</calc>`` and the environment answers `` <result>408</result>``
    (an error text in the same tags for a bad expression). A model text that does not end in a
    call ends the episode, graded as the task grades a response (the r1_zero reward of the
    whole transcript). ``max_calls`` calls are answered; a call past them ends the episode.

    The prompt is ``prompt``: ``r1_zero_calc`` (``r1_zero`` with one sentence that shows the
    syntax; the default) or ``r1_zero`` itself, for a model that learnt the syntax elsewhere
    (e.g. SFT on tool transcripts) or whose context is too short for the longer prompt. The
    answer format, and so the reward function, are r1_zero's.

    ``bonus``: added to the reward of an episode in which at least one call was answered
    without an error (a shaping term for training, as in verl's GSM8K tool example; the
    task's ``answer_reward`` is unchanged). :meth:`bonus_earned` gives it; with ``grade``
    the last step's reward includes it."""

    name = "calculator"
    summary = (
        "multi-turn: the model may write <calc>12*34</calc> and is answered <result>408</result>"
        ", up to tool_max_calls calls; the r1_zero_calc prompt (docs/tools.md)"
    )
    OPEN, CLOSE = "<calc>", "</calc>"
    stop = (CLOSE,)
    CALL = re.compile(r"<calc>(.*)</calc>\s*\Z", re.DOTALL)
    PROMPTS = ("r1_zero_calc", "r1_zero")

    def __init__(
        self,
        task: Task,
        template: str = "r1_zero",
        *,
        grade: bool = True,
        max_calls: int = 4,
        prompt: str = "r1_zero_calc",
        bonus: float = 0.0,
    ) -> None:
        if template != "r1_zero":
            raise ValueError(
                f"environment 'calculator' uses the r1_zero answer format; template {template!r}"
                " is not supported"
            )
        if max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {max_calls}")
        if prompt not in self.PROMPTS:
            raise ValueError(f"prompt must be one of {list(self.PROMPTS)}, got {prompt!r}")
        if not 0.0 <= bonus <= 1.0:
            raise ValueError(f"bonus must lie in [0, 1], got {bonus}")
        super().__init__(task, template, grade=grade)
        self.max_calls, self.prompt_name, self.bonus = max_calls, prompt, bonus
        self.calls = self.errors = 0

    def prompt(self, problem: Example) -> str:
        return render(load_prompt(self.prompt_name), self.task.prompt_fields(problem))

    def bonus_earned(self) -> float:
        """``bonus`` when a call of this episode was answered without an error, else 0."""
        return self.bonus if self.calls > self.errors else 0.0

    def finish(self, info: dict[str, Any]) -> Step:
        step = super().finish({**info, "tool_bonus": self.bonus_earned()})
        if not step.info["graded"]:
            return step
        return step._replace(reward=step.reward + step.info["tool_bonus"])

    def reset(self, problem: Example) -> str:
        self.calls = self.errors = 0
        return super().reset(problem)

    def step(self, model_text: str) -> Step:
        self._check_started()
        self.parts.append(model_text)
        expression = tool_call(model_text)
        counts = self.counts()
        if expression is None:
            return self.finish(counts)
        if self.calls >= self.max_calls:
            return self.finish({**counts, "call_budget_spent": True})
        self.calls += 1
        result = calculate(expression)
        self.errors += is_error(result)
        observation = f" <result>{result}</result>"
        self.parts.append(observation)
        return Step(observation, 0.0, False, self.counts())

    def counts(self) -> dict[str, Any]:
        return {"tool_calls": self.calls, "tool_errors": self.errors}


def tool_call(model_text: str) -> str | None:
    """The expression of the calculator call that ends ``model_text`` (the text from the last
    ``<calc>`` to the closing ``</calc>``, trailing whitespace allowed), else None."""
    match = CalculatorEnvironment.CALL.search(model_text)
    if match is None:
        return None
    inner = match.group(1)  # from the first <calc>: the last call is after its last <calc>
    return inner.rpartition(CalculatorEnvironment.OPEN)[2]


# name -> the class; each takes (task, template, *, grade=..., **its settings).
ENVIRONMENTS: dict[str, type[Environment]] = {}


def register_environment(name: str, factory: type[Environment]) -> None:
    if name in ENVIRONMENTS:
        raise ValueError(f"environment {name!r} is already registered")
    ENVIRONMENTS[name] = factory


def environment_names() -> list[str]:
    return list(ENVIRONMENTS)


def make_environment(
    name: str, task: Task, template: str = "r1_zero", *, grade: bool = True, **settings: Any
) -> Environment:
    """A new environment ``name`` over ``task`` (ValueError naming the known ones)."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {name!r}; known: {environment_names()}")
    return ENVIRONMENTS[name](task, template, grade=grade, **settings)


register_environment("single_turn", Environment)
register_environment("calculator", CalculatorEnvironment)
