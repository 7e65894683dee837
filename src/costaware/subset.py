"""Subset selection for biased Cost-Aware SGD (paper Appendix C, D.3): a min-cost knapsack.

Dropping the components outside a subset π biases the gradient by at most β_π = (1/n) Σ_{i∉π} G_i,
and sampling p* restricted to π costs K_π(ε) = D² (Σ_{i∈π} G_i√c_i)² / (n² (ε − Dβ_π)²). Under a bias
budget Dβ_π ≤ Γ the best subset solves

    min Σ z_i w_i   s.t.   Σ z_i v_i ≥ V,    w_i = G_i√c_i,  v_i = G_i,  V = Σ G_i − nΓ/D,  z ∈ {0,1}ⁿ.

Every item has density w_i/v_i = √c_i, so the LP relaxation takes components cheapest first.

>>> import numpy as np
>>> G, c = np.ones(4), np.array([1.0, 4.0, 9.0, 100.0])
>>> greedy_subset(G, c, gamma=0.25, D=1.0).tolist()      # may drop G-mass 1 = nΓ/D
[0, 1, 2]
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numba import njit

from costaware._checks import (
    check_container,
    finite_result,
    nonnegative_vector,
    norms_and_costs,
    positive_scalar,
    pow2_exponent,
)

__all__ = [
    "required_mass",
    "greedy_subset",
    "exact_subset",
    "subset_cost",
    "bias",
    "biased_cost",
    "restricted_optimal",
    "EXACT_MAX_ITEMS",
]

EXACT_MAX_ITEMS = 25
# Relative slack on the covering constraint, so that Γ = 0 (keep everything) is feasible despite rounding.
_RTOL = 1e-12


def _scaled_need(G: np.ndarray, gamma: float, D: float) -> tuple[np.ndarray, float, int]:
    # The knapsack is invariant under G → G/g, Γ → Γ/g: work with g = 2^e near max G (exact), so
    # that Σ G cannot overflow; V/g may be -inf (Γ/D huge: nothing needs keeping), never nan.
    e = pow2_exponent(G)
    Gs = np.ldexp(G, -e)
    with np.errstate(over="ignore"):
        need = float(Gs.sum() - G.size * (np.ldexp(np.float64(gamma), -e) / np.float64(D)))
    return Gs, need, e


def required_mass(G: Any, gamma: float, D: float) -> float:
    """V = Σ G_i − nΓ/D: the G-mass a subset must keep so that its bias D·β_π is at most Γ."""
    G = nonnegative_vector(G, "G", not_all_zero=True)
    gamma = positive_scalar(gamma, "gamma", allow_zero=True)
    D = positive_scalar(D, "D")
    _, need, e = _scaled_need(G, gamma, D)
    with np.errstate(over="ignore"):
        value = np.ldexp(need, e)
    return finite_result(value, "required_mass", f"G = {G!r}, gamma = {gamma!r}, D = {D!r}")


def _subset_indices(subset: Any, n: int) -> np.ndarray:
    idx = np.asarray(subset)
    check_container(subset, "subset", "an array-like of indices or a boolean mask")
    if idx.dtype == bool:
        if idx.shape != (n,):
            raise ValueError(f"a boolean subset must have shape ({n},), got {idx.shape}")
        return np.flatnonzero(idx)
    if idx.size == 0:
        return np.empty(0, dtype=np.int64)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"subset must be a 1-D array of integer indices or a boolean mask, got {idx!r}")
    if idx.min() < 0 or idx.max() >= n:
        raise ValueError(f"subset indices must lie in [0, {n}), got range [{idx.min()}, {idx.max()}]")
    if np.unique(idx).size != idx.size:
        raise ValueError("subset indices must be distinct")
    return idx.astype(np.int64)


@njit(cache=True)
def _completion_greedy(order: np.ndarray, v: np.ndarray, w: np.ndarray, need: float):  # pragma: no cover
    # Walk in density order. An item that would complete the cover is recorded as a candidate
    # (current partial set + that item) and skipped; any other item joins the partial set.
    best_cost = np.inf
    best_pos = -1
    best_len = 0
    taken = np.empty(order.size, dtype=np.int64)
    m = 0
    mass = 0.0
    cost = 0.0
    for pos in range(order.size):
        i = order[pos]
        if mass + v[i] >= need:
            if cost + w[i] < best_cost:
                best_cost = cost + w[i]
                best_pos = pos
                best_len = m
        else:
            taken[m] = i
            m += 1
            mass += v[i]
            cost += w[i]
    return taken, best_len, best_pos


def greedy_subset(
    G: Any, c: Any, gamma: float, D: float, *, method: Literal["completion", "prefix"] = "completion"
) -> np.ndarray:
    """Approximate min-cost subset (indices, increasing cost) that keeps bias D·β_π ≤ Γ.

    ``prefix`` is the paper's greedy: take the cheapest components (ratio v/w = 1/√c_i) until the
    constraint holds. On its own it has no constant guarantee: a cheap small item followed by one
    huge item can cost arbitrarily more than two small items (see the tests).

    ``completion`` (default) is the standard fix that makes it a true 2-approximation: walk in the
    same order; an item that would complete the cover is recorded as a candidate "partial set + this
    item" and skipped, any other item joins the partial set; return the cheapest candidate.
    Proof: let O be optimal and j the first skipped item in O. Every item of O before j is in the
    partial set P_j, so O∖P_j lies at density ≥ √c_j while P_j∖O lies at density ≤ √c_j, and
    v(P_j) < V ≤ v(O) gives w(P_j∖O) ≤ w(O∖P_j), i.e. w(P_j) ≤ w(O). With w_j ≤ w(O) the candidate
    P_j ∪ {j} costs ≤ 2 w(O).

    Components with G_i = 0 are never selected (they cost and contribute nothing). If Γ is so large
    that nothing needs keeping (V ≤ 0) the empty subset is returned.
    """
    G, c = norms_and_costs(G, c)
    gamma = positive_scalar(gamma, "gamma", allow_zero=True)
    D = positive_scalar(D, "D")
    if not (isinstance(method, str) and method in ("completion", "prefix")):
        raise ValueError(f"method must be 'completion' or 'prefix', got {method!r}")
    G, need, _ = _scaled_need(G, gamma, D)  # G/g, V/g: same subset
    need -= _RTOL * G.sum()
    if need <= 0:
        return np.empty(0, dtype=np.int64)
    pos_idx = np.flatnonzero(G > 0)
    order = pos_idx[np.argsort(c[pos_idx], kind="stable")]
    if method == "prefix":
        k = int(np.searchsorted(np.cumsum(G[order]), need)) + 1  # first prefix whose mass reaches V
        return order[:k].astype(np.int64)
    w = G * np.sqrt(c)
    taken, m, pos = _completion_greedy(order.astype(np.int64), G, w, need)
    chosen = np.append(taken[:m], order[pos])  # pos ≥ 0: the full set covers V ≤ Σ G
    return chosen[np.argsort(c[chosen], kind="stable")].astype(np.int64)


@njit(cache=True)
def _gray_code_search(v: np.ndarray, w: np.ndarray, need: float):  # pragma: no cover
    # Visit all 2^m subsets in Gray-code order: each step flips one item, so sums update in O(1).
    m = v.size
    mask = 0
    mass = 0.0
    cost = 0.0
    best_cost = np.inf
    best_mask = -1
    for t in range(1, 1 << m):
        bit = 0
        while not (t >> bit) & 1:
            bit += 1
        mask ^= 1 << bit
        if (mask >> bit) & 1:
            mass += v[bit]
            cost += w[bit]
        else:
            mass -= v[bit]
            cost -= w[bit]
        if mass >= need and cost < best_cost:
            best_cost = cost
            best_mask = mask
    return best_mask


def exact_subset(G: Any, c: Any, gamma: float, D: float) -> np.ndarray:
    """The exact min-cost subset (indices, increasing cost) by exhaustive search over 2^m subsets.

    m counts the components with G_i > 0; refuses m > 25 (2^25 ≈ 3·10⁷ subsets, about a second).
    """
    G, c = norms_and_costs(G, c)
    gamma = positive_scalar(gamma, "gamma", allow_zero=True)
    D = positive_scalar(D, "D")
    G, need, _ = _scaled_need(G, gamma, D)  # G/g, V/g: same subset
    need -= _RTOL * G.sum()
    if need <= 0:
        return np.empty(0, dtype=np.int64)
    pos_idx = np.flatnonzero(G > 0)
    if pos_idx.size > EXACT_MAX_ITEMS:
        raise ValueError(
            f"exact_subset searches 2^m subsets and refuses m > {EXACT_MAX_ITEMS} components with G > 0, "
            f"got m = {pos_idx.size}; use greedy_subset"
        )
    v = G[pos_idx]
    w = v * np.sqrt(c[pos_idx])
    # Sums drift by ~1e-16 per Gray step; a slightly looser threshold than the greedy's keeps the
    # exact search from missing a set that the greedy (summing afresh) finds just feasible.
    mask = _gray_code_search(v, w, need - 1e-9 * G.sum())
    chosen = pos_idx[[(mask >> b) & 1 == 1 for b in range(pos_idx.size)]]
    return chosen[np.argsort(c[chosen], kind="stable")].astype(np.int64)


def subset_cost(G: Any, c: Any, subset: Any) -> float:
    """The knapsack objective Σ_{i∈π} G_i√c_i (= n·√J restricted to π)."""
    G, c = norms_and_costs(G, c)
    idx = _subset_indices(subset, G.size)
    with np.errstate(over="ignore"):
        value = np.sum(G[idx] * np.sqrt(c[idx]))
    return finite_result(value, "subset_cost", f"G = {G!r}, c = {c!r}")


def bias(G: Any, subset: Any) -> float:
    """β_π = (1/n) Σ_{i∉π} G_i, the bound on ‖∇f − ∇f_π‖."""
    G = nonnegative_vector(G, "G", not_all_zero=True)
    idx = _subset_indices(subset, G.size)
    keep = np.zeros(G.size, dtype=bool)
    keep[idx] = True
    e = pow2_exponent(G)  # Σ G/n ≤ max G always fits; scaling keeps the sum from overflowing
    return float(np.ldexp(np.ldexp(G[~keep], -e).sum() / G.size, e))


def restricted_optimal(G: Any, c: Any, subset: Any) -> np.ndarray:
    """p* restricted to π: p_i ∝ G_i/√c_i for i ∈ π, 0 elsewhere (length n)."""
    G, c = norms_and_costs(G, c)
    idx = _subset_indices(subset, G.size)
    q = np.zeros(G.size)
    q[idx] = G[idx] / np.sqrt(c[idx])
    total = q.sum()
    if not total > 0:
        raise ValueError(f"subset {idx.tolist()[:8]} has no component with G > 0: p* restricted to it is undefined")
    return q / total


def biased_cost(G: Any, c: Any, subset: Any, eps: float, D: float) -> float:
    """K_π(ε) = D² (Σ_{i∈π} G_i√c_i)² / (n² (ε − Dβ_π)²), the cost of biased SGD on π (Appendix C).

    Raises ValueError when ε ≤ Dβ_π: the bias alone already exceeds the target error.
    """
    G, c = norms_and_costs(G, c)
    eps = positive_scalar(eps, "eps")
    D = positive_scalar(D, "D")
    idx = _subset_indices(subset, G.size)
    slack = eps - D * bias(G, idx)
    if not slack > 0:
        raise ValueError(f"eps = {eps!r} must exceed D·β_π = {D * bias(G, idx)!r} for this subset")
    with np.errstate(all="ignore"):
        log_k = 2.0 * (np.log(D) + np.log(subset_cost(G, c, idx)) - np.log(G.size) - np.log(slack))
        # numpy floats throughout: a Python float ** 2 raises OverflowError instead of giving inf
        value = (
            np.float64(D) ** 2
            * np.float64(subset_cost(G, c, idx)) ** 2
            / (np.float64(G.size) ** 2 * np.float64(slack) ** 2)
        )
    if not (np.isfinite(value) and value > 0) and np.isfinite(log_k):
        with np.errstate(over="ignore"):  # an overflow to inf is reported by finite_result
            value = np.exp(log_k)  # squares over/underflowed; the cost itself may still fit
    return finite_result(value, "biased_cost", f"eps = {eps!r}, D = {D!r}, G = {G!r}, c = {c!r}")
