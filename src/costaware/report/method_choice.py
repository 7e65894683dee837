"""Which method to use at a price of generation: one rule, read from measured savings, for the main job's first
screen (:mod:`costaware.report.advice`) and for the evidence profile's record (:mod:`costaware.report.settled`).

The rule, the same at every price and on every task:

1. the candidates are ``nonzero``, p* and PODS (each where it ran); a candidate counts when its total-cost saving
   over GRPO is shown (95% CI above zero);
2. a counted candidate drops out when another counted one beats it (the comparison between the two, read in
   either direction, has a CI that excludes zero);
3. the method to use is the simplest one left (``nonzero``: drop rows; p*: draw with weights; PODS: select per
   group and recompute the advantages); the others left are named beside it as not told apart from it. None
   left: keep GRPO.

Two candidates with no comparison between them are not told apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from costaware.report.curves import Estimate
from costaware.report.sweeps import price_name
from costaware.report.verdicts import Verdict, fmt, verdict

__all__ = ["BASELINE", "CANDIDATES", "NAMES", "Choice", "choose", "choices", "choice_sentence", "task_sentence"]

K = TypeVar("K")

BASELINE = "none"
CANDIDATES = ("nonzero", "p_star", "pods")  # simplest first: the order the rule prefers among methods left
NAMES = {"none": "GRPO", "nonzero": "nonzero", "p_star": "p\\*", "p_smooth": "p\\*_smooth", "pods": "PODS"}


def _shown(s: Estimate | None) -> bool:
    return s is not None and verdict(s) is Verdict.YES


def choose(
    candidates: Sequence[K],
    over_baseline: Mapping[K, Estimate | None],
    between: Callable[[K, K], Estimate | None],
) -> tuple[K, ...]:
    """The candidates the rule leaves, simplest first (the first is the one to use; () keeps the baseline).

    ``candidates`` simplest first, ``over_baseline`` each one's saving over the baseline, ``between(a, b)`` the
    saving of ``b`` over ``a`` where it was measured (None where not).
    """
    shown = [c for c in candidates if _shown(over_baseline.get(c))]

    def beats(x: K, y: K) -> bool:
        xy, yx = between(y, x), between(x, y)  # x's saving over y; y's over x
        return _shown(xy) or (yx is not None and verdict(yx) is Verdict.NO)

    return tuple(c for c in shown if not any(beats(o, c) for o in shown if o != c))


@dataclass(frozen=True)
class Choice:
    """What a settled record says to use on ``task`` at ``price``: ``left`` as :func:`choose` gives it (empty:
    keep GRPO), and every candidate's saving over GRPO that the record holds."""

    task: str
    price: float
    left: tuple[str, ...]
    over_baseline: Mapping[str, Estimate]

    @property
    def decided(self) -> bool:
        """Some candidate's saving over GRPO has an interval (enough seeds for a verdict)."""
        return any(e.has_interval for e in self.over_baseline.values())


class _Pairs(dict[tuple[str, str], Estimate]):
    """A record's comparisons at one task and price, by (control, method)."""

    def get_pair(self, a: str, b: str) -> Estimate | None:
        return self.get((a, b))


class RecordRow(Protocol):
    """What :func:`choices` reads of a settled record's row (:class:`costaware.report.settled.Row`)."""

    @property
    def task(self) -> str: ...
    @property
    def control(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def generation_cost(self) -> float: ...
    @property
    def estimator(self) -> str: ...
    @property
    def estimate(self) -> Estimate: ...


def choices(rows: Sequence[RecordRow], estimator: str) -> list[Choice]:
    """One :class:`Choice` per task and price of a settled record's rows, read with ``estimator``."""
    cells: dict[tuple[str, float], _Pairs] = {}
    for r in rows:
        if r.estimator == estimator:
            cells.setdefault((r.task, r.generation_cost), _Pairs())[(r.control, r.method)] = r.estimate
    out = []
    for (task, price), pairs in cells.items():
        over = {c: pairs[(BASELINE, c)] for c in CANDIDATES if (BASELINE, c) in pairs}
        out.append(Choice(task, price, choose(CANDIDATES, over, pairs.get_pair), over))
    return out


def choice_sentence(c: Choice) -> str:
    """``at g = 1/3, use PODS: it saves +33% [+27%, +39%] over GRPO`` (one clause of :func:`task_sentence`)."""
    at = f"at g = {price_name(c.price)}"
    if not c.decided:
        return f"{at}, no saving over GRPO has an interval yet (too few seeds): nothing is decided"
    if not c.left:
        return f"{at}, no method is shown to save over GRPO: keep GRPO"
    use, *tied = c.left
    said = f"{at}, use {NAMES[use]}: it saves {fmt(c.over_baseline[use])} over GRPO"
    if tied:
        said += " (not told apart from it: " + ", ".join(f"{NAMES[k]} {fmt(c.over_baseline[k])}" for k in tied) + ")"
    return said


def task_sentence(task: str, cs: Sequence[Choice]) -> str:
    """Every price's choice on one task, in one sentence."""
    text = "; ".join(choice_sentence(c) for c in cs if c.task == task)
    return f"**Which method on {task}.** {text[:1].upper()}{text[1:]}."
