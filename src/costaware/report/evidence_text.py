"""A section's evidence in words: a saving described, a claim's verdict line, and the answer paragraph.

Every sentence here reads the numbers of :mod:`costaware.report.evidence` (its comparisons and plateau checks)
and the one verdict rule (:mod:`costaware.report.verdicts`); nothing here computes a number.
"""

from __future__ import annotations

import math

from costaware.experiments.arms import Arm
from costaware.report.curves import AXES, Estimate
from costaware.report.evidence import HEADLINE_AXIS, Comparison, Effect, Evidence, Key, Plateau, as_arm
from costaware.report.labels import label
from costaware.report.md import escape
from costaware.report.verdicts import Verdict, fmt, no_interval, pct, verdict

__all__ = ["AXIS_WORDS", "describe", "verdict_word", "verdict_line", "answer_paragraph"]

AXIS_WORDS = {
    "total_cost": "total cost",
    "po_tokens": "PO tokens",
    "generated_tokens": "generated tokens",
    "rounds": "generation rounds",
}


def describe(est: Estimate, axis: str) -> str:
    """In words, with the signed saving, its CI and whether the CI excludes zero.

    >>> describe(Estimate(0.3, 0.12, 0.45), "po_tokens")
    '30% fewer PO tokens (saving +30% [+12%, +45%], CI excludes zero)'
    >>> describe(Estimate(-0.1, -0.3, 0.05), "rounds")
    '10% more generation rounds (saving -10% [-30%, +5%], within noise)'
    >>> describe(Estimate(0.3, 0.3, 0.3, seeds=1), "po_tokens")
    '30% fewer PO tokens (saving +30%, 1 seed: no interval)'
    """
    what = AXIS_WORDS[axis]
    if math.isinf(est.value) and est.value < 0:
        head = f"never reaches the target ({what})"
    elif math.isnan(est.value):
        head = f"neither reaches the target ({what})"
    else:
        less, more = ("lower", "higher") if axis == "total_cost" else ("fewer", "more")  # a cost, or a count
        head = f"{abs(100 * est.value):.0f}% {less if est.value >= 0 else more} {what}"
    if not est.has_interval:
        return f"{head} (saving {pct(est.value)}, {no_interval(est.seeds)})"
    tail = "CI excludes zero" if est.excludes_zero else "within noise"
    return f"{head} (saving {fmt(est)}, {tail})"


def verdict_word(comp: Comparison | None, *, bold: bool = True) -> str:
    """A claim's verdict in words (bold in a sentence, plain in a table cell): the verdict list and the
    opening table both use this."""
    if comp is None:
        return "**cannot say**" if bold else "cannot say"
    s = comp.savings[HEADLINE_AXIS]
    v = verdict(s)
    if v is Verdict.NO_INTERVAL:
        return f"{v.value} ({s.seeds} seed{'s' if s.seeds != 1 else ''})"
    return f"**{v.value}**" if bold else v.value


def verdict_line(claim: str, comp: Comparison | None, absent: str, *, target: float) -> str:
    """One computed verdict: yes / no / not shown, decided by the total-cost CI alone, then the other axes."""
    claim = escape(claim)  # a label: "p* beats p* (paper's proxy |A|)"
    if comp is None:
        return f"- {claim}: **cannot say** ({escape(absent)})."
    s = comp.savings[HEADLINE_AXIS]
    rest = "; ".join(f"at {AXIS_WORDS[a]}: {describe(comp.savings[a], a)}" for a in AXES if a != HEADLINE_AXIS)
    g = comp.rounds_gap
    gap = (
        ""
        if g is None
        else (
            f" At equal rounds (round {comp.rounds_at:.0f}) its accuracy differs by {g.value:+.3f} "
            + (
                f"[{g.lo:+.3f}, {g.hi:+.3f}], {'CI excludes zero' if g.excludes_zero else 'within noise'}."
                if g.has_interval
                else f"({no_interval(g.seeds)})."
            )
        )
    )
    return (
        f"- {claim}: {verdict_word(comp)}. To reach {target:.3f}, it needs {describe(s, HEADLINE_AXIS)}; {rest}.{gap}"
    )


def _plateau_state(p: Plateau) -> str:
    """A plateau check's outcome, as the answer paragraph says it."""
    return (
        "**is not learning**"
        if not p.learning
        else "may or may not have plateaued (too few seeds to say)"
        if p.undecided
        else "has plateaued"
        if p.plateaued
        else "**has not** plateaued"
    )


def _section_heading(ev: Evidence) -> str:
    sec = ev.section
    seeds = len(sec.arms[ev.baseline])
    return (
        f"**{escape(sec.task)} / {escape(sec.setting)}** ({seeds} seed{'s' if seeds != 1 else ''}; "
        f"target accuracy {ev.target:.3f}, "
        f"{100 * ev.target_fraction:.0f}% of the lowest seed-mean peak among the methods compared; "
        f"a generated token costs {ev.generation_cost:.2g} PO tokens in the total cost)."
    )


def _effect_sentences(ev: Evidence, base_name: str, cand_name: str) -> list[str]:
    """The candidate's saving on every axis, the saving by effect, and the tuned comparison."""
    sec = ev.section

    def name(key: Key) -> str:
        return escape(sec.name(key))

    out = []
    first = ev.claims[0][1] if ev.claims else None
    if first is not None:
        out.append(
            f"Against {base_name}, {cand_name} needs " + "; ".join(describe(first.savings[a], a) for a in AXES) + "."
        )
    if ev.decomposition:
        out.append(
            f"By effect, in {AXIS_WORDS[HEADLINE_AXIS]}: "
            + "; ".join(
                f"{escape(c.name)} ({name(c.a)} → {name(c.b)}): {describe(c.savings[HEADLINE_AXIS], HEADLINE_AXIS)}"
                for c in ev.decomposition
                if c.effect is not Effect.TUNED_BASELINE
            )
            + "."
        )
    if ev.tuned is not None and ev.best is not None:
        tuned = next((c for c in ev.decomposition if c.effect is Effect.TUNED_BASELINE), None)
        if tuned is not None:
            out.append(
                f"Against {name(ev.tuned)}, its learning rate tuned on validation accuracy, the best cost-aware "
                f"method ({name(ev.best)}) needs {describe(tuned.savings[HEADLINE_AXIS], HEADLINE_AXIS)}."
            )
    else:
        out.append(f"No {base_name} with its learning rate tuned on validation: {escape(ev.tuned_note)}.")
    return out


def answer_paragraph(ev: Evidence, baseline: str | Arm, candidate: str | Arm = "p_star") -> str:
    """The report's first paragraph for one section: what a user gains on each axis, and from which effect."""
    baseline, candidate = as_arm(baseline, "baseline"), as_arm(candidate, "candidate")
    base_name, cand_name = escape(label(baseline)), escape(label(candidate))
    out = [_section_heading(ev)]
    if not ev.informative:
        out.append(
            f"Nothing to compare: the target {ev.target:.3f} is not above the starting accuracy "
            f"{ev.start:.3f}, so every method reaches it at once; these runs are too short or too small "
            "to say anything about the methods."
        )
        if not ev.plateau.learning:  # the likeliest reason, said where a reader starts
            out.append(f"The {base_name} baseline **is not learning** (see the plateau check).")
        return " ".join(out)
    out += _effect_sentences(ev, base_name, cand_name)
    out.append(
        f"The {base_name} baseline {_plateau_state(ev.plateau)}"
        + ("" if ev.tuned_plateau is None else f", at its tuned learning rate {_plateau_state(ev.tuned_plateau)}")
        + " (see the plateau check)."
    )
    return " ".join(out)
