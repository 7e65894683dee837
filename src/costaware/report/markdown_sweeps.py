"""The Markdown of the verdicts at other prices of a generated token and at other targets (``report.sweeps``)."""

from __future__ import annotations

from collections.abc import Sequence

from costaware.report.claims import ReportClaims, SectionClaims
from costaware.report.curves import Estimate
from costaware.report.md import Md, escape, table
from costaware.report.sweeps import GPU_RATIO, GPU_SOURCES, PRICES, TARGET_FRACTIONS, price_name
from costaware.report.verdicts import fmt, no_interval, pct, verdict

__all__ = ["price_markdown", "target_markdown"]


def _cell(s: Estimate | None, points: bool) -> Md:
    """A saving and its verdict; only the point where the whole table has no intervals (said above it)."""
    if s is None:
        return Md("– (not above the start)")
    return Md(escape(pct(s.value))) if points else Md(escape(f"{fmt(s)}, {verdict(s).value}"))


def _points_only(ests: Sequence[Estimate | None]) -> str:
    """The line above a table whose savings all lack an interval, else ''."""
    seeds = {e.seeds for e in ests if e is not None}
    if not seeds or any(e is not None and e.has_interval for e in ests):
        return ""
    return f"Point estimates ({no_interval(min(s for s in seeds if s is not None))}; no verdict)."


def _price_intro(measured_ratio: float | None) -> str:
    return (
        "Total cost = generated tokens × g + PO tokens, recomputed from the same runs at each price g with the "
        "same paired bootstrap as the verdicts. At g = 0 it is the PO-token saving; as g grows it tends to the "
        "generated-token saving. g = 1/3 is the FLOP ratio (compute-bound decoding)"
        + (
            f"; on the machine that ran these runs (a CPU), generation took {measured_ratio:.2f}× the seconds per "
            "token of policy optimisation (training generation seconds per generated token over PO seconds per PO "
            "token, from the runs' own timings)"
            if measured_ratio is not None
            else ""
        )
        + ". On GPUs decoding is memory-bound: published timings put generation at "
        + " and ".join(f"{100 * share:.0f}%" for _, share in GPU_SOURCES)
        + " of an RL step's wall time ("
        + "; ".join(src for src, _ in GPU_SOURCES)
        + "). When every generated "
        "token is also trained on, and responses make most of the PO tokens, a share s gives g ≈ s/(1 − s): "
        f"about {min(GPU_RATIO):.1f} to {max(GPU_RATIO):.0f}, the shaded band of the figure. The figure "
        "draws a saving below −100% (more than twice the cost, or never reaching the target) at −100%."
    )


def _price_table(section: SectionClaims) -> list[str]:
    rows = section.price_rows
    if not rows:
        return []
    sec = section.evidence.section
    points = _points_only([s for r in rows for s in r.savings])
    lines = [f"### {escape(sec.task)} / {escape(sec.setting)}", ""] + ([points, ""] if points else [])
    lines += table(
        ["claim", *(f"g = {price_name(g)}" for g in PRICES), "note"],
        [
            [
                r.claim,
                *(_cell(s, bool(points)) for s in r.savings),
                "the verdict depends on the price" if r.depends_on_price else "",
            ]
            for r in rows
        ],
    )
    return lines + [""]


def price_markdown(claims: ReportClaims, *, with_figure: bool) -> list[str]:
    """The section of the verdicts at other prices; ``with_figure``: the price sweep was drawn."""
    lines = ["## Verdicts at other prices of a generated token", "", _price_intro(claims.measured_price_ratio), ""]
    if with_figure:
        lines += ["![total-cost saving over GRPO against the price of a generated token](price_sweep.png)", ""]
    for section in claims.sections:
        lines += _price_table(section)
    return lines


def _target_table(section: SectionClaims) -> list[str]:
    rows = section.target_rows
    if not rows:
        return []
    ev = section.evidence
    sec = ev.section
    lowest = min(ev.peaks.values())
    points = _points_only([s for r in rows for s in r.savings])
    lines = [f"### {escape(sec.task)} / {escape(sec.setting)} (lowest seed-mean peak {lowest:.3f})", ""]
    lines += [points, ""] if points else []
    lines += table(
        ["claim", *(f"{100 * f:.0f}%: {f * lowest:.3f}" for f in TARGET_FRACTIONS), "note"],
        [[r.claim, *(_cell(s, bool(points)) for s in r.savings), r.note] for r in rows],
    )
    return lines + [""]


def target_markdown(claims: ReportClaims) -> list[str]:
    """The section of the verdicts at other targets."""
    lines = [
        "## Verdicts at other targets",
        "",
        "The same claims at 90%, 95% and 98% of the lowest seed-mean peak (at the job's price); a saving that "
        "holds at only one target says so.",
        "",
    ]
    for section in claims.sections:
        lines += _target_table(section)
    return lines
