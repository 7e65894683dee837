"""Theory quantities of Cost-Aware SGD (paper §4, Appendices D–E), as pure numpy functions.

Notation: n components, gradient-norm bounds G, costs c > 0, sampling distribution p.
S(p) = (1/n²) Σ G_i²/p_i bounds the estimator's second moment, C(p) = Σ p_i c_i is the expected
cost per step, and J(p) = S(p)·C(p) is what the expected cost to reach ε scales with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware import distributions as dist
from costaware._checks import (
    _show,
    as_vector,
    finite_result,
    log_sum_exp,
    nonnegative_vector,
    positive_scalar,
    positive_vector,
    pow2_exponent,
    probability_vector,
    real_scalar,
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
    "pearson",
    "noise_variance_from_pearson",
    "expected_suboptimality_noisy",
    "expected_suboptimality_pearson",
    "LowerBound",
    "lower_bound",
]


def _G_c(G: Any, c: Any) -> tuple[np.ndarray, np.ndarray]:
    G = nonnegative_vector(G, "G", not_all_zero=True)
    c = positive_vector(c, "c")
    same_length(G=G, c=c)
    return G, c


_TINY = np.finfo(np.float64).tiny
_LOG_MAX = float(np.log(np.finfo(np.float64).max))


def _ok(*values: float) -> bool:
    """Every value finite and either 0 or a normal float (no overflow, no precision lost in subnormals)."""
    return all(np.isfinite(v) and (v == 0 or abs(v) >= _TINY) for v in values)


def _exp(log_value: float, what: str, inputs: str) -> float:
    """exp(log_value), or ValueError when the value itself does not fit in float64."""
    if log_value > _LOG_MAX:
        raise ValueError(f"{what} overflows float64 (≈ e^{log_value:.6g}) for {inputs}")
    return float(np.exp(log_value))


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def _scaled(x: np.ndarray) -> np.ndarray:
    """x divided by a power of two near its max: exact, and leaves scale-free ratios unchanged."""
    return np.ldexp(x, -pow2_exponent(x))


def _log_S(p: np.ndarray, G: np.ndarray) -> float:
    keep = G > 0
    return log_sum_exp(2.0 * np.log(G[keep]) - np.log(p[keep])) - 2.0 * np.log(G.size)


def _log_C(p: np.ndarray, c: np.ndarray) -> float:
    return log_sum_exp(_log(p) + np.log(c))


def _S(p: np.ndarray, G: np.ndarray) -> float:
    keep = G > 0
    with np.errstate(all="ignore"):
        direct = float(np.sum(G[keep] * (G[keep] / p[keep])) / G.size**2)
    if _ok(direct) and direct > 0:
        return direct
    return _exp(_log_S(p, G), "S(p)", f"G = {_show(G)}, p = {_show(p)}")


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
    if _ok(direct) and direct > 0:
        return direct
    return _exp(_log_C(p, c), "C(p)", f"c = {_show(c)}")


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
        if _ok(direct) and direct > 0:
            return float(direct)
    except ValueError:  # S or C alone overflows; their product may still fit
        pass
    return _exp(_log_S(p, G) + _log_C(p, c), "J(p)", f"G = {_show(G)}, c = {_show(c)}")


def J(p: Any, G: Any, c: Any) -> float:
    """J(p) = S(p)·C(p)."""
    p = probability_vector(p, "p")
    G = nonnegative_vector(G, "G", not_all_zero=True)
    c = positive_vector(c, "c")
    same_length(p=p, G=G, c=c)
    return _J(p, G, c)


def J_optimal(G: Any, c: Any) -> float:
    """J(p*) = (Σ G_i √c_i)² / n², the minimum of J over all p (Cauchy–Schwarz, §4.2)."""
    G, c = _G_c(G, c)
    with np.errstate(all="ignore"):
        direct = float(np.sum(G * np.sqrt(c)) ** 2 / G.size**2)
    if _ok(direct) and direct > 0:
        return direct
    keep = G > 0
    log_a = log_sum_exp(np.log(G[keep]) + 0.5 * np.log(c[keep]))
    return _exp(2.0 * log_a - 2.0 * np.log(G.size), "J_optimal", f"G = {_show(G)}, c = {_show(c)}")


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
    if _ok(direct) and direct > 0:
        return float(direct)
    # j itself is finite; only the scalar factors over/underflowed
    log_k = (
        2.0 * np.log(D) + np.log(j) - 2.0 * np.log(eps)
        if D is not None
        else np.log(4.0) + np.log(j) - np.log(mu) - np.log(eps)
    )
    return _exp(float(log_k), "expected_cost", f"eps = {eps!r}, D = {D!r}, mu = {mu!r}, J = {j!r}")


def _ratio(num: list[np.ndarray], den: list[np.ndarray], powers: tuple[int, ...]) -> float:
    """Π (Σ num_k)^{powers_k} / Π Σ den_k with every sum a sum of non-negative logs' exponentials.

    ``num``/``den`` are arrays of log-terms; the result is formed in log space. Used only when the
    direct formula over- or underflows.
    """
    log_value = sum(k * log_sum_exp(t) for k, t in zip(powers, num, strict=True)) - sum(
        log_sum_exp(t) for t in den
    )
    return float(np.exp(log_value))


def _ratio_inputs(G: Any, c: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # The ratios are scale-free in G and in c: scale both to max ≈ 1 (exact, powers of two).
    G, c = _G_c(G, c)
    keep = G > 0
    # logs of the unscaled inputs: scaling can push a subnormal c to 0
    return _scaled(G), _scaled(c), np.log(G[keep]), np.log(c[keep]), np.log(c)


def ratio_optimal_to_uniform(G: Any, c: Any) -> float:
    """J(p*)/J(unif) = (Σ G√c)² / (Σ G² · Σ c) ≤ 1. Scale-free in G and in c."""
    G, c, lg, lc, lc_all = _ratio_inputs(G, c)
    with np.errstate(all="ignore"):
        a, b, d = np.sum(G * np.sqrt(c)), np.sum(G**2), np.sum(c)
    if _ok(a, b, d) and a > 0:
        return float(a**2 / (b * d))
    return _ratio([lg + 0.5 * lc], [2.0 * lg, lc_all], (2,))


def ratio_optimal_to_variance(G: Any, c: Any) -> float:
    """J(p*)/J(var) = (Σ G√c)² / (Σ G · Σ G c) ≤ 1. Scale-free in G and in c."""
    G, c, lg, lc, lc_all = _ratio_inputs(G, c)
    with np.errstate(all="ignore"):
        a, b, d = np.sum(G * np.sqrt(c)), np.sum(G), np.sum(G * c)
    if _ok(a, b, d) and a > 0 and d > 0:
        return float(a**2 / (b * d))
    return _ratio([lg + 0.5 * lc], [lg, lg + lc], (2,))


def ratio_variance_to_uniform(G: Any, c: Any) -> float:
    """J(var)/J(unif) = (Σ G · Σ G c) / (Σ G² · Σ c); either side of 1 depending on how G and c correlate."""
    G, c, lg, lc, lc_all = _ratio_inputs(G, c)
    with np.errstate(all="ignore"):
        a, b, d, e = np.sum(G), np.sum(G * c), np.sum(G**2), np.sum(c)
    if _ok(a, b, d, e) and b > 0:
        return float(a * b / (d * e))
    return _ratio([lg, lg + lc], [2.0 * lg, lc_all], (1, 1))


def cost_biased(p: Any, c: Any) -> np.ndarray:
    """p̃_i = p_i c_i / C(p): the distribution of where the cost is spent."""
    p = probability_vector(p, "p")
    c = positive_vector(c, "c")
    same_length(p=p, c=c)
    return dist._ratio_normalise(p, 1.0 / _scaled(c), "p")  # ∝ p·c; scaling c is exact and free


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
        total = _exp(log_total, "chi2_divergence", f"P = {_show(P)}, Q = {_show(Q)}")
    return float(total - 1.0)


def suboptimality(p_proxy: Any, G: Any, c: Any) -> float:
    """J(p′)/J(p*) = 1 + χ²(p̃* ‖ p̃′) (Theorem 4.2), computed through the χ² side.

    ``p_proxy`` is the distribution actually used (e.g. from a proxy G′); ``G`` are the true norms.
    """
    p_star = dist.optimal(G, c)
    return 1.0 + chi2_divergence(cost_biased(p_star, c), cost_biased(p_proxy, c))


# ---------------------------------------------------------------------------------------------
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
    x, y = _scaled(x), _scaled(y)  # ρ is scale-free; this keeps x·x from overflowing at 1e200
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
    return finite_result(value, "expected_suboptimality_noisy", f"sigma2 = {sigma2!r}, G = {_show(G)}")


def _excess(G: np.ndarray, c: np.ndarray, covariance_term: bool) -> float:
    """Σ(√c/G)/Σ(G√c) [− Σc/(ΣG√c)²] for G scaled to max ≈ 1; scale-free in c."""
    sq = np.sqrt(_scaled(c))
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
    G = _scaled(G)
    sigma_G2 = float(np.var(G))
    if rho != 1 and not sigma_G2 > 0:
        raise ValueError(
            f"G is constant (σ_G = 0): its correlation with a proxy is undefined (rho = {rho!r}); use sigma2"
        )
    sigma2 = noise_variance_from_pearson(rho, sigma_G2)
    with np.errstate(all="ignore"):
        value = 1.0 + np.float64(sigma2) * _excess(G, c, covariance_term)
    return finite_result(value, "expected_suboptimality_pearson", f"rho = {rho!r}, G = {_show(G)}")


# ---------------------------------------------------------------------------------------------
# Lower bound (§4.6, Appendix E)


@dataclass(frozen=True)
class LowerBound:
    """Result of :func:`lower_bound`.

    value: the bound (0 when no set is feasible: the construction then gives nothing).
    subset: indices of S*, in increasing cost; k = len(subset).
    kappa: the feasibility constant κ = G·D/(shift·ε·n).
    step2_holds: whether ε/D ≥ G·√(ln 20/(3n)), the regime the extracted Step 2 (Hoeffding, failure
    probability ≤ 0.05) needs.
    """

    value: float
    subset: np.ndarray
    k: int
    kappa: float
    step2_holds: bool


def lower_bound(
    c: Any,
    G: float,
    eps: float,
    *,
    D: float = 1.0,
    shift: float = 1.0,
    constant: float = 1.0 / 32.0,
) -> LowerBound:
    """Lower bound on the expected cost of any algorithm reaching error ε (§4.6), and its set S*.

    value = constant/shift² · D² G²/ε² · ((1/n) Σ_{i∈S*} √c_i)²,   S* = [k*] in sorted-cost order.

    Reconstruction (the extracted Appendix E lost the definition of S*). Step 4 survives: with q_i
    the expected number of queries of component i, Δ_i the perturbation of component i between the
    two hard instances and ρ_i = Δ_i²/c_i, telling them apart needs

        G²/16 ≤ Σ q_i Δ_i² = Σ (q_i c_i) ρ_i ≤ C · max_i ρ_i   ⇒   C ≥ G²/(32 max_i ρ_i),

    where C = Σ q_i c_i is the expected cost (the extract's factor 32, kept as ``constant``). The
    adversary spreads the perturbation over a set S so that ρ_i is constant on S: Δ_i = t√c_i for
    i ∈ S, 0 elsewhere. Moving the minimiser by ε needs a mean shift (D/n) Σ_S Δ_i = shift·ε, so
    t = shift·ε·n/(D Σ_S √c_i) and C ≥ constant·G²/t², the formula above. Each Δ_i is capped by the
    Lipschitz bound, Δ_i ≤ G, which is the feasibility condition

        max_{i∈S} √c_i ≤ κ Σ_{i∈S} √c_i,   κ = G·D/(shift·ε·n).

    S* maximises Σ_S √c_i over feasible S. As the paper's Remark says it is a prefix [k] of the
    sorted costs: adding a cheaper component keeps the max and grows the sum. Feasible prefixes are
    not monotone in k (one expensive component can break feasibility and later ones restore it), so
    k* is the largest feasible k, found from cumulative sums in O(n log n). For uniform costs and
    ε ≤ G·D/shift, S* = [n] and the bound matches the upper bound K(ε, p*) = D²G²(Σ√c_i)²/(n²ε²)
    up to the factor constant/shift². ``shift`` (default 1) is the separation the extract does not
    pin down; the defaults make the bound ≤ K(ε, p*) for every input.

    >>> lb = lower_bound([1.0] * 10 + [1e6], G=1.0, eps=0.5)
    >>> lb.k, 10 in lb.subset                 # the expensive component is excluded
    (10, False)
    """
    c = positive_vector(c, "c")
    G = positive_scalar(G, "G")
    eps = positive_scalar(eps, "eps")
    D = positive_scalar(D, "D")
    shift = positive_scalar(shift, "shift")
    constant = positive_scalar(constant, "constant")
    n = c.size
    inputs = f"G = {G!r}, eps = {eps!r}, D = {D!r}, shift = {shift!r}, n = {n}"
    log_kappa = np.log(G) + np.log(D) - np.log(shift) - np.log(eps) - np.log(n)
    kappa = _exp(float(log_kappa), "kappa = G·D/(shift·eps·n)", inputs)
    order = np.argsort(c, kind="stable")
    root = np.sqrt(c[order])
    cum = np.cumsum(root)
    # root is sorted, so root[k-1] is the max over the prefix [k]; a tiny relative slack keeps
    # exactly-tight prefixes (e.g. uniform costs at ε = G·D/shift) from failing on rounding.
    feasible = root <= kappa * cum * (1.0 + 1e-12)
    step2 = bool(eps / D >= G * np.sqrt(np.log(20.0) / (3.0 * n)))
    if not feasible.any():
        return LowerBound(0.0, np.empty(0, dtype=np.int64), 0, float(kappa), step2)
    k = int(np.flatnonzero(feasible)[-1]) + 1
    with np.errstate(all="ignore"):
        f = np.float64  # numpy floats: overflow gives inf (handled below), not OverflowError
        value = f(constant) / f(shift) ** 2 * f(D) ** 2 * f(G) ** 2 / f(eps) ** 2 * (cum[k - 1] / n) ** 2
    if not (_ok(value) and value > 0):
        log_v = np.log(constant) + 2.0 * (np.log(D * 1.0) + np.log(G) + np.log(cum[k - 1]))
        log_v -= 2.0 * (np.log(shift) + np.log(n) + np.log(eps))
        value = _exp(float(log_v), "lower_bound", inputs)
    return LowerBound(float(value), order[:k].astype(np.int64), k, float(kappa), step2)
