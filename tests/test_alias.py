"""Alias tables: exact reconstruction, chi-square goodness of fit, zero-mass columns, numba draws."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit
from scipy import stats

from costaware.alias import (
    AliasTable,
    alias_draw,
    alias_draw_single,
    alias_probabilities,
    build_alias,
    draw,
)


def _random_p(rng, n, zero_frac=0.3):
    p = rng.random(n) ** 3
    p[rng.random(n) < zero_frac] = 0.0
    if not p.any():
        p[rng.integers(n)] = 1.0
    return p / p.sum()


@njit
def _draw_two(prob, alias, u1, u2):
    out = np.empty(u1.size, dtype=np.int64)
    for k in range(u1.size):
        out[k] = alias_draw(prob, alias, u1[k], u2[k])
    return out


@njit
def _draw_one(prob, alias, u):
    out = np.empty(u.size, dtype=np.int64)
    for k in range(u.size):
        out[k] = alias_draw_single(prob, alias, u[k])
    return out


def _chi2_pvalue(idx, p):
    """Pearson chi-square over the support of p (zero-mass components are checked separately)."""
    counts = np.bincount(idx, minlength=p.size)
    keep = p > 0
    assert counts[~keep].sum() == 0, "a component with p = 0 was drawn"
    expected = p[keep] * idx.size
    return stats.chisquare(counts[keep], expected).pvalue


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), zero_frac=st.sampled_from([0.0, 0.3, 0.9]))
def test_table_encodes_p_exactly(n, seed, zero_frac):
    p = _random_p(np.random.default_rng(seed), n, zero_frac)
    prob, alias = build_alias(p)
    assert prob.dtype == np.float64 and alias.dtype == np.int64
    assert np.all((prob >= 0) & (prob <= 1))
    assert np.all((alias >= 0) & (alias < n))
    np.testing.assert_allclose(alias_probabilities(prob, alias), p, rtol=0, atol=1e-14 * max(n, 1))
    # A zero-mass component owns no mass in its own column and is nobody's alias.
    zero = p == 0
    assert np.all(prob[zero] == 0)
    assert not np.isin(alias[prob < 1], np.flatnonzero(zero)).any()


def test_large_table_encodes_p_to_1e_minus_12():
    p = _random_p(np.random.default_rng(7), 1_000_000)
    prob, alias = build_alias(p)
    np.testing.assert_allclose(alias_probabilities(prob, alias), p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chi_square_goodness_of_fit_numpy_draws(seed):
    rng = np.random.default_rng(seed)
    p = _random_p(rng, 200)
    prob, alias = build_alias(p)
    idx = draw(prob, alias, 2_000_000, rng)
    # Under H0 the p-value is uniform: 1e-4 fails a correct sampler once in 10^4 runs (seeds are fixed).
    assert _chi2_pvalue(idx, p) > 1e-4


def test_chi_square_detects_a_wrong_distribution():
    """The test above can fail: the same statistic rejects a table for a slightly different p."""
    rng = np.random.default_rng(3)
    p = _random_p(rng, 200, zero_frac=0.0)
    q = p.copy()
    q[0] += 0.01
    q /= q.sum()
    prob, alias = build_alias(q)
    idx = draw(prob, alias, 2_000_000, rng)
    assert _chi2_pvalue(idx, p) < 1e-10


def test_chi_square_numba_two_uniform_and_single_uniform_forms():
    rng = np.random.default_rng(11)
    p = _random_p(rng, 500)
    prob, alias = build_alias(p)
    m = 2_000_000
    idx2 = _draw_two(prob, alias, rng.random(m), rng.random(m))
    idx1 = _draw_one(prob, alias, rng.random(m))
    assert _chi2_pvalue(idx2, p) > 1e-4
    assert _chi2_pvalue(idx1, p) > 1e-4


def test_numba_draw_matches_rule_at_boundaries():
    prob, alias = build_alias([0.75, 0.25])  # prob = [1, .5], alias = [0, 0]
    u1 = np.array([0.0, 0.49, 0.5, 0.99, np.nextafter(1.0, 0.0), 0.7])
    u2 = np.array([0.9, 0.9, 0.49, 0.49, 0.51, 0.5])
    np.testing.assert_array_equal(_draw_two(prob, alias, u1, u2), [0, 0, 1, 1, 0, 0])
    # single uniform: x = 2u; u = .8 → column 1, coin .6 ≥ .5 → alias 0; u = .7 → coin .4 → 1
    np.testing.assert_array_equal(_draw_one(prob, alias, np.array([0.1, 0.8, 0.7])), [0, 0, 1])


def test_degenerate_distributions_draw_only_their_support():
    prob, alias = build_alias([1.0])
    assert draw(prob, alias, 10, 0).tolist() == [0] * 10
    prob, alias = build_alias([0.0, 0.0, 1.0, 0.0])
    assert set(draw(prob, alias, 10_000, 0).tolist()) == {2}


def test_same_seed_same_draws_and_shape():
    prob, alias = build_alias(np.full(10, 0.1))
    a = draw(prob, alias, (3, 4), np.random.default_rng(5))
    b = draw(prob, alias, (3, 4), np.random.default_rng(5))
    assert a.shape == (3, 4) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    t = AliasTable(np.full(10, 0.1))
    np.testing.assert_array_equal(t.sample(7, rng=1), draw(t.prob, t.alias, 7, np.random.default_rng(1)))
    assert len(t) == 10


def test_sum_tolerance_is_renormalised():
    p = np.array([0.5, 0.5]) * (1 + 1e-9)
    prob, alias = build_alias(p)
    np.testing.assert_allclose(alias_probabilities(prob, alias), [0.5, 0.5], atol=1e-15)


@pytest.mark.parametrize(
    ("p", "match"),
    [
        ([], "must not be empty"),
        ([0.5, np.nan], "finite"),
        ([0.5, np.inf], "finite"),
        ([1.5, -0.5], ">= 0"),
        ([0.0, 0.0], "at least one entry > 0"),
        ([0.2, 0.2], "sum to 1"),
        ([[0.5, 0.5]], "1-D"),
    ],
)
def test_bad_p_raises_value_error_naming_it(p, match):
    with pytest.raises(ValueError, match=match):
        build_alias(p)


def test_bad_table_raises_value_error_naming_the_array():
    with pytest.raises(ValueError, match="equal length"):
        draw(np.ones(3), np.zeros(2, dtype=np.int64), 5)
    with pytest.raises(ValueError, match="integer"):
        draw(np.ones(3), np.zeros(3), 5)
