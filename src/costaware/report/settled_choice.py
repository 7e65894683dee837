"""Which method to use at each price of generation, decided from a settled record's rows (one task at a time).

The rule, the same at every price and on every task:

1. the candidates are ``nonzero``, p* and PODS; a candidate counts when its total-cost saving over GRPO is shown
   (95% CI above zero);
2. a counted candidate drops out when another counted one beats it (the record's claim between the two, read
   in either direction, has a CI that excludes zero);
3. the ones left are the choice, simplest first (``nonzero``: drop rows; p*: draw with weights; PODS: select
   per group and recompute the advantages); none left: keep GRPO.

Two candidates that the record holds no claim between are not told apart. The sentence names every method left
with its saving over GRPO, so a reader sees what the choice rests on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from costaware.report.curves import Estimate
from costaware.report.sweeps import price_name
from costaware.report.verdicts import Verdict, fmt, verdict

if TYPE_CHECKING:
    from costaware.report.settled import Row

__all__ = ["BASELINE", "CANDIDATES", "NAMES", "Choice", "choices", "choice_sentence", "task_sentence"]

BASELINE = "none"
CANDIDATES = ("nonzero", "p_star", "pods")  # simplest first: the order a tie is named in
NAMES = {"none": "GRPO", "nonzero": "nonzero", "p_star": "p\\*", "p_smooth": "p\\*_smooth", "pods": "PODS"}


@dataclass(frozen=True)
class Choice:
    """The methods to use on ``task`` at ``price`` (``use`` empty: keep GRPO) and every candidate's saving over
    GRPO that the record holds."""

    task: str
    price: float
    use: tuple[str, ...]
    over_baseline: Mapping[str, Estimate]

    @property
    def decided(self) -> bool:
        """Some candidate's saving over GRPO has an interval (enough seeds for a verdict)."""
        return any(e.has_interval for e in self.over_baseline.values())


def _beats(pairs: Mapping[tuple[str, str], Estimate], x: str, y: str) -> bool:
    """The record shows ``x`` beating ``y``: the claim 'x beats y' is yes, or 'y beats x' is 'no, it is worse'."""
    if (y, x) in pairs and verdict(pairs[(y, x)]) is Verdict.YES:
        return True
    return (x, y) in pairs and verdict(pairs[(x, y)]) is Verdict.NO


def choices(rows: Sequence[Row], estimator: str) -> list[Choice]:
    """One :class:`Choice` per task and price of ``rows`` (a record's :class:`~costaware.report.settled.Row`),
    read with ``estimator``; tasks and prices in the rows' order."""
    cells: dict[tuple[str, float], dict[tuple[str, str], Estimate]] = {}
    for r in rows:
        if r.estimator == estimator:
            cells.setdefault((r.task, r.generation_cost), {})[(r.control, r.method)] = r.estimate
    out = []
    for (task, price), pairs in cells.items():
        over = {c: pairs[(BASELINE, c)] for c in CANDIDATES if (BASELINE, c) in pairs}
        shown = [c for c, e in over.items() if verdict(e) is Verdict.YES]
        left = tuple(c for c in shown if not any(_beats(pairs, o, c) for o in shown if o != c))
        out.append(Choice(task, price, left, over))
    return out


def _names(keys: Sequence[str], conjunction: str) -> str:
    names = [NAMES[k] for k in keys]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" {conjunction} " + names[-1]


def choice_sentence(c: Choice) -> str:
    """``at g = 1/3, use PODS: it saves +33% [+27%, +39%] over GRPO`` (one clause of :func:`task_sentence`)."""
    at = f"at g = {price_name(c.price)}"
    if not c.decided:
        return f"{at}, no saving over GRPO has an interval yet (too few seeds): nothing is decided"
    if not c.use:
        return f"{at}, no method is shown to save over GRPO: keep GRPO"
    if len(c.use) == 1:
        return f"{at}, use {NAMES[c.use[0]]}: it saves {fmt(c.over_baseline[c.use[0]])} over GRPO"
    each = ", ".join(f"{NAMES[k]} {fmt(c.over_baseline[k])}" for k in c.use)
    return f"{at}, use {_names(c.use, 'or')}, which the record does not tell apart (savings over GRPO: {each})"


def task_sentence(task: str, cs: Sequence[Choice]) -> str:
    """Every price's choice on one task, in one sentence."""
    text = "; ".join(choice_sentence(c) for c in cs if c.task == task)
    return f"**Which method on {task}.** {text[:1].upper()}{text[1:]}."
