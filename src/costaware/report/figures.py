"""The figures of the `costaware reproduce` report: one panel per task and setting, two panels a row.

A page is about 1,000 px wide. One row of every setting's panel made a 2,860 px PNG for four settings,
shown at a third of its size: the legend and the axis text could not be read. Here each panel is
:data:`PANEL_INCHES` wide at :data:`DPI`, at most two a row (so a PNG is at most ~1,100 px wide, shown
near its own size), with its legend under the panel, where it hides no curve, in a font as large as
the tick labels.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from costaware.experiments.arms import Arm
from costaware.experiments.records import RunResult
from costaware.report.curves import MIN_SEEDS_FOR_CI, SeedCurves, seed_curves
from costaware.report.evidence import Evidence, Key
from costaware.report.labels import Style, label, style

__all__ = [
    "AXIS_TITLES",
    "COLUMNS",
    "DPI",
    "PANEL_INCHES",
    "plot_axis",
    "plot_ablations",
    "x_limit",
    "X_STRETCH",
    "figure_grid",
    "load_pyplot",
]

AXIS_TITLES = {
    "total_cost": "total cost (generated tokens × ratio + PO tokens)",
    "po_tokens": "cumulative policy-optimisation tokens",
    "generated_tokens": "cumulative generated tokens",
    "rounds": "generation rounds",
}
COLUMNS = 2  # panels a row
DPI = 100
PANEL_INCHES = (5.6, 4.0)  # one panel's axes area, before its legend
FONT = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
}


def load_pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _tidy(ax) -> None:
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 300k, not 300000: shorter tick labels
    lo, hi = ax.get_ylim()  # accuracy lies in [0, 1]: a curve stuck at 0 got an axis down to -0.04
    lo, hi = max(lo, -0.01), min(hi, 1.01)
    ax.set_ylim(lo, max(hi, lo + 0.1))
    ax.grid(alpha=0.3)


def _legend_under(ax, entries: int) -> None:
    # under the panel, so no curve is hidden; two columns keep long labels on one line each
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncols=2 if entries > 3 else 1, frameon=False)


def figure_grid(n: int, legend_rows: int):
    """A figure of ``n`` panels, at most :data:`COLUMNS` a row, with room under each for its legend."""
    plt = load_pyplot()
    cols = min(COLUMNS, n)
    rows = math.ceil(n / cols)
    w, h = PANEL_INCHES
    height = h + 0.22 * legend_rows  # one legend line is ~0.2 in at 9 pt
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, height * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:  # an odd count leaves the last cell of the grid empty
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def x_limit(ends: Sequence[float]) -> float:
    """Where a panel's x-axis ends: at the longest curve, unless it runs past 1.25 × the median curve's end; then
    there, so one long arm (PODS spends many more rounds) does not squeeze the rest into a corner.

    >>> x_limit([100, 110, 120])
    120.0
    >>> x_limit([100, 110, 400])
    137.5
    """
    ends = [float(e) for e in ends]
    return min(max(ends), X_STRETCH * float(np.median(ends)))


X_STRETCH = 1.25


def plot_axis(
    evs: Sequence[Evidence],
    axis: str,
    path: Path,
    sft: Sequence[RunResult],
    keys: Mapping[tuple[str, str], Sequence[Key]] | None = None,
    *,
    title: str = "held-out accuracy",
) -> list[str]:
    """Seed-mean held-out accuracy against ``axis`` with a 95% band over seeds (none below 3 seeds), one panel per
    section; ``keys``: the arms to draw per (task, setting) (default: all). Returns the labels of the curves cut
    by the axis limit (:func:`x_limit`)."""
    plt = load_pyplot()
    cut: list[str] = []
    with plt.rc_context(FONT):
        drawn = {
            (ev.section.task, ev.section.setting): [
                k
                for k in sorted(ev.section.arms)
                if keys is None or k in keys.get((ev.section.task, ev.section.setting), ())
            ]
            for ev in evs
        }
        legend_rows = max(math.ceil((len(v) + 2) / 2) for v in drawn.values())
        fig, axes = figure_grid(len(evs), legend_rows)
        for ax, ev in zip(axes, evs, strict=True):
            sec = ev.section
            ends = [_plot_arm(ax, ev, key, axis) for key in drawn[(sec.task, sec.setting)]]
            own = [r for r in sft if r.id.task == sec.task]
            if axis == "po_tokens" and own and sec.setting == "grpo":
                c = seed_curves(own, axis, points=64)
                ax.plot(c.grid, c.mean, "k--", lw=1, label=f"{label(Arm('sft'))} (x = SFT tokens, n={len(own)})")
            ax.axhline(ev.target, color="k", lw=0.7, ls=":")
            if ends:
                cut += _cut_at_the_limit(ax, ev, ends)
            ax.set(title=f"{sec.task} / {sec.setting}: {title}", xlabel=AXIS_TITLES[axis], ylabel="accuracy")
            _tidy(ax)
            _legend_under(ax, len(ax.get_legend_handles_labels()[1]))
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    return cut


def _plot_arm(ax, ev: Evidence, key: Key, axis: str) -> tuple[float, str]:
    """One arm's seed-mean curve and its band; returns where the curve ends and its label."""
    sec = ev.section
    runs = sec.arms[key]
    st = style(key[0], key[1] / sec.default_lr)
    c = seed_curves(runs, axis, generation_cost=ev.generation_cost, points=64)
    _plot_mean(ax, c, st, f"{sec.name(key)} (n={len(runs)})")
    if len(runs) >= MIN_SEEDS_FOR_CI:
        picks = np.random.default_rng(0).integers(0, len(runs), size=(500, len(runs)))
        lo, hi = np.quantile(c.boot_means(picks), [0.025, 0.975], axis=0)
        ax.fill_between(c.grid, lo, hi, color=st.colour, alpha=0.15)
    return float(c.grid[-1]), sec.name(key)


def _plot_mean(ax, c: SeedCurves, st: Style, name: str) -> None:
    """One seed-mean curve in its arm's colour, line and marker (a marker every 8th of the 64 points)."""
    ax.plot(c.grid, c.mean, color=st.colour, ls=st.linestyle, marker=st.marker, markevery=8, ms=4, label=name)


def _cut_at_the_limit(ax, ev: Evidence, ends: Sequence[tuple[float, str]]) -> list[str]:
    """Ends the x-axis at :func:`x_limit`, marks the target there; returns the curves the limit cuts."""
    sec = ev.section
    right = x_limit([e for e, _ in ends])
    ax.set_xlim(0, right)
    ax.annotate(
        f"target {ev.target:.3f}",
        (right, ev.target),
        xytext=(-3, 3),
        textcoords="offset points",
        ha="right",
        va="bottom",
        fontsize=8,
    )
    return [f"{sec.task}/{sec.setting}: {n}" for e, n in ends if e > right]


def plot_ablations(runs: Sequence[RunResult], path: Path) -> None:
    """Seed-mean held-out accuracy against PO tokens of each ablation arm, in one panel."""
    plt = load_pyplot()
    by: dict[tuple[str, str, Arm], list[RunResult]] = defaultdict(list)
    for r in runs:
        by[(r.id.task, r.id.setting, r.id.arm)].append(r)
    names = {k: f"{k[0]}/{k[1]}: {label(k[2])}" for k in by}
    with plt.rc_context(FONT):
        fig, (ax,) = figure_grid(1, math.ceil(len(by) / 2))
        for k in sorted(by, key=lambda k: (names[k], k)):  # in the legend, by name
            c = seed_curves(by[k], "po_tokens", points=64)
            _plot_mean(ax, c, style(k[2]), f"{names[k]} (n={len(by[k])})")
        ax.set(
            title="Ablations (proxy noise, G ≡ 1, α, tokens/step)", xlabel=AXIS_TITLES["po_tokens"], ylabel="accuracy"
        )
        _tidy(ax)
        _legend_under(ax, len(by))
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
