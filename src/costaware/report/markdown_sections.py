"""The Markdown of one section: its method table, its decomposition by effect, its verdict list and plateau
check, then its prompt-stage part (``report.rollout``) or the row level's prediction (``report.predicted``).

Every number is read from the section's :class:`~costaware.report.claims.SectionClaims`; nothing is computed here.
"""

from __future__ import annotations

import numpy as np

from costaware.experiments.arms import Arm
from costaware.report.arm_stats import ArmStats, auc_horizon
from costaware.report.claims import SectionClaims
from costaware.report.curves import AXES, MIN_SEEDS_FOR_CI
from costaware.report.evidence import Effect, Evidence, Section
from costaware.report.evidence_text import AXIS_WORDS, verdict_line
from costaware.report.labels import label
from costaware.report.md import code, escape, table
from costaware.report.predicted import row_level_line
from costaware.report.rollout import section_lines as rollout_section_lines
from costaware.report.verdicts import fmt, no_interval

__all__ = ["section_markdown", "arm_cells", "peak_cell", "auc_cell", "to_target_cell"]


def _amount(value: float, axis: str) -> str:
    if not np.isfinite(value):
        return "not reached"
    return f"{value:.0f}" if axis == "rounds" else f"{value / 1e3:.1f}k"


def _interval(stats: ArmStats, value: str, lo: str, hi: str) -> str:
    """``value [lo, hi]``, or ``value`` alone where the arm has too few seeds for an interval."""
    return f"{value} [{lo}, {hi}]" if stats.seeds >= MIN_SEEDS_FOR_CI else value


def to_target_cell(stats: ArmStats, axis: str) -> str:
    lo, hi = stats.to_target_ci[axis]
    return _interval(stats, _amount(stats.to_target[axis], axis), _amount(lo, axis), _amount(hi, axis))


def peak_cell(stats: ArmStats) -> str:
    return _interval(stats, f"{stats.peak:.3f}", f"{stats.peak_ci[0]:.3f}", f"{stats.peak_ci[1]:.3f}")


def auc_cell(stats: ArmStats) -> str:
    return _interval(stats, f"{stats.auc:.3f}", f"{stats.auc_ci[0]:.3f}", f"{stats.auc_ci[1]:.3f}")


def arm_cells(name: str, stats: ArmStats) -> list[str]:
    """A method-table row: name, seeds, peak, x to target on every axis, AUC, PO seconds."""
    cells = [name, str(stats.seeds), peak_cell(stats)]
    return cells + [to_target_cell(stats, axis) for axis in AXES] + [auc_cell(stats), f"{stats.po_seconds:.1f}"]


def _proxy_sentence(sec: Section) -> str:
    """Which gradient-norm proxy 'p*' used here: 'auto' resolves by the section's loss (grpo.config)."""
    from costaware.grpo.config import resolve_proxy

    losses = {
        r.id.loss_type for runs in sec.arms.values() for r in runs if r.id.method == "p_star" and r.id.proxy == "auto"
    }
    if len(losses) != 1:
        return ""
    loss = losses.pop()
    proxy, beta = resolve_proxy("auto", None, loss_type=loss, method="p_star")
    what = (
        "the paper's |A|"
        if proxy == "advantage"
        else f"{proxy} (β fitted online from the prior {beta:g}; this loss sums token losses)"
    )
    return f" Under loss {code(loss)}, {escape(label(Arm('p_star')))} uses proxy 'auto' = {escape(what)}."


def _method_table(section: SectionClaims, baseline: Arm) -> list[str]:
    ev = section.evidence
    sec = ev.section
    controlled = all(r.po_seconds_controlled for runs in sec.arms.values() for r in runs)
    clock = "PO wall s (controlled)" if controlled else "PO wall s (contended)"
    lines = [
        f"## {escape(sec.task)} / {escape(sec.setting)}",
        "",
        f"Common target: **{ev.target:.3f}** ({100 * ev.target_fraction:.0f}% of the lowest seed-mean peak "
        f"among the methods compared). AUC is the mean accuracy over the first {auc_horizon(ev) / 1e3:.1f}k PO "
        f"tokens. Total cost = generated tokens × {ev.generation_cost:.3g} + PO tokens." + _proxy_sentence(sec),
        "",
    ]
    order = sorted(sec.arms, key=lambda k: (k[0] != baseline, k[0], k[1]))
    lines += table(
        ["method", "seeds", "peak [95% CI]", *(f"{AXIS_WORDS[a]} to target" for a in AXES), "AUC", clock],
        [arm_cells(sec.name(k), section.arm_stats[k]) for k in order],
    )
    if not controlled:
        # true on any machine: with --jobs 1 no other run shares the CPU, but nothing controlled it either
        lines += [
            "",
            "The PO wall-clock column was not measured under control (contended: other runs of the job "
            "or other processes may have shared the CPU): it is not a measurement of the time saved; "
            "`benchmarks/` holds the controlled one.",
        ]
    return lines


def _decomposition_rows(ev: Evidence) -> list[list[str]]:
    sec = ev.section
    rows = []
    for c in ev.decomposition:
        cells = [fmt(c.savings[a]) for a in AXES]
        g = c.rounds_gap
        cells.append(
            "–"
            if g is None
            else (
                f"{g.value:+.3f} [{g.lo:+.3f}, {g.hi:+.3f}]"
                if g.has_interval
                else f"{g.value:+.3f} ({no_interval(g.seeds)})"
            )
            + f" at round {c.rounds_at:.0f}"
        )
        rows.append([f"{c.name}: {sec.name(c.a)} → {sec.name(c.b)}", *cells])
    if not ev.decomposition:
        why = (
            "the target is not above the starting accuracy"
            if not ev.informative
            else "no pair of the decomposition was run"
        )
        rows.append([f"(not computed: {why})", *["–"] * (len(AXES) + 1)])
    return rows


def _decomposition(ev: Evidence) -> list[str]:
    sec = ev.section
    lines = ["", "### Decomposition: saving to the common target, by effect", ""]
    lines += table(
        ["step", *(f"{AXIS_WORDS[a]} [95% CI]" for a in AXES), "Δ accuracy at equal rounds [95% CI]"],
        _decomposition_rows(ev),
    )
    return lines + [
        "",
        "Saving = 1 − x(later)/x(earlier) to reach the target on each method's seed-mean curve; positive "
        "means the later method needs less. Δ accuracy at equal rounds is the later method's seed-mean "
        "accuracy minus the earlier one's at the last generation round both reached: the comparison at "
        "equal rollouts. CIs resample the seeds (paired when both ran the same seeds). "
        f"{escape(label(ev.baseline[0]))}, learning rate tuned on validation: "
        f"{escape(sec.name(ev.tuned)) if ev.tuned else 'none'} ({escape(ev.tuned_note)}). "
        f"Best cost-aware method: {escape(sec.name(ev.best)) if ev.best else 'none'}"
        + (f" ({escape(ev.best_note)})." if ev.best_note else "."),
        "",
    ]


def _verdicts(ev: Evidence, baseline: Arm) -> list[str]:
    lines = ["### Verdicts", ""]
    lines += [verdict_line(claim, comp, why, target=ev.target) for claim, comp, why in ev.claims]
    lines += ["", "(Verdicts by the rule at the top.)", "", ev.plateau.text(label(baseline)), ""]
    if ev.tuned_plateau is not None and ev.tuned is not None:
        lines += [ev.tuned_plateau.text(ev.section.name(ev.tuned)), ""]
    return lines


def section_markdown(section: SectionClaims, baseline: Arm) -> list[str]:
    """The lines of one section (see the module doc)."""
    ev = section.evidence
    lines = _method_table(section, baseline) + _decomposition(ev) + _verdicts(ev, baseline)
    if section.rollout is not None and section.predictions is not None:
        lines += rollout_section_lines(section.rollout, section.predictions)
    elif section.predictions is not None:  # the headline: the row level's prediction of p*'s edge over nonzero
        matched = next((c for c in ev.decomposition if c.effect is Effect.MATCHED_STEP), None)
        lines += [row_level_line(section.predictions, matched, ev.section), ""]
    return lines
