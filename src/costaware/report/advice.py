"""Which method to use: at the job's price of a generated token and at g = 1 and g = 3, decided on each headline
task from the claims' own comparisons (their total-cost savings over GRPO, one bootstrap), and said in one
sentence on the report's first screen.

At each price, on each task, the rule of :mod:`costaware.report.method_choice` over nonzero, the candidate (p*)
and PODS (where the section ran it): of the methods whose saving over the baseline is shown (CI above zero) and
that no other such method is shown to beat, use the simplest, and name the others beside it; none: keep the
baseline. Where no saving has an interval (too few seeds) nothing is decided. Whenever p*'s saving over nonzero
has an interval that does not lie above zero, the sentence says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from costaware.experiments.arms import Arm
from costaware.report.curves import Estimate
from costaware.report.evidence import HEADLINE_AXIS, Evidence, Key
from costaware.report.labels import label
from costaware.report.md import escape
from costaware.report.method_choice import choose
from costaware.report.sweeps import PRICES, PriceRow, price_name
from costaware.report.verdicts import Verdict, fmt, no_interval, pct, verdict

__all__ = [
    "ADVICE_PRICES",
    "PricedClaim",
    "MethodChoice",
    "priced_claims",
    "choose_method",
    "section_choices",
    "advice_sentence",
]

ADVICE_PRICES = (1.0, 3.0)  # besides the job's own price: parity, and generation three times dearer


@dataclass(frozen=True)
class PricedClaim:
    """A claim's comparison (``earlier`` → ``later``) and its total-cost saving at each price it was computed at."""

    earlier: Key
    later: Key
    savings: Mapping[float, Estimate]


@dataclass(frozen=True)
class MethodChoice:
    """The method to use on one task at one price (``use`` None: keep the baseline, or nothing is decided), and
    the savings that decided it; ``absent`` says why nothing was compared."""

    task: str
    price: float
    baseline: Key
    candidate: Key
    nonzero: Key
    use: Key | None
    candidate_over_baseline: Estimate | None
    nonzero_over_baseline: Estimate | None
    candidate_over_nonzero: Estimate | None
    absent: str = ""
    peer: Key | None = None  # PODS, a peer that also feeds fewer rows
    peer_over_baseline: Estimate | None = None
    tied: tuple[Key, ...] = ()  # the other methods the rule leaves: not told apart from ``use``

    def over_baseline(self, key: Key) -> Estimate | None:
        """The saving of ``key`` (nonzero, the candidate or the peer) over the baseline."""
        by = {self.nonzero: self.nonzero_over_baseline, self.candidate: self.candidate_over_baseline}
        if self.peer is not None:
            by[self.peer] = self.peer_over_baseline
        return by.get(key)

    @property
    def saving(self) -> Estimate | None:
        """The saving of the method to use over the baseline."""
        return None if self.use is None else self.over_baseline(self.use)

    @property
    def decided(self) -> bool:
        """Some saving over the baseline has an interval (enough seeds)."""
        return any(s is not None and s.has_interval for s in (self.candidate_over_baseline, self.nonzero_over_baseline))


def priced_claims(ev: Evidence, price_rows: Sequence[PriceRow]) -> list[PricedClaim]:
    """Every computed claim of a section with its saving at the section's own price and at each of ``PRICES``."""
    at_prices = {r.pair: dict(zip(PRICES, r.savings, strict=True)) for r in price_rows if r.pair is not None}
    return [
        PricedClaim(c.a, c.b, {**at_prices.get((c.a, c.b), {}), ev.generation_cost: c.savings[HEADLINE_AXIS]})
        for _, c, _ in ev.claims
        if c is not None
    ]


def choose_method(
    task: str,
    price: float,
    claims: Sequence[PricedClaim],
    baseline: Key,
    candidate: Key,
    nonzero: Key,
    absent: str = "",
    peer: Key | None = None,
) -> MethodChoice:
    """The method to use on ``task`` at ``price`` (see the module doc), from the claims computed at that price."""
    by_pair = {(c.earlier, c.later): c.savings.get(price) for c in claims}
    cand, zero = by_pair.get((baseline, candidate)), by_pair.get((baseline, nonzero))
    over = {nonzero: zero, candidate: cand}
    if peer is not None:
        over[peer] = by_pair.get((baseline, peer))
    left = choose(list(over), over, lambda a, b: by_pair.get((a, b)))
    return MethodChoice(
        task, price, baseline, candidate, nonzero, left[0] if left else None, cand, zero,
        by_pair.get((nonzero, candidate)), absent, peer, over.get(peer) if peer is not None else None, left[1:],
    )  # fmt: skip


def section_choices(ev: Evidence, price_rows: Sequence[PriceRow], candidate: Arm) -> list[MethodChoice]:
    """The method to use on a section's task at its own price and at :data:`ADVICE_PRICES`."""
    lr = ev.section.default_lr
    claims = priced_claims(ev, price_rows)
    absent = "" if claims else next((why for _, c, why in ev.claims if c is None and why), "")
    return [
        choose_method(
            ev.section.task, g, claims, ev.baseline, (candidate, lr), (Arm("nonzero"), lr), absent, (Arm("pods"), lr)
        )
        for g in dict.fromkeys((ev.generation_cost, *ADVICE_PRICES))
    ]


def _name(key: Key) -> str:
    return escape(label(key[0]))


def _tasks(choices: Sequence[MethodChoice]) -> str:
    names = [escape(c.task) for c in choices]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _use_clause(choices: Sequence[MethodChoice]) -> str:
    """``use X: it saves … over GRPO on <task>[, … on <task>]`` for the tasks that chose one method."""
    first = choices[0]
    assert first.use is not None  # only called for a method shown to save
    savings = [f"{fmt(c.saving)} over {_name(c.baseline)} on {escape(c.task)}{_tied(c)}" for c in choices if c.saving]
    return f"use {_name(first.use)}: it saves " + ", ".join(savings)


def _tied(c: MethodChoice) -> str:
    """`` (not told apart from it: PODS +19% [+11%, +26%])`` when the rule left other methods beside ``use``."""
    vs_nonzero = c.candidate_over_nonzero
    said_after = c.use == c.nonzero and vs_nonzero is not None and vs_nonzero.has_interval  # _candidate_vs_nonzero
    tied = [k for k in c.tied if not (k == c.candidate and said_after)]
    said = [f"{_name(k)} {fmt(s)}" for k in tied if (s := c.over_baseline(k)) is not None]
    return f" (not told apart from it: {', '.join(said)})" if said else ""


def _keep_clause(choices: Sequence[MethodChoice]) -> str:
    base = _name(choices[0].baseline)
    return f"no method is shown to save over {base} on {_tasks(choices)}: keep {base}"


def _undecided_clause(choices: Sequence[MethodChoice]) -> str:
    parts = []
    for c in choices:
        if c.absent:
            parts.append(f"on {escape(c.task)} nothing was compared ({escape(c.absent)})")
            continue
        pairs = [(c.candidate, c.candidate_over_baseline), (c.nonzero, c.nonzero_over_baseline)]
        if c.peer is not None:
            pairs.append((c.peer, c.peer_over_baseline))
        points = [f"{_name(key)} {pct(s.value)}" for key, s in pairs if s is not None]
        seeds = min(s.seeds or 0 for _, s in pairs if s is not None)
        parts.append(
            f"nothing is decided on {escape(c.task)} ({no_interval(seeds)}; point estimates over "
            f"{_name(c.baseline)}: {', '.join(points)})"
        )
    return "; ".join(parts)


def _candidate_vs_nonzero(choices: Sequence[MethodChoice]) -> str:
    """Where p*'s saving over nonzero has an interval and does not lie above zero: said plainly."""
    out = []
    for c in choices:
        s = c.candidate_over_nonzero
        if s is None or not s.has_interval or verdict(s) is Verdict.YES:
            continue
        how = "is worse than" if verdict(s) is Verdict.NO else "does not beat"
        why = "the CI lies below zero" if verdict(s) is Verdict.NO else "the CI includes zero"
        out.append(f"{_name(c.candidate)} {how} nonzero on {escape(c.task)} ({fmt(s)} over nonzero: {why})")
    return "" if not out else ", and " + "; ".join(out)


def _price_clause(price: float, choices: Sequence[MethodChoice], job_price: float) -> str:
    head = f"at this job's price, g = {price_name(price)}," if price == job_price else f"at g = {price_name(price)},"
    groups: dict[Key | str, list[MethodChoice]] = {}
    for c in choices:
        kind: Key | str = c.use if c.use is not None else ("keep" if c.decided else "undecided")
        groups.setdefault(kind, []).append(c)
    said = []
    for kind, group in groups.items():
        if kind == "keep":
            said.append(_keep_clause(group))
        elif kind == "undecided":
            said.append(_undecided_clause(group))
        else:
            said.append(_use_clause(group))
    return f"{head} " + "; ".join(said) + _candidate_vs_nonzero(choices)


def advice_sentence(choices: Sequence[MethodChoice], job_price: float) -> str:
    """One sentence: the method to use at each price of ``choices`` (the job's first), on every task they hold."""
    if not choices:
        return ""
    prices = sorted({c.price for c in choices}, key=lambda g: (g != job_price, g))
    clauses = [_price_clause(g, [c for c in choices if c.price == g], job_price) for g in prices]
    text = "; ".join(clauses)
    return f"**Which method to use.** {text[0].upper()}{text[1:]}."
