"""The gradient proxy of a whole group: Σ_i |A_i| of G responses with 0/1 rewards, and its expectation.

Under std normalisation a group of G with k correct (q = k/G) has |r_i − q| summing to 2G·q(1−q),
so Σ_i |A_i| = 2G·q(1−q)/(s + ε), with s the group's reward std:

* population std, s = √(q(1−q)): Σ|A| = 2G·√(q(1−q)) (at ε = 0);
* sample std (ddof = 1, as TRL and verl use), s = √(G/(G−1)·q(1−q)): Σ|A| = 2√(G(G−1)·q(1−q));
* 0 when k ∈ {0, G} (every advantage is 0), and for G = 1 (TRL's convention: A = 0).

ε is TRL's 1e-4 by default (verl: 1e-6), so the closed form matches
:func:`costaware.grpo.advantages.group_advantages` to float rounding. The expectations below are
exact sums over k (G + 1 terms), vectorised over prompts: k ~ Binomial(G, π) for a known pass rate,
or the Beta-binomial predictive for a Beta(a, b) posterior on π, optionally given the first m
responses of the group (the two-stage rollout's first stage).

>>> import numpy as np
>>> abs_adv_sum(np.array([0, 1, 2, 4]), 4, eps=0.0).round(4)      # 2·√(G(G−1)q(1−q))
array([0.    , 3.    , 3.4641, 0.    ])
>>> float(expected_abs_adv_sum(0.5, 4, eps=0.0).round(3))          # Σ_k C(4,k)/16 · above
2.799
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from scipy.special import betaln, gammaln

from costaware._checks import as_array, integer, positive_scalar, show, unit_array

__all__ = [
    "TRL_EPS",
    "abs_adv_sum",
    "expected_abs_adv_sum",
    "predictive_abs_adv_sum",
    "binomial_pmf",
    "beta_binomial_pmf",
    "row_abs_advantages",
    "abs_adv_sum_kernel",
]

TRL_EPS = 1e-4  # TRL adds 1e-4 to the group std (verl 1e-6)
Std = Literal["sample", "population"]


def _std_kind(std: Any) -> Std:
    if std not in ("sample", "population"):
        raise ValueError(f"std must be 'sample' (ddof=1, TRL/verl) or 'population', got {std!r}")
    return std


def _group(group_size: Any) -> int:
    return integer(group_size, "group_size", minimum=1, maximum=1 << 20)


def abs_adv_sum_kernel(k: np.ndarray, G: int, std: str, eps: float) -> np.ndarray:
    """Kernel: Σ|A| for k correct of G (k checked, float64)."""
    if G < 2:
        return np.zeros_like(k, dtype=np.float64)
    q = k / G
    var = q * (1.0 - q) * (G / (G - 1) if std == "sample" else 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 2.0 * G * q * (1.0 - q) / (np.sqrt(var) + eps)
    return np.where((k > 0) & (k < G), out, 0.0)


def abs_adv_sum(k: Any, group_size: int, *, std: Std = "sample", eps: float = TRL_EPS) -> np.ndarray:
    """Σ_i |A_i| of a group of ``group_size`` 0/1 rewards with ``k`` correct (any array shape)."""
    G, std, eps = _group(group_size), _std_kind(std), positive_scalar(eps, "eps", allow_zero=True)
    kk = as_array(k, "k")
    if not (np.isfinite(kk).all() and (kk == np.round(kk)).all() and (kk >= 0).all() and (kk <= G).all()):
        raise ValueError(f"k must hold integers in [0, group_size={G}], got {show(kk)}")
    return abs_adv_sum_kernel(kk, G, std, eps)


def binomial_pmf(pass_rate: np.ndarray, n: int) -> np.ndarray:
    """(..., n + 1) Binomial(n, π) probabilities of 0..n successes (π checked by the caller)."""
    j = np.arange(n + 1)
    pi = np.asarray(pass_rate, dtype=np.float64)[..., None]
    logc = gammaln(n + 1) - gammaln(j + 1) - gammaln(n - j + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = logc + np.where(j > 0, j * np.log(pi), 0.0) + np.where(j < n, (n - j) * np.log1p(-pi), 0.0)
    return np.exp(logp)


def beta_binomial_pmf(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """(..., n + 1) Beta-binomial(n, a, b) probabilities (a, b > 0 checked by the caller)."""
    j = np.arange(n + 1)
    a = np.asarray(a, dtype=np.float64)[..., None]
    b = np.asarray(b, dtype=np.float64)[..., None]
    logc = gammaln(n + 1) - gammaln(j + 1) - gammaln(n - j + 1)
    return np.exp(logc + betaln(j + a, n - j + b) - betaln(a, b))


def _moment(pmf: np.ndarray, offset: np.ndarray | int, G: int, std: str, eps: float, moment: int) -> np.ndarray:
    """E[(Σ|A|)^moment] with k = offset + j, j distributed as the last axis of ``pmf``."""
    j = np.arange(pmf.shape[-1])
    k = np.asarray(offset)[..., None] + j
    return (pmf * abs_adv_sum_kernel(k.astype(np.float64), G, std, eps) ** moment).sum(axis=-1)


def expected_abs_adv_sum(
    pass_rate: Any, group_size: int, *, std: Std = "sample", eps: float = TRL_EPS, moment: int = 1
) -> np.ndarray:
    """E[(Σ|A|)^moment] over k ~ Binomial(G, π), for an array of pass rates π."""
    G, std, eps = _group(group_size), _std_kind(std), positive_scalar(eps, "eps", allow_zero=True)
    m = integer(moment, "moment", minimum=1, maximum=2)
    pi = unit_array(pass_rate, "pass_rate")
    return _moment(binomial_pmf(pi, G), 0, G, std, eps, m)


def predictive_abs_adv_sum(
    a: Any,
    b: Any,
    group_size: int,
    *,
    first: int = 0,
    first_correct: Any = 0,
    std: Std = "sample",
    eps: float = TRL_EPS,
    moment: int = 1,
) -> np.ndarray:
    """E[(Σ|A|)^moment] under a Beta(a, b) posterior on the pass rate (the Beta-binomial predictive).

    With ``first`` = m > 0 the first m responses are known, ``first_correct`` of them correct: the
    posterior becomes Beta(a + k₁, b + m − k₁) and the other G − m responses are predicted from it.
    """
    G, std, eps = _group(group_size), _std_kind(std), positive_scalar(eps, "eps", allow_zero=True)
    m = integer(moment, "moment", minimum=1, maximum=2)
    aa, bb = as_array(a, "a"), as_array(b, "b")
    for name, arr in (("a", aa), ("b", bb)):
        if not (np.isfinite(arr).all() and (arr > 0).all()):
            raise ValueError(f"{name} must be > 0 and finite, got {show(arr)}")
    f = integer(first, "first", minimum=0, maximum=G)
    k1 = as_array(first_correct, "first_correct")
    if not ((k1 == np.round(k1)).all() and (k1 >= 0).all() and (k1 <= f).all()):
        raise ValueError(f"first_correct must hold integers in [0, first={f}], got {show(k1)}")
    try:
        np.broadcast_shapes(aa.shape, bb.shape, k1.shape)
    except ValueError:
        raise ValueError(
            f"a, b and first_correct must have one shape (or broadcast), got shapes {aa.shape}, {bb.shape}, {k1.shape}"
        ) from None
    with np.errstate(all="ignore"):
        pmf = beta_binomial_pmf(aa + k1, bb + (f - k1), G - f)
    if not np.isfinite(pmf).all():  # betaln's inf − inf at pseudo-counts near the float64 limits
        raise ValueError(
            f"a and b are beyond the range the Beta-binomial is computed in (float64), got "
            f"a = {show(aa)}, b = {show(bb)}"
        )
    return _moment(pmf, k1.astype(np.int64), G, std, eps, m)


def row_abs_advantages(rewards: Any, *, std: Std = "sample", eps: float = TRL_EPS) -> np.ndarray:
    """|A_i| of every row of (B, G) rewards (any real rewards), group by group; 0 for G = 1."""
    std, eps = _std_kind(std), positive_scalar(eps, "eps", allow_zero=True)
    r = as_array(rewards, "rewards")
    if r.ndim != 2 or not np.isfinite(r).all():
        raise ValueError(f"rewards must be a finite (groups, group_size) array, got shape {r.shape}")
    G = r.shape[1]
    if G < 2:
        return np.zeros_like(r)
    dev = np.abs(r - r.mean(axis=1, keepdims=True))
    s = r.std(axis=1, ddof=1 if std == "sample" else 0, keepdims=True)
    den = s + eps  # 0 only for a constant group with eps = 0, whose deviations are 0: |A| = 0 there
    return np.divide(dev, den, out=np.zeros_like(dev), where=den > 0)
