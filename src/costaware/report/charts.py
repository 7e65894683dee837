"""The summary figures: cost to target per arm, the decomposition as a waterfall, the saving across prices.

One panel per section, at most two a row (``report.figures``); each arm in its fixed style (``labels.style``).
Intervals are drawn only where there are enough seeds for one (``curves.MIN_SEEDS_FOR_CI``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from costaware.report.arm_stats import ArmStats
from costaware.report.curves import DEFAULT_GENERATION_COST, MIN_SEEDS_FOR_CI, Estimate
from costaware.report.evidence import Comparison, Effect, Evidence, Key
from costaware.report.figures import DPI, FONT, figure_grid, load_pyplot
from costaware.report.labels import style
from costaware.report.verdicts import fmt

__all__ = ["plot_cost_to_target", "plot_waterfall", "plot_price_sweep"]

Sid = tuple[str, str]


def _sid(ev: Evidence) -> Sid:
    return ev.section.task, ev.section.setting


def plot_cost_to_target(
    evs: Sequence[Evidence],
    stats: Mapping[Sid, Mapping[Key, ArmStats]],
    keys: Mapping[Sid, Sequence[Key]],
    path: Path,
) -> None:
    """Dot and whisker: each arm's total cost to the section's target (seed-mean curve), 95% CI over seeds."""
    plt = load_pyplot()
    with plt.rc_context(FONT):
        n = max(len(keys[_sid(ev)]) for ev in evs)
        cols = min(2, len(evs))
        rows = math.ceil(len(evs) / cols)
        fig, grid = plt.subplots(
            rows, cols, figsize=(5.6 * cols, (1.3 + 0.4 * n) * rows), squeeze=False, layout="constrained"
        )
        for ax in grid.flat[len(evs) :]:
            ax.set_visible(False)
        axes = list(grid.flat[: len(evs)])
        for ax, ev in zip(axes, evs, strict=True):
            sec, st = ev.section, stats[_sid(ev)]
            order = list(keys[_sid(ev)])[::-1]  # the first key on top
            finite = [st[k].to_target["total_cost"] for k in order if np.isfinite(st[k].to_target["total_cost"])]
            right = 1.15 * max(
                finite + [hi for k in order for hi in st[k].to_target_ci["total_cost"][1:] if np.isfinite(hi)] + [1.0]
            )
            for y, k in enumerate(order):
                s, v = style(k[0], k[1] / sec.default_lr), st[k].to_target["total_cost"]
                lo, hi = st[k].to_target_ci["total_cost"]
                if not np.isfinite(v):
                    ax.annotate("not reached", (right, y), ha="right", va="center", fontsize=8, color=s.colour)
                    continue
                if st[k].seeds >= MIN_SEEDS_FOR_CI:
                    ax.plot([lo, min(hi, right)], [y, y], color=s.colour, lw=2)
                ax.plot([v], [y], marker=s.marker, color=s.colour, ms=8, ls="none")
            ax.set_yticks(range(len(order)), [f"{sec.name(k)} (n={st[k].seeds})" for k in order])
            if st.get(ev.baseline) and np.isfinite(st[ev.baseline].to_target["total_cost"]):
                ax.axvline(st[ev.baseline].to_target["total_cost"], color="k", lw=0.7, ls=":")
            ax.set_xlim(0, right)
            ax.set_ylim(-0.6, len(order) - 0.4)
            ax.set(
                title=f"{sec.task} / {sec.setting}: cost to accuracy {ev.target:.3f}",
                xlabel="total cost to the target (lower is better)",
            )
            _eng(ax)
            ax.grid(alpha=0.3, axis="x")
        fig.savefig(path, dpi=DPI)
        plt.close(fig)


def _eng(ax) -> None:
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(sep=""))


def waterfall_steps(ev: Evidence) -> tuple[Comparison, Comparison] | None:
    """GRPO → nonzero and nonzero → p* (the section's own steps), when both were computed."""
    by = {c.effect: c for c in ev.decomposition}
    first, second = by.get(Effect.RENORMALISATION), by.get(Effect.MATCHED_STEP)
    return None if first is None or second is None else (first, second)


def plot_waterfall(evs: Sequence[Evidence], stats: Mapping[Sid, Mapping[Key, ArmStats]], path: Path) -> bool:
    """The decomposition as a waterfall: GRPO's total cost to the target, the change from dropping the
    zero-advantage rows, the change from cost-aware sampling, p*'s cost. False (nothing drawn) when no
    section has both steps."""
    drawn = [
        (ev, steps)
        for ev in evs
        if (steps := waterfall_steps(ev)) is not None
        and all(np.isfinite(stats[_sid(ev)][k].to_target["total_cost"]) for k in (steps[0].a, steps[0].b, steps[1].b))
    ]
    if not drawn:
        return False
    plt = load_pyplot()
    with plt.rc_context(FONT):
        fig, axes = figure_grid(len(drawn), 0)
        for ax, (ev, (first, second)) in zip(axes, drawn, strict=True):
            sec, st = ev.section, stats[_sid(ev)]
            a, b, c = (st[k].to_target["total_cost"] for k in (first.a, first.b, second.b))
            names = [sec.name(first.a), "drop zero-\nadvantage rows", "cost-aware\nsampling", sec.name(second.b)]
            ax.bar(0, a, color=style(first.a[0]).colour, alpha=0.8)
            for x, (frm, to, comp) in enumerate(((a, b, first), (b, c, second)), start=1):
                good = to <= frm
                ax.bar(x, to - frm, bottom=frm, color="#2CA02C" if good else "#D62728", alpha=0.8)
                text = fmt(comp.savings["total_cost"]).replace(" [", "\n[").replace(" (", "\n(")
                ax.annotate(
                    text,
                    (x, max(frm, to)),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
                ax.plot([x - 1.4, x + 0.4], [frm, frm], color="k", lw=0.6, ls=":")
            ax.bar(3, c, color=style(second.b[0]).colour, alpha=0.8)
            ax.set_xticks(range(4), names, fontsize=8)
            ax.set(
                title=f"{sec.task} / {sec.setting}: total cost to accuracy {ev.target:.3f}, by effect",
                ylabel="total cost to the target",
            )
            from matplotlib.ticker import EngFormatter

            ax.yaxis.set_major_formatter(EngFormatter(sep=""))
            ax.set_ylim(0, 1.25 * max(a, b, c))
            ax.grid(alpha=0.3, axis="y")
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    return True


def plot_price_sweep(
    panels: Sequence[tuple[Evidence, Mapping[Key, Sequence[Estimate]]]],
    prices: Sequence[float],
    path: Path,
    *,
    cpu_ratio: float | None,
    gpu_range: tuple[float, float],
) -> None:
    """Each arm's total-cost saving over the baseline against the price ``g`` of a generated token (symlog: linear
    below 0.1, so g = 0 is on the axis), 95% bands; marks the FLOP ratio 1/3, this machine's measured ratio (CPU)
    and the range of published GPU timings."""
    plt = load_pyplot()
    g = np.asarray(prices, float)
    with plt.rc_context(FONT):
        legend_rows = max(math.ceil((len(c) + 3) / 2) for _, c in panels)
        fig, axes = figure_grid(len(panels), legend_rows)
        for ax, (ev, curves) in zip(axes, panels, strict=True):
            sec = ev.section
            ax.axvspan(
                *gpu_range,
                color="#999999",
                alpha=0.15,
                label=f"GPU, published timings ({gpu_range[0]:.1f}–{gpu_range[1]:.0f})",
            )
            ax.axvline(DEFAULT_GENERATION_COST, color="k", lw=0.8, ls="--", label="FLOP ratio 1/3")
            if cpu_ratio is not None:
                ax.axvline(cpu_ratio, color="k", lw=0.8, ls="-.", label=f"measured here, CPU ({cpu_ratio:.2f})")
            ax.axhline(0, color="k", lw=0.6)
            for key, ests in curves.items():
                s = style(key[0], key[1] / sec.default_lr)
                v = np.clip([e.value for e in ests], -1, 1)
                ax.plot(
                    g,
                    100 * v,
                    color=s.colour,
                    ls=s.linestyle,
                    marker=s.marker,
                    ms=4,
                    label=f"{sec.name(key)} (n={len(sec.arms[key])})",
                )
                if all(e.has_interval for e in ests):
                    lo, hi = (np.clip([getattr(e, b) for e in ests], -1, 1) for b in ("lo", "hi"))
                    ax.fill_between(g, 100 * lo, 100 * hi, color=s.colour, alpha=0.15)
            ax.set_xscale("symlog", linthresh=0.1, linscale=0.5)
            ax.set_xlim(0, max(prices))
            ax.set_xticks([0, 0.1, 1 / 3, 1, 3, 10], ["0", "0.1", "1/3", "1", "3", "10"])
            ax.set(
                title=f"{sec.task} / {sec.setting}: saving over {sec.name(ev.baseline)} by price",
                xlabel="price of a generated token g, in PO tokens (symlog; linear below 0.1)",
                ylabel=f"total-cost saving to {ev.target:.3f} (%)",
            )
            ax.set_ylim(max(-102, ax.get_ylim()[0]), min(102, ax.get_ylim()[1]))
            ax.grid(alpha=0.3)
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncols=2, frameon=False)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
