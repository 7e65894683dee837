"""Verdicts across the price of a generated token and across targets, recomputed from the same runs.

Total cost = generated tokens × g + PO tokens. The job fixes g (``generation_cost``, 1/3 by default: decoding
~2N FLOPs a token against a trained token's ~6N); what a user pays depends on the hardware. Every saving
here is :func:`costaware.report.evidence.axis_saving` on the total-cost axis at another g or another
target: the bootstrap, its seed and its resamples are those of the verdicts. At g = 0 the total cost is
the PO tokens; as g grows, total cost / g tends to the generated tokens, and so does the saving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costaware.experiments.records import RunResult
from costaware.report.curves import Estimate
from costaware.report.evidence import Evidence, Key, Section, axis_saving
from costaware.report.verdicts import Verdict, verdict

__all__ = [
    "PRICES",
    "SWEEP",
    "TARGET_FRACTIONS",
    "GPU_RATIO",
    "GPU_SOURCES",
    "price_savings",
    "price_claims",
    "target_claims",
    "measured_ratio",
    "PriceRow",
    "price_name",
    "TargetRow",
]

PRICES = (1 / 3, 1.0, 3.0)  # the table's prices: the FLOP ratio, parity, and generation three times dearer
SWEEP = (0.0, 0.02, 0.05, 0.1, 0.2, 1 / 3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)  # the figure's prices
TARGET_FRACTIONS = (0.90, 0.95, 0.98)
# Generation's share s of an RL step's wall time on GPUs, as published; with every generated token also trained
# on (PO tokens ≈ generated tokens when responses dominate), the price of a generated token is g ≈ s / (1 − s).
GPU_SOURCES = (
    ("RollPacker (Gao et al., 2025, arXiv:2509.21009): the rollout stage takes about 70% of total training time", 0.70),
    ("APRIL (Zhou et al., 2025, arXiv:2509.18521): rollout generation takes more than 90% of total runtime", 0.90),
)
GPU_RATIO = tuple(s / (1 - s) for _, s in GPU_SOURCES)  # ≈ (2.3, 9)


def price_savings(
    sec: Section, a: Key, b: Key, target: float, prices: Sequence[float], *, n_boot: int = 2000, seed: int = 0
) -> list[Estimate]:
    """The total-cost saving of ``b`` over ``a`` to ``target`` at each price ``g`` of a generated token."""
    bad = [g for g in prices if not (np.isfinite(g) and g >= 0)]
    if bad:
        raise ValueError(f"prices must be finite numbers >= 0, got {bad[0]!r}")
    return [axis_saving(sec, a, b, "total_cost", target, float(g), n_boot, seed) for g in prices]


def price_name(g: float) -> str:
    """A price as the tables and ``summary.json`` name it: ``1/3``, ``1``, ``3``."""
    return "1/3" if abs(g - 1 / 3) < 1e-12 else f"{g:g}"


@dataclass(frozen=True)
class PriceRow:
    claim: str
    savings: tuple[Estimate, ...]  # at PRICES
    pair: tuple[Key, Key] | None = None  # the claim's (earlier, later) arms

    @property
    def depends_on_price(self) -> bool:
        """The decided verdicts differ across the prices (a yes at one price, a no or not shown at another)."""
        vs = {verdict(s) for s in self.savings}
        return Verdict.NO_INTERVAL not in vs and len(vs) > 1


def price_claims(
    ev: Evidence, *, prices: Sequence[float] = PRICES, n_boot: int = 2000, seed: int = 0
) -> list[PriceRow]:
    """Every claim of a section that has a comparison, recomputed at each price."""
    if not ev.informative:
        return []
    return [
        PriceRow(
            claim,
            tuple(price_savings(ev.section, c.a, c.b, ev.target, prices, n_boot=n_boot, seed=seed)),
            (c.a, c.b),
        )
        for claim, c, _ in ev.claims
        if c is not None
    ]


@dataclass(frozen=True)
class TargetRow:
    claim: str
    savings: tuple[Estimate | None, ...]  # at TARGET_FRACTIONS; None: that target is not above the start

    @property
    def holds_at(self) -> int:
        return sum(s is not None and verdict(s) is Verdict.YES for s in self.savings)

    @property
    def note(self) -> str:
        if any(s is not None and not s.has_interval for s in self.savings):
            return ""
        if self.holds_at == 1:
            return "holds at only one target"
        if 1 < self.holds_at < len(self.savings):
            return f"holds at {self.holds_at} of {len(self.savings)} targets"
        return ""


def target_claims(
    ev: Evidence, *, fractions: Sequence[float] = TARGET_FRACTIONS, n_boot: int = 2000, seed: int = 0
) -> list[TargetRow]:
    """Every claim of a section at each target: ``fraction`` × the lowest seed-mean peak of the arms compared."""
    if not ev.informative:
        return []
    lowest = min(ev.peaks.values())
    rows = []
    for claim, c, _ in ev.claims:
        if c is None:
            continue
        rows.append(
            TargetRow(
                claim,
                tuple(
                    axis_saving(ev.section, c.a, c.b, "total_cost", f * lowest, ev.generation_cost, n_boot, seed)
                    if f * lowest > ev.start
                    else None
                    for f in fractions
                ),
            )
        )
    return rows


def measured_ratio(runs: Sequence[RunResult]) -> float | None:
    """Seconds per generated token over seconds per PO token, from the runs' own timings (the machine that ran
    them); None when no run recorded its generation time. Summed over runs: a ratio of totals."""
    timed = [
        r
        for r in runs
        if r.generation_seconds
        and r.evals
        and r.evals[-1].generated_tokens
        and r.evals[-1].po_seconds > 0
        and r.evals[-1].po_tokens > 0
    ]
    if not timed:
        return None
    # `or 0.0` only narrows the type: every run in `timed` has generation_seconds
    gen = sum(r.generation_seconds or 0.0 for r in timed) / sum(r.evals[-1].generated_tokens for r in timed)
    po = sum(r.evals[-1].po_seconds for r in timed) / sum(r.evals[-1].po_tokens for r in timed)
    return float(gen / po)
