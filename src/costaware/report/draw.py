"""The report's second stage: every figure, drawn from the computed claims into the report's folder.

The accuracy curves of the key arms on each axis and of every arm (``report.figures``), the cost to the target
per arm, the decomposition as a waterfall and the saving across prices (``report.charts``), and the ablations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from costaware.experiments.records import RunResult
from costaware.report.charts import plot_cost_to_target, plot_price_sweep, plot_waterfall
from costaware.report.claims import ReportClaims
from costaware.report.curves import AXES
from costaware.report.figures import plot_ablations, plot_axis
from costaware.report.run_tables import Ablations
from costaware.report.sweeps import GPU_RATIO, SWEEP

__all__ = ["FIGURES", "ReportFigures", "draw_figures"]

FIGURES = {axis: f"accuracy_vs_{axis}.png" for axis in AXES}  # total_cost, po_tokens, generated_tokens, rounds
ALL_ARMS, COST_TO_TARGET, WATERFALL, PRICE_SWEEP, ABLATIONS = (
    "accuracy_all_arms.png",
    "cost_to_target.png",
    "waterfall.png",
    "price_sweep.png",
    "ablations.png",
)


@dataclass(frozen=True)
class ReportFigures:
    """The files drawn, by name (an axis, ``all_arms``, ``cost_to_target``, ``waterfall``, ``price_sweep``,
    ``ablations``; a figure with nothing to draw is absent), and per axis the key-arm curves its x-axis cuts."""

    paths: Mapping[str, Path]
    cut: Mapping[str, Sequence[str]]


def draw_figures(
    claims: ReportClaims, results: Sequence[RunResult], ablations: Ablations | None, out: Path
) -> ReportFigures:
    evs = claims.evidences
    stats = {s.id: s.arm_stats for s in claims.sections}
    keys = {s.id: s.key_arms for s in claims.sections}
    sft_runs = [r for r in results if r.id.method == "sft"]
    paths = {axis: out / name for axis, name in FIGURES.items()}
    cut = {axis: plot_axis(evs, axis, path, sft_runs, keys) for axis, path in paths.items()}
    paths["all_arms"] = out / ALL_ARMS
    plot_axis(evs, "total_cost", paths["all_arms"], sft_runs, title="every arm")
    paths["cost_to_target"] = out / COST_TO_TARGET
    plot_cost_to_target(evs, stats, keys, paths["cost_to_target"])
    if plot_waterfall(evs, stats, out / WATERFALL):
        paths["waterfall"] = out / WATERFALL
    sweep = [(s.evidence, s.price_sweep) for s in claims.sections if s.price_sweep is not None]
    if sweep:
        paths["price_sweep"] = out / PRICE_SWEEP
        ratio = claims.measured_price_ratio
        plot_price_sweep(
            sweep, SWEEP, paths["price_sweep"], cpu_ratio=ratio, gpu_range=(min(GPU_RATIO), max(GPU_RATIO))
        )
    if ablations is not None:
        paths["ablations"] = out / ABLATIONS
        plot_ablations(list(ablations.runs), paths["ablations"])
    return ReportFigures(paths, cut)
