"""The registries of methods: advantage estimators and policy-gradient losses, by name.

A method is one entry: its pure function, its paper, and what the caller must know about it.
A policy loss registers with :func:`register_policy_loss`::

    @register_policy_loss("my_loss", paper="...", inputs=("advantages",))
    def my_loss(policy_log_probs, response_mask, inputs, settings):
        return -inputs.advantages * policy_log_probs, {}

and from then on ``loss_type="my_loss"`` works wherever a loss is named: the dispatch
(:func:`policy_loss`), the settings (:class:`LossSettings`, validated here once), ``rrl grpo``'s
choices and validation, and the documentation's tables, which all read the entry. The entry
says which rollout tensors the function reads (``old_log_probs`` among them makes the runtime
score the sampling policy), which settings it takes with their defaults and bounds
(:class:`Param`), and the aggregation and settings its paper uses.

An advantage estimator registers with :func:`register_advantage_estimator`; its function
takes ``(raw_rewards, group_size, advantage_eps)`` and returns ``(advantages, metadata)``.

The built-in methods register themselves when their modules load (``advantages.py``,
``losses.py``, ``offpolicy.py``): at the first use of a name of ``reasoning_core``, or at the
first read of a registry, whichever comes first. The registries are otherwise read-only for the
core.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar

import torch

from ._typing import Float, Shaped, Tensor
from .kl import KL_ESTIMATORS

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "LENGTH_NORMS",
    "POLICY_LOSSES",
    "AdvantageEstimator",
    "LossInputs",
    "LossSettings",
    "OFFPOLICY_CORRECTIONS",
    "OffPolicyCorrection",
    "Param",
    "PolicyLoss",
    "Registry",
    "markdown_tables",
    "policy_loss",
    "register_advantage_estimator",
    "register_offpolicy_correction",
    "register_policy_loss",
]

LENGTH_NORMS: tuple[str, ...] = ("masked_mean", "masked_normalize", "token_mean")

T = TypeVar("T")


def _builtins_registered() -> None:
    """Load the modules of the core, whose built-in methods register themselves as they load
    (the package loads them at the first use of one of its names): a registry read first
    from this module, ``from reasoning_core.registry import POLICY_LOSSES``, then lists what
    it lists when read through the package, in the same order."""
    sys.modules[__package__]._load()


class Registry(Mapping[str, T], Generic[T]):
    """Entries by name, in the order they were registered. A name registers once;
    :meth:`remove` takes an entry out again (a test's temporary method). Reading it loads the
    built-in methods first (:func:`_builtins_registered`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    @property
    def _registered(self) -> dict[str, T]:
        _builtins_registered()
        return self._entries

    def __getitem__(self, name: str) -> T:
        try:
            return self._registered[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; expected one of {list(self._entries)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._registered)

    def __len__(self) -> int:
        return len(self._registered)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._registered)})"

    def add(self, name: str, entry: T) -> T:
        # _entries, not _registered: a built-in method adds itself while its module loads
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        self[name]  # noqa: B018 - the unknown name's error
        del self._entries[name]


@dataclass(frozen=True)
class Param:
    """One numeric setting of a policy loss, as ``rrl grpo`` and :class:`LossSettings` name it.

    ``default``: a number; the name of another setting whose value it takes (``"cliprange"``);
    or None, which means the setting is required unless ``unbounded`` (then None is a valid
    value: no bound on that side). A value must lie strictly between ``above`` and ``below``.
    """

    name: str
    default: float | str | None = None
    above: float = 0.0
    below: float = math.inf
    unbounded: bool = False
    meaning: str = ""

    def bounds(self) -> str:
        upper = "" if self.below == math.inf else f" and < {self.below:g}"
        return f"> {self.above:g}{upper}"

    def describe(self) -> str:
        """The setting, its default and bounds in words (the documentation's table)."""
        if isinstance(self.default, str):
            default = f"default: {self.default}"
        elif self.default is not None:
            default = f"default {self.default:g}"
        elif self.unbounded:
            default = "default: no bound"
        else:
            return f"{self.name} ({self.bounds()})"
        return f"{self.name} ({default}; {self.bounds()})"


class LossInputs(NamedTuple):
    """What a rollout brings to a policy loss besides the policy's own log-probs and the
    response mask: ``raw_rewards`` and ``advantages`` (one per response, ``(B, 1)``), the
    sampling policy's ``old_log_probs``, each token's ``token_weights`` (detached multipliers of
    its loss, e.g. truncated importance sampling) and a frozen reference's ``ref_log_probs``
    (the KL penalty), each ``(B, T)``. None: not given."""

    raw_rewards: Float[Tensor, "*batch 1"] | None = None
    advantages: Float[Tensor, "*batch 1"] | None = None
    old_log_probs: Float[Tensor, "*batch seq"] | None = None
    token_weights: Float[Tensor, "*batch seq"] | None = None
    ref_log_probs: Float[Tensor, "*batch seq"] | None = None


PolicyLossFn = Callable[
    [Tensor, Tensor, LossInputs, "LossSettings"], tuple[Tensor, dict[str, Tensor]]
]


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss.

    ``fn(policy_log_probs (B, T), response_mask (B, T), inputs, settings)`` returns the
    unreduced per-token loss ``(B, T)`` and its metadata (``clipped``, bool per token, where a
    clip acts; ``ratio`` where it has one). ``inputs`` names the :class:`LossInputs` fields it
    reads (and ``response_mask`` when it reads the mask); ``params`` the settings it takes. ``aggregation`` is the reduction its paper uses and
    ``paper_settings`` the values its paper sets (the presets read both); ``note`` what it
    changes, in a phrase."""

    name: str
    fn: PolicyLossFn
    paper: str
    formula: str
    inputs: tuple[str, ...]
    params: tuple[Param, ...] = ()
    aggregation: str = "masked_mean"
    paper_settings: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def needs_old_log_probs(self) -> bool:
        """Whether the loss has an importance ratio to the sampling policy."""
        return "old_log_probs" in self.inputs

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered advantage estimator: ``fn(raw_rewards, group_size, advantage_eps) ->
    (advantages, metadata)``, its formula and paper. ``without_std``: the estimator that the
    setting ``use_std_normalization: false`` selects in its place (None: the setting does not
    apply); ``note`` what it changes, in a phrase."""

    name: str
    fn: Callable[[Tensor, int, float], tuple[Tensor, dict[str, Tensor]]]
    paper: str
    formula: str
    without_std: str | None = None
    note: str = ""


CorrectionFn = Callable[
    [Tensor, Tensor, Tensor, Mapping[str, float | None]],
    tuple[Tensor, dict[str, Tensor]],
]


@dataclass(frozen=True)
class OffPolicyCorrection:
    """A registered off-policy correction: per-token weights of the loss for samples drawn by
    another policy (the engine's, or an older version of the policy's) than the one the loss
    takes as its sampler.

    ``fn(proximal_log_probs (B, T), behaviour_log_probs (B, T), mask (B, T), settings)``
    returns detached weights ``(B, T)`` (0 on a token that must not train, exactly 1 where the
    two log-probs are equal and off the mask) and metadata: detached scalars ``masked`` (share
    of the mask's tokens given weight 0), ``truncated`` (share whose weight was capped) and
    ``weight_mean`` (mean weight over the mask's tokens). ``settings`` holds the values of
    ``params`` by name (validated against their bounds by :func:`correction_settings`)."""

    name: str
    fn: CorrectionFn
    paper: str
    formula: str
    params: tuple[Param, ...] = ()
    note: str = ""


POLICY_LOSSES: Registry[PolicyLoss] = Registry("loss_type")
ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")
OFFPOLICY_CORRECTIONS: Registry[OffPolicyCorrection] = Registry("offpolicy_correction")


def register_policy_loss(
    name: str,
    *,
    paper: str,
    formula: str = "",
    inputs: tuple[str, ...],
    params: tuple[Param, ...] = (),
    aggregation: str = "masked_mean",
    paper_settings: Mapping[str, Any] | None = None,
    note: str = "",
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register ``fn`` as the policy loss ``name`` (:class:`PolicyLoss`)."""
    unknown = set(inputs) - {"response_mask", *LossInputs._fields}
    if unknown:
        raise ValueError(f"loss {name!r}: unknown inputs {sorted(unknown)}")
    if aggregation not in LENGTH_NORMS:
        raise ValueError(f"loss {name!r}: unknown aggregation {aggregation!r}")

    def add(fn: PolicyLossFn) -> PolicyLossFn:
        settings = MappingProxyType(dict(paper_settings or {}))
        entry = PolicyLoss(
            name, fn, paper, formula, tuple(inputs), params, aggregation, settings, note
        )
        POLICY_LOSSES.add(name, entry)
        return fn

    return add


def register_advantage_estimator(
    name: str, *, paper: str, formula: str, without_std: str | None = None, note: str = ""
) -> Callable:
    """Decorator: register ``fn`` as the advantage estimator ``name``."""

    def add(fn: Callable) -> Callable:
        entry = AdvantageEstimator(name, fn, paper, formula, without_std, note)
        ADVANTAGE_ESTIMATORS.add(name, entry)
        return fn

    return add


def register_offpolicy_correction(
    name: str, *, paper: str, formula: str, params: tuple[Param, ...] = (), note: str = ""
) -> Callable[[CorrectionFn], CorrectionFn]:
    """Decorator: register ``fn`` as the off-policy correction ``name``
    (:class:`OffPolicyCorrection`)."""

    def add(fn: CorrectionFn) -> CorrectionFn:
        OFFPOLICY_CORRECTIONS.add(name, OffPolicyCorrection(name, fn, paper, formula, params, note))
        return fn

    return add


def correction_settings(name: str, given: Mapping[str, Any]) -> dict[str, float | None]:
    """The settings of correction ``name``: each of its :class:`Param` read from ``given`` (a
    missing or None value takes the default), checked against its bounds.

    Raises:
        ValueError: naming the setting, on an unknown correction or a value outside bounds.
    """
    out: dict[str, float | None] = {}
    for param in OFFPOLICY_CORRECTIONS[name].params:
        value = given.get(param.name)
        value = param.default if value is None else value
        if value is None:
            if not param.unbounded:
                raise ValueError(f"offpolicy_correction {name!r} needs {param.name}")
            out[param.name] = None
            continue
        if not (isinstance(value, (int, float)) and param.above < value < param.below):
            raise ValueError(
                f"'{param.name}' must be {param.bounds()} for offpolicy_correction {name!r}, "
                f"got {value}"
            )
        out[param.name] = float(value)
    return out


@dataclass(frozen=True)
class LossSettings:
    """The settings of one policy-gradient objective, validated once when built.

    ``loss_type`` names a :data:`POLICY_LOSSES` entry; the numeric settings of its
    :class:`Param` list are resolved here (a None takes the entry's default: a number, another
    setting's value, or no bound) and checked against the entry's bounds, so that after
    construction each holds the value the loss uses. Settings the loss does not take are kept
    as given and ignored. ``length_normalization`` is how a response's token losses become one
    number (:data:`LENGTH_NORMS`; ``masked_normalize`` and ``token_mean`` divide by
    ``normalize_constant``), ``kl_coef`` and ``kl_estimator`` the KL penalty to a reference.

    Raises:
        ValueError: naming the setting, on an unknown name, a missing required value or a
            value outside its bounds.
    """

    loss_type: str
    cliprange: float | None = None
    cliprange_low: float | None = None
    cliprange_high: float | None = None
    sapo_tau_pos: float | None = None
    sapo_tau_neg: float | None = None
    length_normalization: str = "masked_mean"
    normalize_constant: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"

    def __post_init__(self) -> None:
        entry = POLICY_LOSSES[self.loss_type]
        for param in entry.params:
            object.__setattr__(self, param.name, self._resolve(param))
        if self.length_normalization not in LENGTH_NORMS:
            raise ValueError(
                f"unknown length_normalization {self.length_normalization!r}; "
                f"expected one of {LENGTH_NORMS}"
            )
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"unknown kl_estimator {self.kl_estimator!r}; expected one of {KL_ESTIMATORS}"
            )
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.normalize_constant is not None and not self.normalize_constant > 0:
            raise ValueError(f"normalize_constant must be > 0, got {self.normalize_constant}")

    def _resolve(self, param: Param) -> float | None:
        value = getattr(self, param.name)
        source = param.name
        if value is None and isinstance(param.default, str):
            value, source = getattr(self, param.default), f"{param.name} (from {param.default})"
        elif value is None:
            value = param.default
        if value is None:
            if param.unbounded:
                return None
            raise ValueError(
                f"loss_type={self.loss_type!r} needs {param.name}"
                + (f" (or {param.default})" if isinstance(param.default, str) else "")
                + ", which is None"
            )
        if not param.above < value < param.below:
            raise ValueError(
                f"{source} must be {param.bounds()} for loss_type {self.loss_type!r}, got {value}"
            )
        return value

    @property
    def entry(self) -> PolicyLoss:
        return POLICY_LOSSES[self.loss_type]

    def with_constant(self, normalize_constant: float) -> LossSettings:
        """The same settings with ``normalize_constant`` (``token_mean``'s, counted per
        train batch)."""
        return replace(self, normalize_constant=normalize_constant)

    @classmethod
    def of(cls, source: Any) -> LossSettings:
        """The settings read from ``source``'s attributes of the same names (a run's
        configuration); a missing attribute keeps the default."""
        known = {f.name: getattr(source, f.name) for f in fields(cls) if hasattr(source, f.name)}
        return cls(**known)


def policy_loss(
    policy_log_probs: Float[Tensor, "*batch seq"],
    response_mask: Shaped[Tensor, "*batch seq"] | None,
    inputs: LossInputs,
    settings: LossSettings,
) -> tuple[Float[Tensor, "*batch seq"], dict[str, Tensor]]:
    """The per-token loss of ``settings.loss_type``: its entry's function, after checking that
    the inputs it reads are given. The metadata always holds ``clipped`` (all False where the
    function reports none).

    Raises:
        ValueError: naming a missing input.
    """
    entry = settings.entry
    for name in entry.inputs:
        given = response_mask if name == "response_mask" else getattr(inputs, name)
        if given is None:
            raise ValueError(f"loss_type={entry.name!r} needs {name}, which is None")
    loss, metadata = entry.fn(policy_log_probs, response_mask, inputs, settings)
    if "clipped" not in metadata:
        metadata = {**metadata, "clipped": torch.zeros_like(loss, dtype=torch.bool)}
    return loss, metadata


def _table(header: str, entries: list[tuple[Any, str | None]]) -> list[str]:
    """A registry's Markdown table: ``header``, its rule, and a row per entry (name, formula,
    paper, note, settings, then the entry's ``more`` cells where given)."""
    rule = "|" + "---|" * (header.count("|") - 1)
    rows = [header, rule]
    for entry, more in entries:
        params = ", ".join(f"`{p.describe()}`" for p in entry.params) or "—"
        row = f"| `{entry.name}` | `{entry.formula}` | {entry.paper} | {entry.note or '—'} "
        rows.append(row + f"| {params} |" + (f" {more} |" if more is not None else ""))
    return rows


def markdown_tables() -> dict[str, str]:
    """The registries as Markdown tables (docs/algorithms.md holds them between
    ``<!-- registry:NAME -->`` markers; ``rrl docs`` rewrites them): ``advantage_estimators``
    and ``policy_losses``, one row per entry in registration order."""
    rows = [
        "| `advantage_estimator` | advantage of response `i` of group `g` | paper "
        "| what it changes |",
        "|---|---|---|---|",
    ]
    for e in ADVANTAGE_ESTIMATORS.values():
        without = f"; `use_std_normalization: false` selects `{e.without_std}`"
        rows.append(
            f"| `{e.name}` | `{e.formula}` | {e.paper} "
            f"| {e.note or '—'}{without if e.without_std else ''} |"
        )
    losses = _table(
        "| `loss_type` | per-token loss | paper | what it changes | settings (default; bounds) "
        "| reads | paper's aggregation |",
        [
            (e, f"{', '.join(f'`{name}`' for name in e.inputs)} | `{e.aggregation}`")
            for e in POLICY_LOSSES.values()
        ],
    )
    corrections = _table(
        "| `offpolicy_correction` | weight of a response token | paper | what it changes "
        "| settings (default; bounds) |",
        [(c, None) for c in OFFPOLICY_CORRECTIONS.values()],
    )
    return {
        "advantage_estimators": "\n".join(rows),
        "policy_losses": "\n".join(losses),
        "offpolicy_corrections": "\n".join(corrections),
    }
