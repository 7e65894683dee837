"""subset.py: greedy ≤ 2 × exact (hypothesis), feasibility, K_π(ε) against brute force, bad input."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from costaware import theory as th
from costaware.subset import (
    bias,
    biased_cost,
    exact_subset,
    greedy_subset,
    required_mass,
    restricted_optimal,
    subset_cost,
)


@st.composite
def instance(draw, max_size=11):
    n = draw(st.integers(1, max_size))
    G = draw(arrays(np.float64, n, elements=st.one_of(st.just(0.0), st.floats(0.01, 100.0))))
    if not G.any():
        G[0] = 1.0
    c = draw(arrays(np.float64, n, elements=st.floats(0.01, 1e4)))
    frac = draw(st.floats(0.0, 1.0))  # Γ as a fraction of the largest useful budget D·ΣG/n
    D = draw(st.floats(0.1, 10.0))
    gamma = frac * D * G.sum() / n
    return G, c, gamma, D


def _brute_force(G, c, gamma, D):
    need = required_mass(G, gamma, D)
    w = G * np.sqrt(c)
    best = np.inf
    for k in range(G.size + 1):
        for S in itertools.combinations(range(G.size), k):
            S = list(S)
            if G[S].sum() >= need - 1e-9 * G.sum():
                best = min(best, w[S].sum())
    return best


def _feasible(G, subset, gamma, D):
    return G[subset].sum() >= required_mass(G, gamma, D) - 1e-9 * G.sum()


@settings(max_examples=200, deadline=None)
@given(instance())
def test_greedy_within_two_of_exact_and_both_feasible(inst):
    G, c, gamma, D = inst
    g = greedy_subset(G, c, gamma, D)
    e = exact_subset(G, c, gamma, D)
    assert _feasible(G, g, gamma, D) and _feasible(G, e, gamma, D)
    # bias budget holds: D·β_π ≤ Γ
    assert D * bias(G, g) <= gamma + 1e-9 * D * G.sum()
    cg, ce = subset_cost(G, c, g), subset_cost(G, c, e)
    assert ce <= cg * (1 + 1e-9) + 1e-12
    assert cg <= 2 * ce * (1 + 1e-9) + 1e-12
    assert ce == pytest.approx(_brute_force(G, c, gamma, D), rel=1e-9, abs=1e-12)
    assert np.all(G[g] > 0) and np.all(np.diff(c[g]) >= 0)


def test_paper_prefix_greedy_is_unbounded_and_completion_fixes_it():
    """A (cheap, G=1), B (c=1, G=M), C (c=4, G=1), need 2: prefix takes A,B (≈M); optimum A,C (≈2)."""
    M = 1e4
    G = np.array([1.0, M, 1.0])
    c = np.array([1e-6, 1.0, 4.0])
    D = 1.0
    gamma = (G.sum() - 2.0) / G.size  # V = 2
    prefix = greedy_subset(G, c, gamma, D, method="prefix")
    completion = greedy_subset(G, c, gamma, D)
    exact = exact_subset(G, c, gamma, D)
    assert sorted(prefix.tolist()) == [0, 1] and subset_cost(G, c, prefix) > 1000 * subset_cost(G, c, exact)
    assert sorted(completion.tolist()) == sorted(exact.tolist()) == [0, 2]


def test_gamma_zero_keeps_everything_and_huge_gamma_keeps_nothing():
    rng = np.random.default_rng(0)
    G, c = np.r_[rng.uniform(0.1, 2, 9), 0.0], rng.uniform(1, 100, 10)
    assert sorted(greedy_subset(G, c, 0.0, 1.0).tolist()) == list(range(9))
    assert sorted(exact_subset(G, c, 0.0, 1.0).tolist()) == list(range(9))
    assert greedy_subset(G, c, 10.0, 1.0).size == 0 and exact_subset(G, c, 10.0, 1.0).size == 0


def test_greedy_prefix_matches_paper_description_on_uniform_G():
    G, c = np.ones(4), np.array([9.0, 1.0, 100.0, 4.0])
    # may drop mass nΓ/D = 1: keep the 3 cheapest
    assert greedy_subset(G, c, 0.25, 1.0, method="prefix").tolist() == [1, 3, 0]
    assert greedy_subset(G, c, 0.25, 1.0).tolist() == [1, 3, 0]


def test_greedy_scales_to_large_n():
    rng = np.random.default_rng(1)
    n = 200_000
    G, c = rng.uniform(0, 2, n), rng.uniform(1, 1000, n)
    gamma = 0.3 * G.sum() / n
    g = greedy_subset(G, c, gamma, 1.0)
    assert _feasible(G, g, gamma, 1.0)
    p = greedy_subset(G, c, gamma, 1.0, method="prefix")
    assert subset_cost(G, c, g) <= subset_cost(G, c, p) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(instance(max_size=8), st.data())
def test_biased_cost_matches_brute_force(inst, data):
    """K_π(ε) = D² S_π(q) C(q) / (ε − Dβ_π)² with q = p* restricted to π, computed from scratch."""
    G, c, _, D = inst
    n = G.size
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if not (G[mask] > 0).any():
        mask[np.argmax(G)] = True
    beta = G[~mask].sum() / n
    eps = D * beta + data.draw(st.floats(1e-3, 10.0))
    q = restricted_optimal(G, c, mask)
    assert np.all(q[~mask] == 0) and q.sum() == pytest.approx(1.0)
    keep = mask & (G > 0)
    S_pi = np.sum(G[keep] ** 2 / q[keep]) / n**2
    C_q = q @ c
    brute = D**2 * S_pi * C_q / (eps - D * beta) ** 2
    assert biased_cost(G, c, mask, eps, D) == pytest.approx(brute, rel=1e-9)
    assert biased_cost(G, c, np.flatnonzero(mask), eps, D) == pytest.approx(brute, rel=1e-9)
    # restricted p* minimises S_π·C over distributions on π
    rng = np.random.default_rng(0)
    r = rng.uniform(0.01, 1, n) * keep
    r /= r.sum()
    assert np.sum(G[keep] ** 2 / r[keep]) * (r @ c) >= np.sum(G[keep] ** 2 / q[keep]) * C_q * (1 - 1e-9)


def test_full_subset_reduces_to_unbiased_cost():
    rng = np.random.default_rng(2)
    G, c = rng.uniform(0.1, 2, 20), rng.uniform(1, 100, 20)
    from costaware import distributions as dist

    full = np.arange(20)
    assert bias(G, full) == 0
    assert biased_cost(G, c, full, 0.1, 2.0) == pytest.approx(
        th.expected_cost(0.1, dist.optimal(G, c), G, c, D=2.0), rel=1e-12
    )


def test_bad_input_raises_value_error():
    G, c = np.array([1.0, 2.0]), np.array([1.0, 4.0])
    with pytest.raises(ValueError, match="eps"):
        biased_cost(G, c, [0], 0.5, 1.0)  # β = 1, D·β = 1 ≥ ε
    with pytest.raises(ValueError, match="gamma"):
        greedy_subset(G, c, -0.1, 1.0)
    with pytest.raises(ValueError, match="D must be"):
        greedy_subset(G, c, 0.1, 0.0)
    with pytest.raises(ValueError, match="method"):
        greedy_subset(G, c, 0.1, 1.0, method="lp")
    with pytest.raises(ValueError, match="c must be > 0"):
        greedy_subset(G, [1.0, 0.0], 0.1, 1.0)
    with pytest.raises(ValueError, match="finite"):
        exact_subset([1.0, np.nan], c, 0.1, 1.0)
    with pytest.raises(ValueError, match="all zeros"):
        exact_subset([0.0, 0.0], c, 0.1, 1.0)
    with pytest.raises(ValueError, match="mismatched"):
        greedy_subset(G, [1.0], 0.1, 1.0)
    with pytest.raises(ValueError, match="refuses m > 25"):
        exact_subset(np.ones(26), np.ones(26), 0.0, 1.0)
    with pytest.raises(ValueError, match="subset indices must lie"):
        bias(G, [2])
    with pytest.raises(ValueError, match="distinct"):
        subset_cost(G, c, [0, 0])
    with pytest.raises(ValueError, match="integer"):
        subset_cost(G, c, [0.5])
    with pytest.raises(ValueError, match="no component with G > 0"):
        restricted_optimal([0.0, 1.0], c, [0])
