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

from costaware._checks import as_array, as_generator, check_container, integer, probability_vector, show

__all__ = [
    "build_alias",
    "draw",
    "alias_draw",
    "alias_draw_single",
    "alias_probabilities",
    "AliasTable",
    "build_alias_kernel",
]


@njit(cache=True)
def _vose(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    n = p.size
    f = n / p.sum()  # renormalise: probability_vector tolerates sums off by ~1e-8·n
    prob = np.zeros(n, dtype=np.float64)
    alias = np.arange(n, dtype=np.int64)
    # One array holds both stacks: the small one grows up from slot 0, the large one down from slot
    # n − 1 (slot n − 1 − k is large[k]); together they never hold more than n columns. Fewer and
    # smaller temporaries matter: freeing megabytes per call made the allocator return the memory to
    # the system and fault it back in on the next plan.
    stack = np.empty(n, dtype=np.int64)
    ns = 0
    nl = 0
    # Zeros are pushed last so they are popped first: each is paired with a large column while large
    # columns remain, so rounding can never leave a zero-mass column as a prob = 1 leftover.
    # Branch-free pushes (write both candidate slots, advance one top by 0 or 1): which stack a
    # column joins is random, and a mispredicted branch per column cost more than the rest.
    for i in range(n):
        v = p[i] * f
        big = v >= 1.0
        stack[n - 1 - nl] = i
        stack[ns] = i
        nl += big
        ns += (not big) and v > 0.0
    free = n - nl  # slots [ns, free) are free; once the zeros fill them, a write would hit large[]
    for i in range(n):
        if ns < free:  # predictable: false only after the last zero
            stack[ns] = i
            ns += p[i] * f == 0.0
    # Vose's loop: pop a small s and a large g, give s the column, push g back where its remaining
    # mass puts it. The pushed g is always the next one popped from its stack, so it is carried in a
    # register (cur) instead of going through memory: the same pairs and the same float operations in
    # the same order as the textbook loop (bit-identical tables, tests/test_alias.py).
    last = -1  # the column whose mass the loop changed, left on a stack when the loop ends
    last_val = 0.0
    if ns > 0 and nl > 0:
        ns -= 1
        s = stack[ns]
        ss = p[s] * f
        nl -= 1
        g = stack[n - 1 - nl]
        cur = p[g] * f
        while True:
            prob[s] = ss
            alias[s] = g
            cur = (cur + ss) - 1.0
            if cur < 1.0:  # g turns small: it is the next small popped, against the next large
                if nl == 0:
                    stack[ns] = g
                    ns += 1
                    last, last_val = g, cur
                    break
                s = g
                ss = cur
                nl -= 1
                g = stack[n - 1 - nl]
                cur = p[g] * f
            else:  # g stays large: it meets the next small
                if ns == 0:
                    stack[n - 1 - nl] = g
                    nl += 1
                    break
                ns -= 1
                s = stack[ns]
                ss = p[s] * f
    # Whatever is left has scaled mass ≈ 1 up to rounding: it keeps its own column.
    for k in range(nl):
        prob[stack[n - 1 - k]] = 1.0
    for k in range(ns):
        s = stack[k]
        v = last_val if s == last else p[s] * f
        prob[s] = 1.0 if v > 0.0 else 0.0
    return prob, alias


def build_alias(p: Any) -> tuple[np.ndarray, np.ndarray]:
    """Alias table ``(prob float64[n], alias int64[n])`` for the probability vector ``p`` (Vose, O(n)).

    >>> prob, alias = build_alias([0.75, 0.25])
    >>> prob, alias
    (array([1. , 0.5]), array([0, 0]))
    """
    return build_alias_kernel(probability_vector(p, "p"))


def build_alias_kernel(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel of :func:`build_alias` for a checked float64 probability vector (no second check)."""
    return _vose(np.ascontiguousarray(p))


def _check_table(prob: Any, alias: Any) -> tuple[np.ndarray, np.ndarray]:
    """A table as ``(float64, int64)`` arrays, ValueError unless it is one :func:`build_alias` could give:
    equal non-empty 1-D shapes, every prob in [0, 1] and every alias in [0, n)."""
    prob = as_array(prob, "prob")
    check_container(alias, "alias", "an array-like of integers")
    try:
        alias = np.asarray(alias.detach().cpu().numpy() if hasattr(alias, "detach") else alias)
    except (TypeError, ValueError) as exc:  # ragged
        raise ValueError(f"alias must be a 1-D integer array, got {show(alias)}") from exc
    if prob.ndim != 1 or prob.size == 0 or alias.shape != prob.shape:
        raise ValueError(f"prob and alias must be non-empty 1-D of equal length, got {prob.shape}, {alias.shape}")
    if not np.issubdtype(alias.dtype, np.integer):
        raise ValueError(f"alias must be an integer array, got dtype {alias.dtype}: {show(alias)}")
    bad = ~((prob >= 0.0) & (prob <= 1.0))  # also catches nan
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"prob must lie in [0, 1], got {float(prob[i])!r} at index {i}")
    bad = (alias < 0) | (alias >= prob.size)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"alias entries must lie in [0, {prob.size}), got {int(alias[i])} at index {i}")
    return prob, alias.astype(np.int64, copy=False)


MAX_DRAWS = 1 << 32  # draws per call: 2^32 int64 indices already take 32 GB


def _size(size: Any) -> int | tuple[int, ...]:
    if isinstance(size, tuple):
        out = tuple(integer(s, "size", minimum=0, maximum=MAX_DRAWS) for s in size)
        if int(np.prod(out, dtype=object)) > MAX_DRAWS:
            raise ValueError(f"size must hold at most {MAX_DRAWS} draws in all, got {size!r}")
        return out
    return integer(size, "size", minimum=0, maximum=MAX_DRAWS)


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
    _keep_or_alias(j.reshape(-1), coin.reshape(-1), prob, alias)
    return j


@njit(cache=True)
def _keep_or_alias(j: np.ndarray, coin: np.ndarray, prob: np.ndarray, alias: np.ndarray) -> None:  # pragma: no cover
    """j[i] ← j[i] if coin[i] < prob[j[i]] else alias[j[i]], in place: the same result as the numpy
    ``np.where(coin < prob[j], j, alias[j])`` without its four draw-sized temporaries."""
    for i in range(j.size):
        c = j[i]
        if not coin[i] < prob[c]:
            j[i] = alias[c]


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
