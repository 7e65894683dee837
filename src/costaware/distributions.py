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

from costaware._checks import (
    in_unit_interval,
    nonnegative_vector,
    positive_scalar,
    positive_vector,
    probability_vector,
    same_length,
)

__all__ = [
    "uniform",
    "variance",
    "optimal",
    "smoothed",
    "inverse_sqrt_cost",
    "noisy_proxy",
    "support_size",
    "importance_weights",
    "WeightMode",
]

WeightMode = Literal["centred", "raw"]


def _normalise(v: np.ndarray, name: str) -> np.ndarray:
    total = v.sum()
    if not total > 0:
        raise ValueError(f"{name} must have at least one entry > 0, got all zeros (length {v.size})")
    return v / total


_MAX_N = int(np.iinfo(np.intp).max)  # the longest array numpy can index


def uniform(n: int) -> np.ndarray:
    """p_i = 1/n."""
    # compare before int(): int(inf) raises OverflowError, int(nan) a message without the name
    real = isinstance(n, (int, float, np.integer, np.floating)) and not isinstance(n, (bool, np.bool_))
    if not (real and 1 <= n <= _MAX_N and int(n) == n):
        raise ValueError(f"n must be a positive integer of at most {_MAX_N}, got {n!r}")
    return np.full(int(n), 1.0 / n)


def variance(G: Any) -> np.ndarray:
    """The variance-minimising, cost-blind baseline: p_i ∝ G_i."""
    G = nonnegative_vector(G, "G", not_all_zero=True)
    return _normalise(G, "G")


def optimal(G: Any, c: Any) -> np.ndarray:
    """The cost-aware optimum p*_i ∝ G_i/√c_i (paper §4.2): it minimises J(p) = S(p)·C(p)."""
    G = nonnegative_vector(G, "G", not_all_zero=True)
    c = positive_vector(c, "c")
    same_length(G=G, c=c)
    return _normalise(G / np.sqrt(c), "G")


def inverse_sqrt_cost(c: Any) -> np.ndarray:
    """p_i ∝ 1/√c_i: the optimum when every G_i is replaced by 1 (the paper's G ≡ 1 ablation)."""
    c = positive_vector(c, "c")
    return _normalise(1.0 / np.sqrt(c), "c")


def smoothed(p: Any, alpha: float) -> np.ndarray:
    """(1−α)·p + α·uniform. α = 0 returns p, α = 1 uniform; any α > 0 gives full support."""
    p = probability_vector(p, "p")
    alpha = in_unit_interval(alpha, "alpha")
    return (1.0 - alpha) * p + alpha / p.size


def noisy_proxy(G: Any, sigma2: float, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """G + ε with ε ~ N(0, σ²) i.i.d., clipped at 0 so it can still define a distribution.

    This is the paper's proxy-noise ablation (§5.5): noise is added to |A_i| before p is formed.
    """
    G = nonnegative_vector(G, "G")
    sigma2 = positive_scalar(sigma2, "sigma2", allow_zero=True)
    if sigma2 == 0:
        return G.copy()
    rng = np.random.default_rng(rng)
    return np.maximum(G + rng.normal(0.0, np.sqrt(sigma2), size=G.shape), 0.0)


def support_size(p: Any) -> int:
    """n_supp = #{i : p_i > 0}."""
    return int(np.count_nonzero(nonnegative_vector(p, "p") > 0))


def importance_weights(p: Any, indices: Any | None = None, mode: WeightMode = "centred") -> np.ndarray:
    """Importance weights for drawn ``indices`` (all components if None).

    ``raw``: w_i = 1/(n p_i), so E_{i~p}[w_i ∇f_i] = ∇f exactly.
    ``centred``: w_i = 1/(n_supp p_i), the raw weight times n/n_supp, so that E_p[w] = 1 (paper §G.2).
    Never self-normalise by the mini-batch mean: that biases the estimator.
    """
    p = probability_vector(p, "p")
    if mode not in ("centred", "raw"):
        raise ValueError(f"mode must be 'centred' or 'raw', got {mode!r}")
    n = support_size(p) if mode == "centred" else p.size
    if indices is None:  # every component; those with p = 0 are never drawn and get weight 0
        w = np.zeros_like(p)
        w[p > 0] = 1.0 / (n * p[p > 0])
        return w
    idx = np.asarray(indices)
    if idx.size == 0:  # no draws (a bare [] arrives as float64)
        return np.empty(idx.shape)
    if not np.issubdtype(idx.dtype, np.integer):  # bool would act as a mask, float cannot index
        shown = np.array2string(idx, threshold=8, edgeitems=3)
        raise ValueError(f"indices must be integers, got dtype {idx.dtype}: {shown}")
    if idx.min() < 0 or idx.max() >= p.size:
        raise ValueError(f"indices must lie in [0, {p.size}), got range [{idx.min()}, {idx.max()}]")
    pi = p[idx]
    if (pi <= 0).any():
        j = int(idx[np.flatnonzero(pi <= 0)[0]])
        raise ValueError(f"indices include {j}, which has p = 0 and cannot have been drawn")
    return 1.0 / (n * pi)
