"""The plateau check: has a seed-mean curve flattened, still rising, or never learnt at all?

A baseline still rising where its budget ran out makes every saving to a target on it a saving to
"as far as the baseline got", not to a plateau; a curve that never rose is no plateau either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costaware.experiments.records import RunResult
from costaware.report.curves import Estimate, seed_curves
from costaware.report.md import escape

__all__ = ["MIN_GAIN", "Plateau", "plateau"]

MIN_GAIN = 0.01  # a seed-mean peak this close to the first evaluation is no learning (1 point of accuracy)


@dataclass(frozen=True)
class Plateau:
    """Has the seed-mean curve flattened? Either criterion suffices; ``rise`` is the last quarter's rise.

    A curve that never rose more than ``min_gain`` above its first evaluation (stuck at 0.000, say)
    is flat because it is **not learning**, which is no plateau: :attr:`learning` tells them apart.
    """

    n_points: int
    peak_index: int
    peak_late: bool
    rise: Estimate
    seeds: int
    start: float  # seed-mean accuracy at the first evaluation
    peak: float  # the seed-mean curve's highest accuracy
    min_gain: float = MIN_GAIN

    @property
    def learning(self) -> bool:
        return bool(self.peak - self.start > self.min_gain)

    @property
    def undecided(self) -> bool:
        """A late peak and too few seeds for an interval on the rise: whether it flattened is not shown."""
        return self.peak_late and not self.rise.has_interval

    @property
    def plateaued(self) -> bool:
        return (not self.peak_late) or not (self.rise.has_interval and self.rise.lo > 0)

    def text(self, name: str) -> str:
        """The plateau line of the report, in Markdown (``name`` is a plain label)."""
        name = escape(name)
        where = f"its peak is at evaluation {self.peak_index + 1} of {self.n_points}" + (
            ", among the last 20%" if self.peak_late else ", before the last 20%"
        )
        ci = (
            f"[{self.rise.lo:+.3f}, {self.rise.hi:+.3f}] ({self.seeds} seeds)"
            if self.rise.has_interval
            else f"({self.seeds} seed{'s' if self.seeds != 1 else ''}: no interval)"
        )
        rise = f"over the last quarter of evaluations it rose by {self.rise.value:+.3f} {ci}"
        if not self.learning:
            return (
                f"Plateau check: **{name} is not learning**: its seed-mean accuracy starts at {self.start:.3f} "
                f"and its peak, {self.peak:.3f}, is no more than {self.min_gain:.3f} above that; a flat curve "
                "that never rose is no plateau, and savings to a target on it say nothing about the methods."
            )
        if self.undecided:
            return f"Plateau check: {name}'s peak is late ({where}); {rise}, so whether it has flattened is not shown."
        if self.plateaued:
            return f"Plateau check: {name}'s seed-mean curve has flattened: {where}; {rise}."
        return (
            f"Plateau check: **{name}'s seed-mean curve has NOT flattened**: {where}, and {rise}, a CI "
            "above zero. Its peak is where its budget ran out, so savings to it say how much sooner a "
            "method gets as far as the baseline did, not that it reaches a higher plateau."
        )


def plateau(
    runs: Sequence[RunResult],
    *,
    late: float = 0.2,
    tail: float = 0.25,
    n_boot: int = 2000,
    seed: int = 0,
    min_gain: float = MIN_GAIN,
) -> Plateau:
    """Plateau check on the PO-token seed-mean curve, at as many points as a run has evaluations.

    The peak is "late" if it is among the last ``late`` share of evaluations; the rise is the
    least-squares slope over the last ``tail`` share times its span, with a bootstrap CI over seeds.
    A peak no more than ``min_gain`` above the first evaluation is "not learning".
    """
    if not (0 < late < 1 and 0 < tail < 1):
        raise ValueError(f"late and tail must be in (0, 1), got {late!r}, {tail!r}")
    if not (math.isfinite(min_gain) and min_gain >= 0):
        raise ValueError(f"min_gain must be a finite number >= 0, got {min_gain!r}")
    k = max(4, min(len(r.evals) for r in runs))
    c = seed_curves(runs, "po_tokens", points=k)
    mean = c.mean
    peak = int(np.argmax(mean))
    n_tail = max(2, math.ceil(tail * k))
    xt = c.grid[-n_tail:]
    span = float(xt[-1] - xt[0])

    def rises(y: np.ndarray) -> np.ndarray:  # (..., k) -> (...)
        yt = y[..., -n_tail:]
        xc = xt - xt.mean()
        denom = float((xc**2).sum()) or 1.0
        return (yt * xc).sum(-1) / denom * span

    picks = np.random.default_rng(seed).integers(0, len(runs), size=(n_boot, len(runs)))
    boot = rises(c.boot_means(picks))
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return Plateau(
        k,
        peak,
        peak >= k - math.ceil(late * k),
        Estimate(float(rises(mean)), float(lo), float(hi), seeds=len(runs)),
        len(runs),
        float(mean[0]),
        float(mean[peak]),
        min_gain,
    )
