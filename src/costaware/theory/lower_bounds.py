"""The lower bound on the expected cost of any algorithm that reaches error ε (paper §4.6, Appendix E)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware._checks import positive_scalar, positive_vector
from costaware.theory._numeric import all_normal, checked_exp

__all__ = ["LowerBound", "lower_bound"]


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
    kappa = checked_exp(float(log_kappa), "kappa = G·D/(shift·eps·n)", inputs)
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
    if not (all_normal(value) and value > 0):
        log_v = np.log(constant) + 2.0 * (np.log(D * 1.0) + np.log(G) + np.log(cum[k - 1]))
        log_v -= 2.0 * (np.log(shift) + np.log(n) + np.log(eps))
        value = checked_exp(float(log_v), "lower_bound", inputs)
    return LowerBound(float(value), order[:k].astype(np.int64), k, float(kappa), step2)
