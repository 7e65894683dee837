"""The one verdict rule and the one way an estimate is written: every table and sentence of the report uses these.

A claim is decided by its total-cost saving's 95% CI (a paired bootstrap over seeds): **yes** when the CI
lies above zero, **no, it is worse** when below, **not shown** when it straddles zero. With fewer than
:data:`~costaware.report.curves.MIN_SEEDS_FOR_CI` seeds there is no interval, so no verdict: the
estimate is printed as a point and says so.
"""

from __future__ import annotations

import enum
import math

from costaware.report.curves import MIN_SEEDS_FOR_CI, Estimate

__all__ = ["Verdict", "verdict", "pct", "fmt", "no_interval", "RULE"]

RULE = (
    f"**Verdict rule.** A claim is **yes** only when the 95% CI of its total-cost saving (a bootstrap over "
    f"seeds, paired when both arms ran the same seeds) lies above zero, **no, it is worse** when it lies below, "
    f"and **not shown** when it contains zero. With fewer than {MIN_SEEDS_FOR_CI} seeds there is no interval "
    "and no verdict: the saving is a point estimate."
)


class Verdict(enum.Enum):
    YES = "yes"
    NO = "no, it is worse"
    NOT_SHOWN = "not shown"
    NO_INTERVAL = "no verdict"  # too few seeds for an interval

    @property
    def decided(self) -> bool:
        return self in (Verdict.YES, Verdict.NO)


def verdict(est: Estimate) -> Verdict:
    """The verdict of a total-cost saving (see the module doc)."""
    if not est.has_interval:
        return Verdict.NO_INTERVAL
    return Verdict.YES if est.lo > 0 else Verdict.NO if est.hi < 0 else Verdict.NOT_SHOWN


def pct(v: float) -> str:
    """A saving as a signed percentage; 'never reached' when the later arm never reaches the target."""
    if math.isnan(v):
        return "undefined"
    if math.isinf(v):
        return "never reached" if v < 0 else "+100%"
    r = round(100 * v)
    return f"{r:+d}%" if r else "0%"  # never "-0%"


def no_interval(seeds: int | None) -> str:
    return f"{seeds} seed{'s' if seeds != 1 else ''}: no interval"


def fmt(est: Estimate) -> str:
    """``+30% [+12%, +45%]``, or ``+30% (1 seed: no interval)`` below the seeds an interval needs.

    >>> fmt(Estimate(0.3, 0.12, 0.45, seeds=5))
    '+30% [+12%, +45%]'
    >>> fmt(Estimate(0.3, 0.3, 0.3, seeds=1))
    '+30% (1 seed: no interval)'
    """
    if not est.has_interval:
        return f"{pct(est.value)} ({no_interval(est.seeds)})"
    return f"{pct(est.value)} [{pct(est.lo)}, {pct(est.hi)}]"
