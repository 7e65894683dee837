"""An arm of the main job, as one typed record: which sampling a run used.

The report groups runs by :class:`Arm`, names its baselines and pairs by arm, and derives every label from
one (``report.labels``). :attr:`Arm.key` is the arm's id in run file names and logs (``"p_star:raw"``): it is
built here only, and nothing reads it back.

A key is the method id followed by each option that is not at its default, in :data:`KEY_PARTS` order. An
option added later with a default therefore leaves every earlier key, and every recorded run file named
after one, unchanged. The options are declared once, with their defaults and their check, in
:class:`ArmOptions`, which :class:`Arm`, the run's spec (``experiments.specs.RunSpec``) and its record
(``experiments.records.RunId``) inherit. The prompt stage (which prompts get generated) added its component
as one field there and one ``KEY_PARTS`` line, ``rollout: str = "all"`` and ``("rollout", str)``, its name in
``experiments.keys.SPEC_FIELDS_ADDED`` (so that recorded runs keep their keys) and in the order of a record's
file (``experiments.records``; records without it read as the default); :func:`arm_fields` carries it from
spec to record. Each arm after that (a GRESO-style skip, DAPO's dynamic sampling, a cost-aware skip, ...) is
one value of it: one line in ``report.labels.OPTIONS``, and a new row-level method (a cost-aware PODS) one line
in ``report.labels.LABELS``.

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
from typing import Any

from costaware._checks import in_unit_interval, positive_scalar, value_error
from costaware.rollouts.stage import PROMPT_METHODS
from costaware.sampling_options import BUDGETS, DEFAULT_ALPHA, WEIGHTS, option

__all__ = [
    "Arm",
    "ArmOptions",
    "DEFAULT_ALPHA",
    "KEY_PARTS",
    "ROLLOUTS",
    "STEP_BUDGETS",
    "WEIGHT_MODES",
    "arm_fields",
]

# the engines' sampling options (costaware.sampling_options): an arm's defaults are theirs
WEIGHT_MODES = WEIGHTS
STEP_BUDGETS = BUDGETS
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


@dataclass(frozen=True, kw_only=True)
class ArmOptions:
    """An arm's options, declared once with their defaults and their check: :class:`Arm`, a run's spec
    (``experiments.specs.RunSpec``) and its record (``experiments.records.RunId``) inherit them.

    Keyword-only, so that each class keeps its own positional fields (``Arm("p_star")``,
    ``RunSpec("headline", "p_star", 0)``); each declares ``method`` itself, where those put it.
    """

    weights: str = option("weights").default  # WEIGHT_MODES
    alpha: float = DEFAULT_ALPHA  # part of the arm for ALPHA_METHODS alone
    proxy_noise: float = option("proxy_noise").default
    step_budget: str = option("budget").default  # STEP_BUDGETS
    proxy: str = option("proxy").default  # the proxy behind p* (TRL's cost_aware_proxy); "auto": by the loss family
    rollout: str = "all"  # the prompt stage (ROLLOUTS); records from before it read as "all"

    def __post_init__(self) -> None:
        """The one check of an arm's fields, each named ``Class.field`` (``method`` is each subclass's)."""
        owner = type(self).__name__
        for name in ("method", "proxy"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or ":" in value:
                raise value_error(f"{owner}.{name}", value, f"must be a {name} id without ':' (options are fields)")
        if self.weights not in WEIGHT_MODES:
            raise value_error(f"{owner}.weights", self.weights, f"must be one of {WEIGHT_MODES}")
        if self.step_budget not in STEP_BUDGETS:
            raise value_error(f"{owner}.step_budget", self.step_budget, f"must be one of {STEP_BUDGETS}")
        if self.rollout not in ROLLOUTS:
            raise value_error(f"{owner}.rollout", self.rollout, f"must be one of {ROLLOUTS}")
        in_unit_interval(self.alpha, f"{owner}.alpha", strict=True)
        positive_scalar(self.proxy_noise, f"{owner}.proxy_noise", allow_zero=True, strict=True)


def arm_fields(run: ArmOptions) -> dict[str, Any]:
    """The arm's fields of a spec or record, as they are (a run's record copies them from its spec)."""
    return {f.name: getattr(run, f.name) for f in dataclasses.fields(Arm)}


@functools.total_ordering
@dataclass(frozen=True, repr=False)
class Arm(ArmOptions):
    """Which sampling a run used: the method id and its options (``alpha`` only for :data:`ALPHA_METHODS`).

    Arms order as their keys do, so that tables sorted by arm keep the order they had as strings.
    """

    method: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method not in ALPHA_METHODS:  # not part of this arm: equal keys, equal arms
            object.__setattr__(self, "alpha", DEFAULT_ALPHA)

    @classmethod
    def of(cls, run: ArmOptions) -> Arm:
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

    def __repr__(self) -> str:  # the method first, as it is written: Arm("p_star", ...)
        fields = ("method", *(f.name for f in dataclasses.fields(ArmOptions)))
        return f"Arm({', '.join(f'{name}={getattr(self, name)!r}' for name in fields)})"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Arm):
            return NotImplemented
        return self.key < other.key


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Arm)}
_TEXT = dict(KEY_PARTS)
