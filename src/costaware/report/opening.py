"""The report's opening: one table of the headline claims (claim | total-cost saving | verdict), then a few
plain sentences generated from the same comparisons.

Every cell and sentence here reads a :class:`~costaware.report.evidence.Comparison` that the verdict list
also reads (``Evidence.claims``), through the one rule (``report.verdicts``): the opening and the verdicts
cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from costaware.experiments.arms import Arm
from costaware.report.evidence import HEADLINE_AXIS, Comparison, Evidence, Key
from costaware.report.evidence_text import verdict_word
from costaware.report.md import escape, table
from costaware.report.verdicts import Verdict, fmt, no_interval, verdict

__all__ = ["Row", "rows", "opening_table", "sentences"]


@dataclass(frozen=True)
class Row:
    section: tuple[str, str]
    claim: str
    comparison: Comparison | None
    absent: str


def rows(evs: Sequence[Evidence]) -> list[Row]:
    """The headline section's claims, then each other section's first claim (its candidate against GRPO)."""
    out: list[Row] = []
    for i, ev in enumerate(evs):
        sid = (ev.section.task, ev.section.setting)
        claims = ev.claims if i == 0 else ev.claims[:1]
        out += [Row(sid, claim if i == 0 else f"{sid[0]} / {sid[1]}: {claim}", c, why) for claim, c, why in claims]
    return out


def opening_table(rs: Sequence[Row]) -> list[str]:
    cells = [
        [
            r.claim,
            "–" if r.comparison is None else fmt(r.comparison.savings[HEADLINE_AXIS]),
            verdict_word(r.comparison, bold=False) if r.comparison is not None else f"cannot say ({r.absent})",
        ]
        for r in rs
    ]
    return table(["claim", "total-cost saving [95% CI]", "verdict"], cells)


def _find(ev: Evidence, a: Key, b: Key) -> Comparison | None:
    return next((c for _, c, _ in ev.claims if c is not None and (c.a, c.b) == (a, b)), None)


def _said(c: Comparison) -> str:
    """A saving with its CI, and its verdict where it has one."""
    s = c.savings[HEADLINE_AXIS]
    v = verdict(s)
    return fmt(s) + ("" if v is Verdict.NO_INTERVAL else f", {v.value}")


def sentences(ev: Evidence, baseline: Arm, candidate: Arm, target_text: str = "") -> str:
    """Two or three sentences for one section: what a user gains, and from which effect (the other claims are
    in the table above them)."""
    sec, lr = ev.section, ev.section.default_lr
    base, nonzero, cand = ev.baseline, (Arm("nonzero"), lr), (candidate, lr)
    bn, cn = escape(sec.name(base)), escape(sec.name(cand))
    if not ev.informative:
        return (
            f"Nothing to compare in {escape(sec.task)} / {escape(sec.setting)}: the target {ev.target:.3f} is not "
            f"above the starting accuracy {ev.start:.3f}; the runs are too short or too small to say anything."
        )
    gain, rows_, aware = _find(ev, base, cand), _find(ev, base, nonzero), _find(ev, nonzero, cand)
    out = []
    if gain is not None:
        s = gain.savings[HEADLINE_AXIS]
        seeds = s.seeds
        if verdict(s) is Verdict.NO_INTERVAL:
            more = "less" if s.value >= 0 else "more"
            amount = "never reaching it" if math.isinf(s.value) else f"{abs(100 * s.value):.0f}% {more} total cost"
            out.append(
                f"With {no_interval(seeds)}, these are point estimates and nothing is decided: {cn} reached "
                f"the target accuracy {ev.target:.3f} with {amount} than {bn}.".replace(
                    "never reaching it than", "never reaching it, unlike"
                )
            )
        else:
            how = {
                Verdict.YES: f"reaches the target accuracy {ev.target:.3f} at a lower total cost than {bn}",
                Verdict.NO: f"needs a higher total cost than {bn} to reach the target accuracy {ev.target:.3f}",
                Verdict.NOT_SHOWN: f"is not shown to reach the target accuracy {ev.target:.3f} at a lower total "
                f"cost than {bn}",
            }[verdict(s)]
            out.append(f"A user who switches from {bn} to {cn} {how} (saving {fmt(s)}, {seeds} seeds).")
    if rows_ is not None and aware is not None:
        r, a = verdict(rows_.savings[HEADLINE_AXIS]), verdict(aware.savings[HEADLINE_AXIS])
        parts = (
            f"dropping the zero-advantage rows (nonzero against {bn}: {_said(rows_)}); cost-awareness "
            f"({cn} against nonzero: {_said(aware)})"
        )
        if Verdict.NO_INTERVAL in (r, a):
            out.append(f"By effect: {parts}.")
        elif r is Verdict.YES and a is not Verdict.YES:
            out.append(f"The saving comes from dropping the zero-advantage rows, not from cost-awareness: {parts}.")
        elif a is Verdict.YES and r is not Verdict.YES:
            out.append(f"The saving comes from cost-awareness, not from dropping the zero-advantage rows: {parts}.")
        elif r is Verdict.YES and a is Verdict.YES:
            out.append(f"Both effects add to the saving: {parts}.")
        else:
            out.append(f"Neither effect is shown: {parts}.")
    if target_text:
        out.append(target_text)
    return " ".join(out)
