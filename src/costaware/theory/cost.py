"""The cost bounds of Cost-Aware SGD (paper §4.1–4.3): S(p), C(p), J(p), K(ε, p) and the closed-form ratios.

S(p) = (1/n²) Σ G_i²/p_i bounds the estimator's second moment, C(p) = Σ p_i c_i is the expected
cost per step, and J(p) = S(p)·C(p) is what the expected cost to reach ε scales with. Each value is
computed directly when no intermediate over- or underflows, else in log space.

>>> J([0.5, 0.5], [1.0, 1.0], [1.0, 1.0]) == J_optimal([1.0, 1.0], [1.0, 1.0])
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from costaware._checks import (
    log_sum_exp,
    nonnegative_vector,
    norms_and_costs,
    positive_scalar,
    positive_vector,
    probability_vector,
    same_length,
    show,
)
from costaware.theory._numeric import all_normal, checked_exp, quiet_log, scaled

__all__ = [
    "S",
    "C",
    "J",
    "J_optimal",
    "expected_cost",
    "ratio_optimal_to_uniform",
    "ratio_optimal_to_variance",
    "ratio_variance_to_uniform",
]


def _log_S(p: np.ndarray, G: np.ndarray) -> float:
    keep = G > 0
    return log_sum_exp(2.0 * np.log(G[keep]) - np.log(p[keep])) - 2.0 * np.log(G.size)


def _log_C(p: np.ndarray, c: np.ndarray) -> float:
    return log_sum_exp(quiet_log(p) + np.log(c))


def _S(p: np.ndarray, G: np.ndarray) -> float:
    keep = G > 0
    with np.errstate(all="ignore"):
        direct = float(np.sum(G[keep] * (G[keep] / p[keep])) / G.size**2)
    if all_normal(direct) and direct > 0:
        return direct
    return checked_exp(_log_S(p, G), "S(p)", f"G = {show(G)}, p = {show(p)}")


def S(p: Any, G: Any) -> float:
    """S(p) = (1/n²) Σ G_i²/p_i; +inf if p misses a component with G_i > 0 (the estimator is biased).

    Computed directly when no intermediate over- or underflows, else in log space; ValueError if
    S itself exceeds the float64 range.
    """
    p = probability_vector(p, "p")
    G = nonnegative_vector(G, "G", not_all_zero=True)
    same_length(p=p, G=G)
    if ((p == 0) & (G > 0)).any():
        return float("inf")
    return _S(p, G)


def _C(p: np.ndarray, c: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        direct = float(p @ c)
    if all_normal(direct) and direct > 0:
        return direct
    return checked_exp(_log_C(p, c), "C(p)", f"c = {show(c)}")


def C(p: Any, c: Any) -> float:
    """C(p) = Σ p_i c_i, the expected cost of one step."""
    p = probability_vector(p, "p")
    c = positive_vector(c, "c")
    same_length(p=p, c=c)
    return _C(p, c)


def _J(p: np.ndarray, G: np.ndarray, c: np.ndarray) -> float:
    if ((p == 0) & (G > 0)).any():
        return float("inf")
    try:
        with np.errstate(all="ignore"):
            direct = _S(p, G) * _C(p, c)
        if all_normal(direct) and direct > 0:
            return float(direct)
    except ValueError:  # S or C alone overflows; their product may still fit
        pass
    return checked_exp(_log_S(p, G) + _log_C(p, c), "J(p)", f"G = {show(G)}, c = {show(c)}")


def J(p: Any, G: Any, c: Any) -> float:
    """J(p) = S(p)·C(p)."""
    p = probability_vector(p, "p")
    G = nonnegative_vector(G, "G", not_all_zero=True)
    c = positive_vector(c, "c")
    same_length(p=p, G=G, c=c)
    return _J(p, G, c)


def J_optimal(G: Any, c: Any) -> float:
    """J(p*) = (Σ G_i √c_i)² / n², the minimum of J over all p (Cauchy–Schwarz, §4.2)."""
    G, c = norms_and_costs(G, c)
    with np.errstate(all="ignore"):
        direct = float(np.sum(G * np.sqrt(c)) ** 2 / G.size**2)
    if all_normal(direct) and direct > 0:
        return direct
    keep = G > 0
    log_a = log_sum_exp(np.log(G[keep]) + 0.5 * np.log(c[keep]))
    return checked_exp(2.0 * log_a - 2.0 * np.log(G.size), "J_optimal", f"G = {show(G)}, c = {show(c)}")


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
    Computed in log space when the direct product over- or underflows; ValueError if K itself
    exceeds the float64 range (e.g. a tiny ``eps``).
    """
    eps = positive_scalar(eps, "eps")
    if (D is None) == (mu is None):
        raise ValueError(f"give exactly one of D (convex) or mu (strongly convex), got D={D!r}, mu={mu!r}")
    D = None if D is None else positive_scalar(D, "D")
    mu = None if mu is None else positive_scalar(mu, "mu")
    j = J(p, G, c)
    if j == np.inf:
        return j  # p misses a component: documented +inf of S
    e, jj = np.float64(eps), np.float64(j)  # numpy floats: 1/0 gives inf, not ZeroDivisionError
    with np.errstate(all="ignore"):
        direct = np.float64(D) ** 2 * jj / e**2 if D is not None else 4.0 * jj / (np.float64(mu) * e)
    if all_normal(direct) and direct > 0:
        return float(direct)
    # j itself is finite; only the scalar factors over/underflowed
    if D is not None:
        log_k = 2.0 * np.log(D) + np.log(j) - 2.0 * np.log(eps)
    else:
        assert mu is not None  # exactly one of D and mu is given (checked above)
        log_k = np.log(4.0) + np.log(j) - np.log(mu) - np.log(eps)
    return checked_exp(float(log_k), "expected_cost", f"eps = {eps!r}, D = {D!r}, mu = {mu!r}, J = {j!r}")


def _ratio(num: list[np.ndarray], den: list[np.ndarray], powers: tuple[int, ...]) -> float:
    """Π (Σ num_k)^{powers_k} / Π Σ den_k with every sum a sum of non-negative logs' exponentials.

    ``num``/``den`` are arrays of log-terms; the result is formed in log space. Used only when the
    direct formula over- or underflows.
    """
    log_value = sum(k * log_sum_exp(t) for k, t in zip(powers, num, strict=True)) - sum(log_sum_exp(t) for t in den)
    return float(np.exp(log_value))


def _ratio_inputs(G: Any, c: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # The ratios are scale-free in G and in c: scale both to max ≈ 1 (exact, powers of two).
    G, c = norms_and_costs(G, c)
    keep = G > 0
    # logs of the unscaled inputs: scaling can push a subnormal c to 0
    return scaled(G), scaled(c), np.log(G[keep]), np.log(c[keep]), np.log(c)


def ratio_optimal_to_uniform(G: Any, c: Any) -> float:
    """J(p*)/J(unif) = (Σ G√c)² / (Σ G² · Σ c) ≤ 1. Scale-free in G and in c."""
    G, c, lg, lc, lc_all = _ratio_inputs(G, c)
    with np.errstate(all="ignore"):
        a, b, d = np.sum(G * np.sqrt(c)), np.sum(G**2), np.sum(c)
    if all_normal(a, b, d) and a > 0:
        return float(a**2 / (b * d))
    return _ratio([lg + 0.5 * lc], [2.0 * lg, lc_all], (2,))


def ratio_optimal_to_variance(G: Any, c: Any) -> float:
    """J(p*)/J(var) = (Σ G√c)² / (Σ G · Σ G c) ≤ 1. Scale-free in G and in c."""
    G, c, lg, lc, lc_all = _ratio_inputs(G, c)
    with np.errstate(all="ignore"):
        a, b, d = np.sum(G * np.sqrt(c)), np.sum(G), np.sum(G * c)
    if all_normal(a, b, d) and a > 0 and d > 0:
        return float(a**2 / (b * d))
    return _ratio([lg + 0.5 * lc], [lg, lg + lc], (2,))


def ratio_variance_to_uniform(G: Any, c: Any) -> float:
    """J(var)/J(unif) = (Σ G · Σ G c) / (Σ G² · Σ c); either side of 1 depending on how G and c correlate."""
    G, c, lg, lc, lc_all = _ratio_inputs(G, c)
    with np.errstate(all="ignore"):
        a, b, d, e = np.sum(G), np.sum(G * c), np.sum(G**2), np.sum(c)
    if all_normal(a, b, d, e) and b > 0:
        return float(a * b / (d * e))
    return _ratio([lg, lg + lc], [2.0 * lg, lc_all], (1, 1))
