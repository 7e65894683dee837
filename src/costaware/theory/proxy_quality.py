"""How much a proxy's distribution costs (paper Theorem 4.2 and Appendix D): the cost-biased
distribution, the χ² form of J(p′)/J(p*), and the expected sub-optimality of a noisy proxy in terms
of its noise variance or its Pearson correlation with the true gradient norms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from costaware import distributions as dist
from costaware._checks import (
    as_vector,
    finite_result,
    log_sum_exp,
    positive_scalar,
    positive_vector,
    pow2_exponent,
    probability_vector,
    real_scalar,
    same_length,
    show,
)
from costaware.theory._numeric import checked_exp, scaled

__all__ = [
    "cost_biased",
    "chi2_divergence",
    "suboptimality",
    "pearson",
    "noise_variance_from_pearson",
    "expected_suboptimality_noisy",
    "expected_suboptimality_pearson",
]


def cost_biased(p: Any, c: Any) -> np.ndarray:
    """p̃_i = p_i c_i / C(p): the distribution of where the cost is spent."""
    p = probability_vector(p, "p")
    c = positive_vector(c, "c")
    same_length(p=p, c=c)
    return dist.ratio_normalise_kernel(p, 1.0 / scaled(c), "p")  # ∝ p·c; scaling c is exact and free


def chi2_divergence(P: Any, Q: Any) -> float:
    """D_χ²(P‖Q) = Σ P²/Q − 1; +inf if Q misses mass that P has."""
    P = probability_vector(P, "P")
    Q = probability_vector(Q, "Q")
    same_length(P=P, Q=Q)
    if ((Q == 0) & (P > 0)).any():
        return float("inf")
    keep = P > 0
    with np.errstate(all="ignore"):
        total = np.sum(P[keep] * (P[keep] / Q[keep]))  # ≥ 1 by Cauchy–Schwarz: only overflow matters
    if not np.isfinite(total):
        log_total = log_sum_exp(2.0 * np.log(P[keep]) - np.log(Q[keep]))
        total = checked_exp(log_total, "chi2_divergence", f"P = {show(P)}, Q = {show(Q)}")
    return float(total - 1.0)


def suboptimality(p_proxy: Any, G: Any, c: Any) -> float:
    """J(p′)/J(p*) = 1 + χ²(p̃* ‖ p̃′) (Theorem 4.2), computed through the χ² side.

    ``p_proxy`` is the distribution actually used (e.g. from a proxy G′); ``G`` are the true norms.
    """
    p_star = dist.optimal(G, c)
    P, Q = cost_biased(p_star, c), cost_biased(p_proxy, c)
    if not ((Q == 0) & (P > 0)).any():
        return 1.0 + chi2_divergence(P, Q)
    # A zero in Q is either a row p_proxy misses (the documented +inf) or cost-biased mass that
    # underflowed (p_i·c_i tiny against C(p)): the latter is finite or an overflow, so redo it in logs.
    p, cc = probability_vector(p_proxy, "p_proxy"), positive_vector(c, "c")
    if ((p == 0) & (p_star > 0)).any():
        return float("inf")
    keep = p_star > 0
    with np.errstate(divide="ignore"):
        log_P = np.log(p_star) + np.log(cc)
        log_Q = np.log(p) + np.log(cc)
    log_P, log_Q = log_P - log_sum_exp(log_P), log_Q - log_sum_exp(log_Q)
    total = checked_exp(
        log_sum_exp(2.0 * log_P[keep] - log_Q[keep]),
        "suboptimality",
        f"p_proxy = {show(p)}, G = {show(G)}, c = {show(cc)}",
    )
    return max(total, 1.0)  # Σ P²/Q ≥ 1 (Cauchy–Schwarz); rounding must not take it below


# Pearson correlation and Theorem D.5 (expected sub-optimality of a noisy proxy)


def pearson(x: Any, y: Any) -> float:
    """Pearson correlation ρ = Cov(x, y)/(σ_x σ_y) of two equal-length samples (population moments).

    >>> round(pearson([1.0, 2.0, 3.0], [2.0, 4.0, 7.0]), 6)
    0.993399
    """
    x = as_vector(x, "x")
    y = as_vector(y, "y")
    n = same_length(x=x, y=y)
    if n < 2:
        raise ValueError(f"x and y need at least 2 points for a correlation, got {n}")
    x, y = scaled(x), scaled(y)  # ρ is scale-free; this keeps x·x from overflowing at 1e200
    dx, dy = x - x.mean(), y - y.mean()
    sx, sy = np.sqrt(dx @ dx), np.sqrt(dy @ dy)
    # Relative test: a vector whose spread is pure rounding of its mean counts as constant.
    for name, v, s in (("x", x, sx), ("y", y, sy)):
        if not s > 1e-14 * np.sqrt(n) * max(np.abs(v).max(), 1e-300):
            raise ValueError(f"{name} is constant (all entries ≈ {v[0]!r}): the correlation is undefined")
    return float(np.clip((dx @ dy) / (sx * sy), -1.0, 1.0))


def noise_variance_from_pearson(rho: float, sigma_G2: float) -> float:
    """σ_ε² = σ_G² (1 − ρ²)/ρ²: the noise variance that gives correlation ρ between G and G + ε."""
    rho = real_scalar(rho, "rho")
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho must lie in (0, 1], got {rho!r}")
    sigma_G2 = positive_scalar(sigma_G2, "sigma_G2", allow_zero=True)
    with np.errstate(all="ignore"):  # (1−ρ)(1+ρ)/ρ/ρ: no ρ² underflow for tiny ρ
        value = np.float64(sigma_G2) * ((1.0 - rho) * (1.0 + rho) / np.float64(rho)) / rho
    return finite_result(value, "noise_variance_from_pearson", f"rho = {rho!r}, sigma_G2 = {sigma_G2!r}")


def expected_suboptimality_noisy(G: Any, c: Any, sigma2: float, *, covariance_term: bool = False) -> float:
    """E[J(p′)]/J(p*) to second order in the noise, for p′ ∝ G′/√c with G′ = G + ε, E ε = 0, Var ε = σ².

    Theorem D.5 (``covariance_term=False``, the paper's form):

        1 + σ² Σ(√c_i/G_i) / Σ(G_i√c_i).

    The paper expands E[A] and E[B] of J(p′) = A·B/n² separately, which drops E[ΔA·ΔB] = −σ² Σ c_i.
    ``covariance_term=True`` keeps it, giving the full second-order term

        1 + σ² [Σ(√c_i/G_i) / Σ(G_i√c_i) − Σ c_i / (Σ G_i√c_i)²].

    The dropped part is O(1/n) of the main one: they agree for large n and differ by ~20% at n = 5.
    Both need σ ≪ min G_i (the expansion of 1/(G_i + ε_i)); requires every G_i > 0.
    """
    G = positive_vector(G, "G")
    c = positive_vector(c, "c")
    same_length(G=G, c=c)
    sigma2 = positive_scalar(sigma2, "sigma2", allow_zero=True)
    e = pow2_exponent(G)  # excess scales as 1/g² with g = 2^e; σ²·excess is formed as (σ²/g²)·excess′
    with np.errstate(all="ignore"):
        value = 1.0 + np.ldexp(np.float64(sigma2), -2 * e) * _excess(np.ldexp(G, -e), c, covariance_term)
    return finite_result(value, "expected_suboptimality_noisy", f"sigma2 = {sigma2!r}, G = {show(G)}")


def _excess(G: np.ndarray, c: np.ndarray, covariance_term: bool) -> float:
    """Σ(√c/G)/Σ(G√c) [− Σc/(ΣG√c)²] for G scaled to max ≈ 1; scale-free in c."""
    sq = np.sqrt(scaled(c))
    with np.errstate(all="ignore"):
        s0 = float(G @ sq)
        excess = np.sum(sq / G) / s0
        if covariance_term:
            excess -= np.sum(sq * sq) / s0**2
    return float(excess)


def expected_suboptimality_pearson(G: Any, c: Any, rho: float, *, covariance_term: bool = False) -> float:
    """Theorem D.5 in its ρ-form: 1 + ((1−ρ²)/ρ²) σ_G² Σ(√c_i/G_i) / Σ(G_i√c_i).

    σ_G² is the population variance of G over the n components, and ρ = σ_G/√(σ_G² + σ_ε²) is the
    Pearson correlation between G and G′ = G + ε. Identical to :func:`expected_suboptimality_noisy`
    with σ_ε² = σ_G²(1−ρ²)/ρ². Scale-free in G (σ_G² grows as the excess shrinks), so it is
    computed on G scaled to max ≈ 1.
    """
    G = positive_vector(G, "G")
    c = positive_vector(c, "c")
    same_length(G=G, c=c)
    rho = real_scalar(rho, "rho")
    G = scaled(G)
    sigma_G2 = float(np.var(G))
    if rho != 1 and not sigma_G2 > 0:
        raise ValueError(
            f"G is constant (σ_G = 0): its correlation with a proxy is undefined (rho = {rho!r}); use sigma2"
        )
    sigma2 = noise_variance_from_pearson(rho, sigma_G2)
    with np.errstate(all="ignore"):
        value = 1.0 + np.float64(sigma2) * _excess(G, c, covariance_term)
    return finite_result(value, "expected_suboptimality_pearson", f"rho = {rho!r}, G = {show(G)}")
