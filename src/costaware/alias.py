"""Walker/Vose alias tables: O(n) build, O(1) per draw from a fixed discrete distribution.

A table is two arrays ``(prob, alias)`` of length n. One draw takes a column j uniformly from
{0, …, n−1} and a coin u ∈ [0, 1): the result is j if u < prob[j], else alias[j]. Components with
p_i = 0 get prob = 0 and never appear as an alias, so they are never drawn.

>>> import numpy as np
>>> prob, alias = build_alias([0.5, 0.25, 0.25, 0.0])
>>> idx = draw(prob, alias, 100_000, np.random.default_rng(0))
>>> np.round(np.bincount(idx, minlength=4) / idx.size, 2)
array([0.5 , 0.25, 0.25, 0.  ])

Inside another numba kernel, use :func:`alias_draw` (two uniforms) or :func:`alias_draw_single`
(one uniform, split into column and coin).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from costaware._checks import _show, as_array, as_generator, integer, probability_vector

__all__ = ["build_alias", "draw", "alias_draw", "alias_draw_single", "alias_probabilities", "AliasTable"]


@njit(cache=True)
def _vose(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    n = p.size
    scaled = p * (n / p.sum())  # renormalise: probability_vector tolerates sums off by ~1e-8·n
    prob = np.zeros(n, dtype=np.float64)
    alias = np.arange(n, dtype=np.int64)
    small = np.empty(n, dtype=np.int64)
    large = np.empty(n, dtype=np.int64)
    ns = 0
    nl = 0
    # Zeros are pushed last so they are popped first: each is paired with a large column while large
    # columns remain, so rounding can never leave a zero-mass column as a prob = 1 leftover.
    for i in range(n):
        if scaled[i] >= 1.0:
            large[nl] = i
            nl += 1
        elif scaled[i] > 0.0:
            small[ns] = i
            ns += 1
    for i in range(n):
        if scaled[i] == 0.0:
            small[ns] = i
            ns += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        nl -= 1
        g = large[nl]
        prob[s] = scaled[s]
        alias[s] = g
        scaled[g] = (scaled[g] + scaled[s]) - 1.0
        if scaled[g] < 1.0:
            small[ns] = g
            ns += 1
        else:
            large[nl] = g
            nl += 1
    # Whatever is left has scaled ≈ 1 up to rounding: it keeps its own column.
    for k in range(nl):
        prob[large[k]] = 1.0
    for k in range(ns):
        s = small[k]
        prob[s] = 1.0 if scaled[s] > 0.0 else 0.0
    return prob, alias


def build_alias(p: Any) -> tuple[np.ndarray, np.ndarray]:
    """Alias table ``(prob float64[n], alias int64[n])`` for the probability vector ``p`` (Vose, O(n)).

    >>> prob, alias = build_alias([0.75, 0.25])
    >>> prob, alias
    (array([1. , 0.5]), array([0, 0]))
    """
    p = probability_vector(p, "p")
    return _vose(np.ascontiguousarray(p))


def _check_table(prob: Any, alias: Any) -> tuple[np.ndarray, np.ndarray]:
    """A table as ``(float64, int64)`` arrays, ValueError unless it is one :func:`build_alias` could give:
    equal non-empty 1-D shapes, every prob in [0, 1] and every alias in [0, n)."""
    prob = as_array(prob, "prob")
    if alias is None or isinstance(alias, (str, bytes, dict, set)):
        raise TypeError(f"alias must be an array-like of integers, got {type(alias).__name__}")
    try:
        alias = np.asarray(alias.detach().cpu().numpy() if hasattr(alias, "detach") else alias)
    except (TypeError, ValueError) as exc:  # ragged
        raise ValueError(f"alias must be a 1-D integer array, got {_show(alias)}") from exc
    if prob.ndim != 1 or prob.size == 0 or alias.shape != prob.shape:
        raise ValueError(
            f"prob and alias must be non-empty 1-D of equal length, got {prob.shape}, {alias.shape}"
        )
    if not np.issubdtype(alias.dtype, np.integer):
        raise ValueError(f"alias must be an integer array, got dtype {alias.dtype}: {_show(alias)}")
    bad = ~((prob >= 0.0) & (prob <= 1.0))  # also catches nan
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"prob must lie in [0, 1], got {float(prob[i])!r} at index {i}")
    bad = (alias < 0) | (alias >= prob.size)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"alias entries must lie in [0, {prob.size}), got {int(alias[i])} at index {i}")
    return prob, alias.astype(np.int64, copy=False)


def _size(size: Any) -> int | tuple[int, ...]:
    if isinstance(size, tuple):
        return tuple(integer(s, "size", minimum=0) for s in size)
    return integer(size, "size", minimum=0)


def draw(
    prob: Any,
    alias: Any,
    size: int | tuple[int, ...],
    rng: np.random.Generator | int | None = None,
    *,
    validate: bool = True,
) -> np.ndarray:
    """``size`` i.i.d. indices (int64) from the table's distribution, vectorised numpy.

    The column is drawn with ``rng.integers`` (exactly uniform, no floor(u·n) rounding), the coin with
    ``rng.random``. Same ``rng`` state → same indices. The table is checked (O(n)) unless
    ``validate=False``, the hot path for a table fresh from :func:`build_alias`, which callers that
    draw many small batches from one large table (the sampler) use.

    >>> draw([0.5, 0.5], [-1, 0], 5, 0)
    Traceback (most recent call last):
    ...
    ValueError: alias entries must lie in [0, 2), got -1 at index 0
    """
    if validate:
        prob, alias = _check_table(prob, alias)
        size = _size(size)
    rng = as_generator(rng, "rng")
    j = rng.integers(0, prob.size, size=size, dtype=np.int64)
    coin = rng.random(size=size)
    return np.where(coin < prob[j], j, alias[j]).astype(np.int64, copy=False)


@njit(inline="always")
def alias_draw(prob: np.ndarray, alias: np.ndarray, u1: float, u2: float) -> int:  # pragma: no cover
    """One draw from two uniforms in [0, 1): column j = ⌊u1·n⌋, kept if u2 < prob[j], else alias[j]."""
    n = prob.size
    j = int(u1 * n)
    if j >= n:  # u1·n can round up to n when u1 is within one ulp of 1
        j = n - 1
    if u2 < prob[j]:
        return j
    return alias[j]


@njit(inline="always")
def alias_draw_single(prob: np.ndarray, alias: np.ndarray, u: float) -> int:  # pragma: no cover
    """One draw from a single uniform: x = u·n, column j = ⌊x⌋, coin = x − j.

    The coin keeps about 52 − log2(n) bits, ample for any n that fits in memory.
    """
    n = prob.size
    x = u * n
    j = int(x)
    if j >= n:
        j = n - 1
    if x - j < prob[j]:
        return j
    return alias[j]


def alias_probabilities(prob: Any, alias: Any) -> np.ndarray:
    """The distribution a table encodes: q_i = (prob_i + Σ_{j: alias_j = i} (1 − prob_j)) / n.

    Exact reconstruction, used to check a table without sampling noise.
    """
    prob, alias = _check_table(prob, alias)
    n = prob.size
    return (prob + np.bincount(alias, weights=1.0 - prob, minlength=n)) / n


class AliasTable:
    """A built table with a ``sample`` method; thin convenience over :func:`build_alias` / :func:`draw`.

    >>> t = AliasTable([0.2, 0.8])
    >>> t.sample(5, rng=0).shape
    (5,)
    """

    def __init__(self, p: Any) -> None:
        self.p = probability_vector(p, "p").copy()
        self.prob, self.alias = build_alias(self.p)

    def __len__(self) -> int:
        return self.p.size

    def sample(self, size: int | tuple[int, ...], rng: np.random.Generator | int | None = None) -> np.ndarray:
        return draw(self.prob, self.alias, _size(size), rng, validate=False)
