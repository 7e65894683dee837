"""An arm of the main job, as one typed record: which sampling a run used.

The report groups runs by :class:`Arm`, names its baselines and pairs by arm, and derives every label from
one (``report.labels``). :attr:`Arm.key` is the arm's id in run file names and logs (``"p_star:raw"``): it is
built here only, and nothing reads it back.

A key is the method id followed by each option that is not at its default, in :data:`KEY_PARTS` order. An
option added later with a default therefore leaves every earlier key, and every recorded run file named
after one, unchanged. The prompt stage (which prompts get generated) adds its component as one field
here and one ``KEY_PARTS`` line, e.g. ``rollout: str = "all"`` and ``("rollout", str)``, plus the same field
with the same default on ``RunSpec`` (listed in ``experiments.keys.SPEC_FIELDS_ADDED``) and on ``RunId``
(records without it read as the default); :func:`arm_fields` then carries it from spec to record. Each arm
after that (a GRESO-style skip, DAPO's dynamic sampling, a cost-aware skip, ...) is one value of it: one line
in ``report.labels.OPTIONS``, and a new row-level method (a cost-aware PODS) one line in ``report.labels.LABELS``.

>>> Arm("p_star", weights="raw").key
'p_star:raw'
>>> Arm("p_smooth", alpha=0.05, proxy_noise=0.1, step_budget="tokens", proxy="calibrated").key
'p_smooth:a0.05:noise0.1:tokens:calibrated'
>>> Arm("p_star", alpha=0.05) == Arm("p_star")  # alpha parameterises p_smooth alone
True
>>> Arm("p_star:raw")
Traceback (most recent call last):
...
ValueError: Arm.method must be a method id without ':' (options are fields), got 'p_star:raw'
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from costaware._checks import in_unit_interval, positive_scalar, value_error
from costaware.rollouts.stage import PROMPT_METHODS
from costaware.sampling_options import option

__all__ = [
    "Arm",
    "ArmFields",
    "DEFAULT_ALPHA",
    "KEY_PARTS",
    "ROLLOUTS",
    "STEP_BUDGETS",
    "WEIGHT_MODES",
    "arm_fields",
    "check_arm_fields",
]

DEFAULT_ALPHA: float = option("alpha").default
WEIGHT_MODES = ("centred", "raw")
STEP_BUDGETS = ("rows", "support", "tokens")
ALPHA_METHODS = ("p_smooth",)  # the methods that alpha parameterises: elsewhere it is not part of the arm

# The options after the method in a key, in order, each with its text there (written only when the option is
# not at its default). One line per option.
KEY_PARTS: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("weights", str),  # "raw": GRPO's expected step
    ("alpha", lambda a: f"a{a:g}"),  # p_smooth's mixing weight
    ("proxy_noise", lambda s: f"noise{s:g}"),  # the ablation's noise on the proxy
    ("step_budget", str),  # "tokens": each step draws until it holds the baseline's tokens; "support": nonzero's rows
    ("proxy", str),  # the gradient-norm proxy behind p*, when not "auto"
    ("rollout", lambda r: f"rollout-{r}"),  # the prompt stage: which prompts get generated, when not "all"
)
# The prompt stages of the main job: "all" generates every prompt TRL's sampler gives, as before; then each
# rule the engines name (costaware.rollouts.stage.PROMPT_METHODS, from the prompt registry: "greso" and
# "cost_aware_skip" skip prompts before generation, biased; "cost_aware" draws prompts from q ∝ Ĝ/√ĉ with
# prompt weights, unbiased); "dapo" is DAPO's dynamic sampling (over-generate, drop zero-variance groups,
# refill: the trainer's ZVF).
ROLLOUTS = ("all", *PROMPT_METHODS, "dapo")


class ArmFields(Protocol):
    """What :meth:`Arm.of` reads: a run's spec (``experiments.profile.RunSpec``) and its record (``RunId``).

    Read-only members (properties), so that frozen dataclasses satisfy it.
    """

    @property
    def method(self) -> str: ...
    @property
    def weights(self) -> str: ...
    @property
    def alpha(self) -> float: ...
    @property
    def proxy_noise(self) -> float: ...
    @property
    def step_budget(self) -> str: ...
    @property
    def proxy(self) -> str: ...
    @property
    def rollout(self) -> str: ...


def arm_fields(run: ArmFields) -> dict[str, Any]:
    """The arm's fields of a spec or record, as they are (a run's record copies them from its spec)."""
    return {f.name: getattr(run, f.name) for f in dataclasses.fields(Arm)}


def check_arm_fields(owner: str, run: ArmFields) -> None:
    """The one check of an arm's fields, on an :class:`Arm` or a record that carries them (named ``owner.field``)."""
    for name in ("method", "proxy"):
        value = getattr(run, name)
        if not isinstance(value, str) or not value or ":" in value:
            raise value_error(f"{owner}.{name}", value, f"must be a {name} id without ':' (options are fields)")
    if run.weights not in WEIGHT_MODES:
        raise value_error(f"{owner}.weights", run.weights, f"must be one of {WEIGHT_MODES}")
    if run.step_budget not in STEP_BUDGETS:
        raise value_error(f"{owner}.step_budget", run.step_budget, f"must be one of {STEP_BUDGETS}")
    if run.rollout not in ROLLOUTS:
        raise value_error(f"{owner}.rollout", run.rollout, f"must be one of {ROLLOUTS}")
    in_unit_interval(run.alpha, f"{owner}.alpha", strict=True)
    positive_scalar(run.proxy_noise, f"{owner}.proxy_noise", allow_zero=True, strict=True)


@functools.total_ordering
@dataclass(frozen=True)
class Arm:
    """Which sampling a run used: the method id and its options (``alpha`` only for :data:`ALPHA_METHODS`).

    Arms order as their keys do, so that tables sorted by arm keep the order they had as strings.
    """

    method: str
    weights: str = "centred"
    alpha: float = DEFAULT_ALPHA
    proxy_noise: float = 0.0
    step_budget: str = "rows"
    proxy: str = "auto"
    rollout: str = "all"

    def __post_init__(self) -> None:
        check_arm_fields("Arm", self)
        if self.method not in ALPHA_METHODS:  # not part of this arm: equal keys, equal arms
            object.__setattr__(self, "alpha", DEFAULT_ALPHA)

    @classmethod
    def of(cls, run: ArmFields) -> Arm:
        """The arm of a run's spec or record: the one constructor from their fields."""
        return cls(**arm_fields(run))

    def options(self) -> tuple[tuple[str, Any], ...]:
        """(field, value) of each option not at its default, in key order: what the key and the label show."""
        return tuple((name, getattr(self, name)) for name, _ in KEY_PARTS
                     if getattr(self, name) != _DEFAULTS[name])  # fmt: skip

    @property
    def key(self) -> str:
        """The arm's id in run file names, logs and summaries, e.g. ``p_star``, ``p_star:raw``, ``p_smooth:a0.05``."""
        return ":".join((self.method, *(_TEXT[name](value) for name, value in self.options())))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Arm):
            return NotImplemented
        return self.key < other.key


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Arm)}
_TEXT = dict(KEY_PARTS)
