"""A calibrated gradient-norm proxy G_i ≈ |A_i| · c_i^β and adaptive smoothing. Pure numpy.

The paper samples with p ∝ |A|/√c, i.e. it takes G_i ≈ |A_i| (β = 0), which fits a loss that averages
over each sequence's tokens. A loss that sums over a sequence's tokens makes G grow with length:
with c_i token gradients of similar norm, β = ½ when they are independent and β = 1 when aligned.
The cost-aware optimum p* ∝ G/√c then becomes p ∝ |A| · c^(β − ½).

Pipeline (wired by the caller every k rounds): β is fitted by :mod:`costaware.grpo.beta` (``fit_beta``,
``BetaCalibrator``) with the prior of the loss's family (:mod:`costaware.grpo.loss_families`), then
    p = proxy_probs(|A|, c, beta=beta, alpha=adaptive_alpha(proxy_probs(|A|, c, beta=beta)))
Those modules' names are importable from here too.

>>> p = proxy_probs([1.0, 1.0], [1.0, 4.0], beta=0.0)        # the paper's p ∝ |A|/√c
>>> p.round(4).tolist()
[0.6667, 0.3333]
>>> proxy_probs([1.0, 1.0], [1.0, 4.0], beta=1.0).round(4).tolist()   # token-sum, aligned: favours long
[0.3333, 0.6667]
>>> loss_family("dapo").name, loss_family("seq-mean-token-mean").name
('token_sum', 'sequence_mean')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from costaware import distributions as dist
from costaware import theory
from costaware._checks import (
    as_vector,
    finite_result,
    in_unit_interval,
    nonnegative_vector,
    positive_vector,
    real_scalar,
    same_length,
    show,
)
from costaware.grpo.beta import BetaCalibrator, BetaFit, fit_beta, shrink
from costaware.grpo.loss_families import BETA_BOUNDS, LOSS_FAMILY_PRIOR_BETA, LossFamily, loss_family
from costaware.theory._numeric import scaled

__all__ = [
    "BETA_BOUNDS",
    "LOSS_FAMILY_PRIOR_BETA",
    "LossFamily",
    "loss_family",
    "proxy_probs",
    "BetaFit",
    "fit_beta",
    "shrink",
    "BetaCalibrator",
    "adaptive_alpha",
    "predicted_j_ratios",
    "proxy_probs_kernel",
    "adaptive_alpha_kernel",
]


def proxy_probs(abs_adv: Any, costs: Any, *, beta: float, alpha: float = 0.0) -> np.ndarray:
    """p ∝ |A_i| · c_i^(β − ½), then smoothed: (1 − α)·p + α/n.

    Computed in log space, so long rows and large β cannot overflow. Rows with A = 0 get p = 0 unless
    α > 0. β = 0 is the paper's p ∝ |A|/√c.
    """
    a = nonnegative_vector(abs_adv, "abs_adv", not_all_zero=True)
    c = positive_vector(costs, "costs")
    same_length(abs_adv=a, costs=c)
    return proxy_probs_kernel(a, c, real_scalar(beta, "beta"), in_unit_interval(alpha, "alpha"))


def proxy_probs_kernel(a: np.ndarray, c: np.ndarray, beta: float, alpha: float) -> np.ndarray:
    """Kernel of :func:`proxy_probs` for checked inputs (a >= 0 with an entry > 0, c > 0, equal lengths)."""
    logw = np.full(a.size, -np.inf)
    nz = a > 0
    logw[nz] = np.log(a[nz]) + (beta - 0.5) * np.log(c[nz])
    w = np.exp(logw - logw[nz].max())
    return dist.smoothed_kernel(w / w.sum(), alpha)


def adaptive_alpha(p: Any, *, max_weight: float = 10.0, alpha_min: float = 0.0, alpha_max: float = 0.5) -> float:
    """The smallest α in [alpha_min, alpha_max] with max_i 1/(n p_α,i) ≤ ``max_weight``.

    p_α = (1 − α) p + α/n is the smoothed distribution, and the bound runs over rows with p_i > 0: rows
    with p_i = 0 (A = 0) carry no policy gradient, so their weight multiplies zero. The largest weight
    sits on the smallest p_i, and 1/(n(1 − α)p_min + α) ≤ W solves in closed form; if even alpha_max
    cannot reach W, alpha_max is returned. A single huge weight is what makes an importance-weighted
    mini-batch noisy when the proxy underrates a row, so bounding it caps the damage a wrong proxy does.

    >>> adaptive_alpha([0.5, 0.5]), round(adaptive_alpha([0.98, 0.01, 0.01], max_weight=10.0), 4)
    (0.0, 0.0722)
    """
    p = dist.smoothed(p, 0.0)  # validates a probability vector
    W = real_scalar(max_weight, "max_weight")
    if not W > 1.0:
        raise ValueError(f"max_weight must be > 1 (uniform sampling has weight 1), got {max_weight!r}")
    lo = in_unit_interval(alpha_min, "alpha_min")
    hi = in_unit_interval(alpha_max, "alpha_max")
    if lo > hi:
        raise ValueError(f"alpha_min must be <= alpha_max, got {alpha_min!r} > {alpha_max!r}")
    return adaptive_alpha_kernel(p, W, lo, hi)


def adaptive_alpha_kernel(p: np.ndarray, W: float, lo: float, hi: float) -> float:
    """Kernel of :func:`adaptive_alpha` for a checked probability vector and checked bounds."""
    q = p.size * p[p > 0].min()
    need = 0.0 if q >= 1.0 / W else (1.0 / W - q) / (1.0 - q)
    return float(min(max(need, lo), hi))


def predicted_j_ratios(p: Any, grad_norms: Any, costs: Any) -> dict[str, float]:
    """J(p)/J(p*_true) and J(p)/J(uniform) on the rows whose exact gradient norms were measured.

    ``p`` is the sampling distribution restricted to those rows (renormalised here); J = S·C from
    :mod:`costaware.theory`. ``j_vs_optimal`` ≥ 1 is the price of the proxy; ``j_vs_uniform`` < 1 says
    cost-aware sampling is predicted to beat uniform sampling. Rows with non-finite G are dropped.
    Both are +inf when ``p`` misses a row with G > 0 (as :func:`costaware.theory.J`); a ratio beyond
    float64 is a ValueError.
    """
    w = nonnegative_vector(p, "p", not_all_zero=True)
    c = positive_vector(costs, "costs")
    g = as_vector(grad_norms, "grad_norms", allow_empty=True, finite=False)
    same_length(p=w, grad_norms=g, costs=c)
    keep = np.isfinite(g)
    if (g[keep] < 0).any() or not (g[keep] > 0).any() or not (w[keep] > 0).any():
        raise ValueError(f"grad_norms must be >= 0 with one finite entry > 0 where p > 0, got {g}")
    # J ratios are scale-free in G and c: scaled by powers of two (exact), no J underflows to 0
    w, g, c = w[keep] / w[keep].sum(), scaled(g[keep]), scaled(c[keep])
    j = theory.J(w, g, c)
    if j == float("inf"):  # p misses a row with G > 0: the documented +inf of J
        return {"j_vs_optimal": j, "j_vs_uniform": j}
    what = f"p = {show(w)}, grad_norms = {show(g)}, costs = {show(c)}"
    return {
        "j_vs_optimal": finite_result(j / theory.J_optimal(g, c), "j_vs_optimal", what),
        "j_vs_uniform": finite_result(j / theory.J(dist.uniform(g.size), g, c), "j_vs_uniform", what),
    }
