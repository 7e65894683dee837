"""Theory quantities of Cost-Aware SGD (paper §4, Appendix D), as pure numpy functions.

Notation: n components, gradient-norm bounds G, costs c > 0, sampling distribution p.
S(p) = (1/n²) Σ G_i²/p_i bounds the estimator's second moment, C(p) = Σ p_i c_i is the expected
cost per step, and J(p) = S(p)·C(p) is what the expected cost to reach ε scales with.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from costaware import distributions as dist
from costaware._checks import (
    nonnegative_vector,
    positive_scalar,
    positive_vector,
    probability_vector,
    same_length,
)

__all__ = [
    "S",
    "C",
    "J",
    "J_optimal",
    "expected_cost",
    "ratio_optimal_to_uniform",
    "ratio_optimal_to_variance",
    "ratio_variance_to_uniform",
    "cost_biased",
    "chi2_divergence",
    "suboptimality",
]


def _G_c(G: Any, c: Any) -> tuple[np.ndarray, np.ndarray]:
    G = nonnegative_vector(G, "G", not_all_zero=True)
    c = positive_vector(c, "c")
    same_length(G=G, c=c)
    return G, c


def S(p: Any, G: Any) -> float:
    """S(p) = (1/n²) Σ G_i²/p_i; +inf if p misses a component with G_i > 0 (the estimator is biased)."""
    p = probability_vector(p, "p")
    G = nonnegative_vector(G, "G", not_all_zero=True)
    n = same_length(p=p, G=G)
    if ((p == 0) & (G > 0)).any():
        return float("inf")
    keep = G > 0
    return float(np.sum(G[keep] ** 2 / p[keep]) / n**2)


def C(p: Any, c: Any) -> float:
    """C(p) = Σ p_i c_i, the expected cost of one step."""
    p = probability_vector(p, "p")
    c = positive_vector(c, "c")
    same_length(p=p, c=c)
    return float(p @ c)


def J(p: Any, G: Any, c: Any) -> float:
    """J(p) = S(p)·C(p)."""
    return S(p, G) * C(p, c)


def J_optimal(G: Any, c: Any) -> float:
    """J(p*) = (Σ G_i √c_i)² / n², the minimum of J over all p (Cauchy–Schwarz, §4.2)."""
    G, c = _G_c(G, c)
    return float(np.sum(G * np.sqrt(c)) ** 2 / G.size**2)


def expected_cost(
    eps: float,
    p: Any,
    G: Any,
    c: Any,
    *,
    D: float | None = None,
    mu: float | None = None,
) -> float:
    """K(ε, p): expected cost to reach E[f(x̂) − f*] ≤ ε.

    Convex (give ``D``, the diameter): K = D² S(p) C(p) / ε².
    μ-strongly convex (give ``mu``): K = 4 S(p) C(p) / (μ ε).
    """
    eps = positive_scalar(eps, "eps")
    if (D is None) == (mu is None):
        raise ValueError(f"give exactly one of D (convex) or mu (strongly convex), got D={D!r}, mu={mu!r}")
    j = J(p, G, c)
    if D is not None:
        return positive_scalar(D, "D") ** 2 * j / eps**2
    return 4.0 * j / (positive_scalar(mu, "mu") * eps)


def ratio_optimal_to_uniform(G: Any, c: Any) -> float:
    """J(p*)/J(unif) = (Σ G√c)² / (Σ G² · Σ c) ≤ 1."""
    G, c = _G_c(G, c)
    return float(np.sum(G * np.sqrt(c)) ** 2 / (np.sum(G**2) * np.sum(c)))


def ratio_optimal_to_variance(G: Any, c: Any) -> float:
    """J(p*)/J(var) = (Σ G√c)² / (Σ G · Σ G c) ≤ 1."""
    G, c = _G_c(G, c)
    return float(np.sum(G * np.sqrt(c)) ** 2 / (np.sum(G) * np.sum(G * c)))


def ratio_variance_to_uniform(G: Any, c: Any) -> float:
    """J(var)/J(unif) = (Σ G · Σ G c) / (Σ G² · Σ c); either side of 1 depending on how G and c correlate."""
    G, c = _G_c(G, c)
    return float(np.sum(G) * np.sum(G * c) / (np.sum(G**2) * np.sum(c)))


def cost_biased(p: Any, c: Any) -> np.ndarray:
    """p̃_i = p_i c_i / C(p): the distribution of where the cost is spent."""
    p = probability_vector(p, "p")
    c = positive_vector(c, "c")
    same_length(p=p, c=c)
    q = p * c
    return q / q.sum()


def chi2_divergence(P: Any, Q: Any) -> float:
    """D_χ²(P‖Q) = Σ P²/Q − 1; +inf if Q misses mass that P has."""
    P = probability_vector(P, "P")
    Q = probability_vector(Q, "Q")
    same_length(P=P, Q=Q)
    if ((Q == 0) & (P > 0)).any():
        return float("inf")
    keep = P > 0
    return float(np.sum(P[keep] ** 2 / Q[keep]) - 1.0)


def suboptimality(p_proxy: Any, G: Any, c: Any) -> float:
    """J(p′)/J(p*) = 1 + χ²(p̃* ‖ p̃′) (Theorem 4.2), computed through the χ² side.

    ``p_proxy`` is the distribution actually used (e.g. from a proxy G′); ``G`` are the true norms.
    """
    p_star = dist.optimal(G, c)
    return 1.0 + chi2_divergence(cost_biased(p_star, c), cost_biased(p_proxy, c))
