"""How a pool of rollouts becomes policy-optimisation mini-batches: :class:`SamplingConfig` and the
one registry of sampling methods, each under one name.

The registry maps a method name to what it is:

* a *drawing* method draws rows i.i.d. from a distribution p (built from the proxy |A| and the
  costs) with replacement and applies importance weights: ``p_star`` (the paper's p ∝ |A|/√c),
  ``p_smooth``, ``inv_sqrt_cost``, ``variance``, ``uniform``;
* a *subset* method runs a subset of the pool once, unweighted: ``nonzero``, ``pods``;
* ``none`` is plain GRPO (every row once, shuffled).

>>> sorted(DISTRIBUTIONS)
['inv_sqrt_cost', 'p_smooth', 'p_star', 'uniform', 'variance']
>>> SamplingConfig("p_smooth", alpha=0.1).full_support
True
>>> SamplingConfig("p_star").full_support   # rows with A = 0 get p = 0
False
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from costaware import distributions as dist

__all__ = [
    "METHODS",
    "DISTRIBUTIONS",
    "DRAWING",
    "SUBSET",
    "FULL_SUPPORT",
    "SamplingConfig",
    "plan_seed",
]


def _p_star(g: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    return dist.optimal(g, c)


def _p_smooth(g: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    return dist.smoothed(dist.optimal(g, c), alpha)


def _inv_sqrt_cost(g: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    return dist.inverse_sqrt_cost(c)


def _variance(g: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    return dist.variance(g)


def _uniform(g: np.ndarray, c: np.ndarray, alpha: float) -> np.ndarray:
    return dist.uniform(g.size)


# name -> p(proxy G, costs c, alpha); the only place a method name is mapped to a distribution.
DISTRIBUTIONS: dict[str, Callable[[np.ndarray, np.ndarray, float], np.ndarray]] = {
    "p_star": _p_star,
    "p_smooth": _p_smooth,
    "inv_sqrt_cost": _inv_sqrt_cost,
    "variance": _variance,
    "uniform": _uniform,
}
DRAWING = tuple(DISTRIBUTIONS)
SUBSET = ("nonzero", "pods")
METHODS = ("none", "p_star", "p_smooth", "inv_sqrt_cost", "variance", "uniform", "nonzero", "pods")
# Methods under which every row of the pool can reach the loss (needed for a KL term on A = 0 rows).
FULL_SUPPORT = ("none", "inv_sqrt_cost", "uniform")


def _real(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class SamplingConfig:
    """How a pool of rollouts is turned into policy-optimisation mini-batches.

    Attributes:
        method: one of :data:`METHODS`. ``none`` is plain GRPO; ``p_star`` the paper's method.
        alpha: ``p_smooth`` mixing weight, (1−α)p* + α·uniform.
        proxy_noise: σ² of zero-mean Gaussian noise added to |A| before p is formed (ablation).
        weights: ``"centred"`` (1/(n_supp p_i), E_p[w] = 1) or ``"raw"`` (1/(n p_i)).
        merge_duplicates: a row drawn k times into one mini-batch runs once with weight k·w.
        budget: ``"rows"`` draws as many rows per step as the baseline runs; ``"tokens"`` draws
            until the baseline's tokens (Σ c_i over the pool) are matched: the tokens drawn, or
            with ``merge_duplicates`` the tokens fed, mini-batch by mini-batch. The stopping rule
            depends only on past draws, so Σ w·g is unbiased up to the constant E[draws]
            (Wald's identity).
        pods_keep: PODS, rows kept per group (default: half the group).
        zero_tol: an advantage with |A| <= zero_tol · max|A| over the pool counts as zero (the
            row gets p = 0 under p*, and is not in the support). Group normalisation leaves float
            rounding (|A| ~ 1e-8 in float32, ~1e-16 in float64) on rows equal to their group's
            mean; without the tolerance those rows hold p ~ 1e-9 and a token budget would need
            ~1e9 draws to feed them. 0 keeps exact zeros only.
        max_draws_factor: the token budget stops each mini-batch after at most
            ``max_draws_factor × (baseline rows per mini-batch)`` draws (a documented fallback:
            the capped stopping time still depends only on past draws, so Wald's identity and
            unbiasedness hold; memory and time stay bounded). ``Plan.meta["draw_cap_hit"]`` says
            when it happened.
    """

    method: str = "p_star"
    alpha: float = 0.01
    proxy_noise: float = 0.0
    weights: str = "centred"
    merge_duplicates: bool = True
    budget: str = "rows"
    pods_keep: int | None = None
    zero_tol: float = 1e-6
    max_draws_factor: float = 64.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not (_real(self.alpha) and 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha!r}")
        if not _real(self.proxy_noise) or self.proxy_noise < 0:
            raise ValueError(f"proxy_noise must be a finite variance >= 0, got {self.proxy_noise!r}")
        if self.weights not in ("centred", "raw"):
            raise ValueError(f"weights must be 'centred' or 'raw', got {self.weights!r}")
        if not isinstance(self.merge_duplicates, bool):
            raise ValueError(f"merge_duplicates must be a bool, got {self.merge_duplicates!r}")
        if self.budget not in ("rows", "tokens"):
            raise ValueError(f"budget must be 'rows' or 'tokens', got {self.budget!r}")
        keep = self.pods_keep
        if keep is not None and (
            isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 1
        ):
            raise ValueError(f"pods_keep must be a positive integer or None, got {keep!r}")
        if not (_real(self.zero_tol) and 0.0 <= self.zero_tol < 1.0):
            raise ValueError(f"zero_tol must lie in [0, 1), got {self.zero_tol!r}")
        if not (_real(self.max_draws_factor) and self.max_draws_factor >= 1.0):
            raise ValueError(f"max_draws_factor must be a finite number >= 1, got {self.max_draws_factor!r}")

    @property
    def full_support(self) -> bool:
        """True when every row of a pool can be drawn (p_i > 0 for every i, whatever A is)."""
        if self.method in FULL_SUPPORT:
            return True
        return self.method == "p_smooth" and self.alpha > 0


def plan_seed(seed: int, generation: int, salt: int = 0) -> int:
    """The plan generator's seed for generation batch ``generation`` of a run seeded ``seed``.

    One derivation for every engine: every rank computes the same value (the plan is global), and a
    resumed run gets the same plans as an uninterrupted one.

    >>> plan_seed(0, 3) == plan_seed(0, 3) != plan_seed(0, 4)
    True
    """
    for name, v in (("seed", seed), ("generation", generation), ("salt", salt)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    return ((int(seed) * 1_000_003 + int(generation)) * 1_009 + int(salt)) % (2**63 - 1)
