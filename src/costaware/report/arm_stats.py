"""One arm's numbers in the report's method table: the peak of its seed-mean curve, what it spends to reach the
target on each axis, its AUC and its PO seconds, each with a 95% CI over seeds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware.experiments.records import RunResult
from costaware.report.curves import (
    AXES,
    DEFAULT_GENERATION_COST,
    area_under_curve,
    axis_values,
    bootstrap_ci,
    first_crossings,
    seed_curves,
)
from costaware.report.evidence import Evidence, Key

__all__ = ["ArmStats", "arm_stats", "section_arm_stats", "auc_horizon"]


@dataclass(frozen=True)
class ArmStats:
    """One arm against one target; ``to_target`` and ``to_target_ci`` are by axis (``curves.AXES``)."""

    seeds: int
    peak: float
    peak_ci: tuple[float, float]
    to_target: Mapping[str, float]
    to_target_ci: Mapping[str, tuple[float, float]]
    auc: float
    auc_ci: tuple[float, float]
    po_seconds: float

    def as_dict(self) -> dict[str, Any]:
        """As ``summary.json`` writes it: ``<axis>_to_target`` and ``<axis>_to_target_ci`` keys, CIs as lists."""
        out: dict[str, Any] = {"seeds": self.seeds, "peak": self.peak, "peak_ci": list(self.peak_ci)}
        for axis in AXES:
            out[f"{axis}_to_target"] = self.to_target[axis]
            out[f"{axis}_to_target_ci"] = list(self.to_target_ci[axis])
        return out | {"auc": self.auc, "auc_ci": list(self.auc_ci), "po_seconds": self.po_seconds}


def _quantiles(values: np.ndarray, **kw: Any) -> tuple[float, float]:
    lo, hi = np.quantile(values, [0.025, 0.975], **kw)
    return float(lo), float(hi)


def arm_stats(
    runs: Sequence[RunResult],
    target: float,
    upto: float,
    *,
    generation_cost: float = DEFAULT_GENERATION_COST,
    n_boot: int = 2000,
) -> ArmStats:
    """Peak of the seed-mean curve, x to ``target`` on each axis, AUC over the first ``upto`` PO tokens, PO
    seconds; 95% CIs from one set of seed resamples."""
    picks = np.random.default_rng(0).integers(0, len(runs), size=(n_boot, len(runs)))
    curve = seed_curves(runs, "po_tokens", generation_cost=generation_cost)
    to_target, to_target_ci = {}, {}
    for axis in AXES:
        on_axis = seed_curves(runs, axis, generation_cost=generation_cost)
        crossings = first_crossings(on_axis.grid, on_axis.boot_means(picks), target)
        to_target[axis] = float(first_crossings(on_axis.grid, on_axis.mean, target))
        to_target_ci[axis] = _quantiles(crossings, method="inverted_cdf")
    aucs = [area_under_curve(axis_values(r, "po_tokens"), [e.heldout_accuracy for e in r.evals], upto) for r in runs]
    auc_lo, auc_hi = bootstrap_ci(aucs)
    return ArmStats(
        seeds=len(runs),
        peak=float(curve.mean.max()),
        peak_ci=_quantiles(curve.boot_means(picks).max(1)),
        to_target=to_target,
        to_target_ci=to_target_ci,
        auc=float(np.mean(aucs)),
        auc_ci=(auc_lo, auc_hi),
        po_seconds=float(np.mean([r.evals[-1].po_seconds for r in runs])),
    )


def auc_horizon(ev: Evidence) -> float:
    """The PO tokens an AUC covers: the fewest any baseline run reached."""
    return float(min(r.evals[-1].po_tokens for r in ev.section.arms[ev.baseline]))


def section_arm_stats(ev: Evidence) -> dict[Key, ArmStats]:
    """Every arm of a section, against the section's target, in the section's order of arms."""
    upto = auc_horizon(ev)
    return {
        key: arm_stats(runs, ev.target, upto, generation_cost=ev.generation_cost)
        for key, runs in ev.section.arms.items()
    }
