"""Sampling distributions over the n components of a finite sum, and their importance weights.

Pure numpy. Every function takes per-component gradient-norm bounds ``G`` (or a proxy for them)
and/or costs ``c`` and returns a probability vector of the same length.

>>> import numpy as np
>>> G, c = np.array([1.0, 1.0]), np.array([1.0, 4.0])
>>> optimal(G, c)          # p_i ∝ G_i / sqrt(c_i)
array([0.66666667, 0.33333333])
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numba import njit

from costaware._checks import (
    as_generator,
    check_container,
    in_unit_interval,
    integer,
    nonnegative_vector,
    positive_scalar,
    positive_vector,
    pow2_exponent,
    probability_vector,
    same_length,
    show,
)

__all__ = [
    "MAX_COMPONENTS",
    "uniform",
    "variance",
    "optimal",
    "smoothed",
    "inverse_sqrt_cost",
    "noisy_proxy",
    "support_size",
    "importance_weights",
    "WeightMode",
    "optimal_kernel",
    "variance_kernel",
    "inverse_sqrt_cost_kernel",
    "smoothed_kernel",
    "ratio_normalise_kernel",
    "importance_weights_kernel",
]

WeightMode = Literal["centred", "raw"]


_TINY = np.finfo(np.float64).tiny  # smallest normal float64


def _normalise(v: np.ndarray, name: str) -> np.ndarray:
    vmax = v.max()
    if not vmax > 0:
        raise ValueError(f"{name} must have at least one entry > 0, got all zeros (length {v.size})")
    if 1e-290 < vmax < 1e290 / v.size:  # the sum cannot overflow: the plain formula (fast path)
        return v / v.sum()
    # Scale by a power of two first: exact, so it gives v / v.sum() bit for bit where that
    # does not overflow, and a sum of entries near 1e308 cannot overflow.
    s = np.ldexp(v, -pow2_exponent(v))
    return s / s.sum()


def ratio_normalise_kernel(G: np.ndarray, root: np.ndarray, name: str) -> np.ndarray:
    """p ∝ G / root (G ≥ 0, root > 0): the direct quotient when it is exact enough, else log space."""
    with np.errstate(all="ignore"):
        q = G / root
    if G.min() > 0:  # common case: one pass for overflow (inf/nan) and underflow (< tiny)
        ok = bool(_TINY <= q.min()) and bool(np.isfinite(q.max()))
    else:
        ok = bool(np.isfinite(q).all()) and not ((G > 0) & ~(q >= _TINY)).any()
    if ok:
        return _normalise(q, name)
    with np.errstate(divide="ignore"):
        logq = np.log(G) - np.log(root)  # G = 0 gives -inf, i.e. p = 0
    return _normalise(np.exp(logq - logq.max()), name)


# The most components a distribution may have: 2^32 float64 entries already take 32 GB. A larger n
# is a ValueError here rather than a MemoryError (or an out-of-memory kill) inside numpy.
MAX_COMPONENTS = 1 << 32


def uniform(n: int) -> np.ndarray:
    """p_i = 1/n, for 1 <= n <= :data:`MAX_COMPONENTS`."""
    n = integer(n, "n", minimum=1, maximum=MAX_COMPONENTS)
    try:
        return np.full(n, 1.0 / n)
    except MemoryError:
        raise ValueError(
            f"n = {n} components need {8 * n / 2**30:.1f} GiB, more than this machine can allocate"
        ) from None


def variance(G: Any) -> np.ndarray:
    """The variance-minimising, cost-blind baseline: p_i ∝ G_i."""
    return variance_kernel(nonnegative_vector(G, "G", not_all_zero=True))


def optimal(G: Any, c: Any) -> np.ndarray:
    """The cost-aware optimum p*_i ∝ G_i/√c_i (paper §4.2): it minimises J(p) = S(p)·C(p)."""
    G = nonnegative_vector(G, "G", not_all_zero=True)
    c = positive_vector(c, "c")
    same_length(G=G, c=c)
    return optimal_kernel(G, c)


def inverse_sqrt_cost(c: Any) -> np.ndarray:
    """p_i ∝ 1/√c_i: the optimum when every G_i is replaced by 1 (the paper's G ≡ 1 ablation)."""
    return inverse_sqrt_cost_kernel(positive_vector(c, "c"))


def smoothed(p: Any, alpha: float) -> np.ndarray:
    """(1−α)·p + α·uniform. α = 0 returns p, α = 1 uniform; any α > 0 gives full support."""
    return smoothed_kernel(probability_vector(p, "p"), in_unit_interval(alpha, "alpha"))


# -- kernels: checked inputs only (the public functions above check, then call these; the plan checks
# its pool once and calls these directly, so one plan validates each vector once) ------------------


def variance_kernel(G: np.ndarray) -> np.ndarray:
    """p ∝ G for a finite float64 G >= 0 (all zeros still raise: the normaliser needs a positive entry)."""
    return _normalise(G, "G")


def optimal_kernel(G: np.ndarray, c: np.ndarray) -> np.ndarray:
    """p ∝ G/√c for finite float64 G >= 0 and c > 0 of equal length."""
    return ratio_normalise_kernel(G, np.sqrt(c), "G")


def inverse_sqrt_cost_kernel(c: np.ndarray) -> np.ndarray:
    """p ∝ 1/√c for a finite float64 c > 0."""
    return ratio_normalise_kernel(np.ones_like(c), np.sqrt(c), "c")


def smoothed_kernel(p: np.ndarray, alpha: float) -> np.ndarray:
    """(1−α)p + α/n for a probability vector p and a float α in [0, 1]."""
    return (1.0 - alpha) * p + alpha / p.size


def noisy_proxy(G: Any, sigma2: float, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """G + ε with ε ~ N(0, σ²) i.i.d., clipped at 0 so it can still define a distribution.

    This is the paper's proxy-noise ablation (§5.5): noise is added to |A_i| before p is formed.
    """
    G = nonnegative_vector(G, "G")
    sigma2 = positive_scalar(sigma2, "sigma2", allow_zero=True)
    if sigma2 == 0:
        return G.copy()
    rng = as_generator(rng, "rng")
    return np.maximum(G + rng.normal(0.0, np.sqrt(sigma2), size=G.shape), 0.0)


def support_size(p: Any) -> int:
    """n_supp = #{i : p_i > 0}."""
    return int(np.count_nonzero(nonnegative_vector(p, "p") > 0))


def importance_weights_kernel(p: np.ndarray, mode: WeightMode) -> np.ndarray:
    """Kernel of ``importance_weights(p, None, mode)`` for a checked probability vector p."""
    n = int(np.count_nonzero(p)) if mode == "centred" else p.size
    w, finite = _inverse_n_p(p, float(n))
    if not finite:
        _weights(p[p > 0], n, p)  # raises with the offending entry
    return w


@njit(cache=True)
def _inverse_n_p(p: np.ndarray, n: float) -> tuple[np.ndarray, bool]:  # pragma: no cover - compiled
    """1/(n·p_i) where p_i > 0, else 0 (one pass, the same float operations as the numpy formula),
    and whether every weight is finite."""
    w = np.zeros(p.size)
    finite = True
    for i in range(p.size):
        if p[i] > 0.0:
            w[i] = 1.0 / (n * p[i])
            finite &= w[i] < np.inf
    return w, finite


def importance_weights(p: Any, indices: Any | None = None, mode: WeightMode = "centred") -> np.ndarray:
    """Importance weights for drawn ``indices`` (all components if None).

    ``raw``: w_i = 1/(n p_i), so E_{i~p}[w_i ∇f_i] = ∇f exactly.
    ``centred``: w_i = 1/(n_supp p_i), the raw weight times n/n_supp, so that E_p[w] = 1 (paper §G.2).
    Never self-normalise by the mini-batch mean: that biases the estimator.
    """
    p = probability_vector(p, "p")
    if not (isinstance(mode, str) and mode in ("centred", "raw")):
        raise ValueError(f"mode must be 'centred' or 'raw', got {mode!r}")
    if indices is None:  # every component; those with p = 0 are never drawn and get weight 0
        return importance_weights_kernel(p, mode)
    n = int(np.count_nonzero(p)) if mode == "centred" else p.size
    check_container(indices, "indices", "an array-like of integers")
    idx = np.asarray(indices.detach().cpu().numpy() if hasattr(indices, "detach") else indices)
    if idx.size == 0:  # no draws (a bare [] arrives as float64)
        return np.empty(idx.shape)
    if not np.issubdtype(idx.dtype, np.integer):  # bool would act as a mask, float cannot index
        raise ValueError(f"indices must be integers, got dtype {idx.dtype}: {show(idx)}")
    if idx.min() < 0 or idx.max() >= p.size:
        raise ValueError(f"indices must lie in [0, {p.size}), got range [{idx.min()}, {idx.max()}]")
    pi = p[idx]
    if (pi <= 0).any():
        j = int(idx[np.flatnonzero(pi <= 0)[0]])
        raise ValueError(f"indices include {j}, which has p = 0 and cannot have been drawn")
    return _weights(pi, n, p)


def _weights(pi: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        w = 1.0 / (n * pi)
    if not np.isfinite(w).all():
        small = float(pi[~np.isfinite(w)][0])
        raise ValueError(
            f"p has an entry {small!r} so small that its importance weight 1/(n·p) overflows float64; p = {show(p)}"
        )
    return w
