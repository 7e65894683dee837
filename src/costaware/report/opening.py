"""The report's opening: one table of the headline claims (claim | total-cost saving | verdict), then a few
plain sentences generated from the same comparisons.

Every cell and sentence here reads a :class:`~costaware.report.evidence.Comparison` that the verdict list
also reads (``Evidence.claims``), through the one rule (``report.verdicts``): the opening and the verdicts
cannot disagree. A prompt-stage section's row is its target's verdict (``rollout.TargetVerdict``), the very
object the sentence under the table and the section's own target list read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from costaware.experiments.arms import Arm
from costaware.report.evidence import HEADLINE_AXIS, Comparison, Evidence, Key
from costaware.report.evidence_text import verdict_word
from costaware.report.md import escape, table
from costaware.report.rollout import TARGET_WORDS, TargetVerdict
from costaware.report.verdicts import Verdict, fmt, no_interval, verdict

__all__ = ["Row", "rows", "opening_table", "target_sentence", "sentences"]


@dataclass(frozen=True)
class Row:
    """A claim and its comparison; a prompt-stage section's row holds its ``target`` verdict instead of a claim's,
    with the candidate's saving over GRPO as its comparison."""

    section: tuple[str, str]
    claim: str
    comparison: Comparison | None
    absent: str
    target: TargetVerdict | None = None

    @property
    def verdict(self) -> str | None:
        """The verdict cell's words (None: there is no comparison to judge)."""
        if self.target is not None:
            return "met" if self.target.met else "not met"
        return None if self.comparison is None else verdict(self.comparison.savings[HEADLINE_AXIS]).value


def _target_rows(ev: Evidence, targets: Sequence[TargetVerdict]) -> list[Row]:
    sec = ev.section
    return [
        Row(
            (sec.task, sec.setting),
            f"{sec.task} / {sec.setting}: {sec.name(t.candidate)} meets the prompt-stage target",
            t.vs_baseline,
            "; ".join(t.shortfalls) if t.vs_baseline is None else "",
            t,
        )
        for t in targets
    ]


def rows(
    evs: Sequence[Evidence], targets: Mapping[tuple[str, str], Sequence[TargetVerdict]] | None = None
) -> list[Row]:
    """The first section's claims, then each prompt-stage section's target verdicts (``targets``, by section) and
    each other section's first claim (its candidate against GRPO)."""
    out: list[Row] = []
    for i, ev in enumerate(evs):
        sid = (ev.section.task, ev.section.setting)
        if targets and sid in targets:
            out += _target_rows(ev, targets[sid])
            continue
        claims = ev.claims if i == 0 else ev.claims[:1]
        out += [Row(sid, claim if i == 0 else f"{sid[0]} / {sid[1]}: {claim}", c, why) for claim, c, why in claims]
    return out


def _verdict_cell(r: Row) -> str:
    if r.target is None and r.comparison is not None:
        return verdict_word(r.comparison, bold=False)  # with the seeds where there is no interval
    return r.verdict or f"cannot say ({r.absent})"


def opening_table(rs: Sequence[Row]) -> list[str]:
    cells = [
        [r.claim, "–" if r.comparison is None else fmt(r.comparison.savings[HEADLINE_AXIS]), _verdict_cell(r)]
        for r in rs
    ]
    return table(["claim", "total-cost saving [95% CI]", "verdict"], cells)


def target_sentence(rs: Sequence[Row], name: Callable[[Key], str]) -> str:
    """The prompt-stage target's verdict for each candidate, from the opening rows' own target verdicts."""
    said = "; ".join(f"{escape(name(r.target.candidate))}: **{r.verdict}**" for r in rs if r.target is not None)
    return f"{TARGET_WORDS[0].upper()}{TARGET_WORDS[1:]}: {said} (its section says why)."


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
    if ev.tuned is not None and ev.tuned == base:
        out.append(
            f"Validation accuracy chose {bn}'s default learning rate ({lr:g}) among those run, so the comparison "
            f"with {bn} above already uses its learning rate tuned on validation."
        )
    if target_text:
        out.append(target_text)
    return " ".join(out)
