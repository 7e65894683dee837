"""distributions.py: shapes, closed forms, importance-weight unbiasedness, bad input."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from costaware import distributions as dist

pos = st.floats(1e-3, 1e3, allow_nan=False, allow_infinity=False)
nonneg = st.one_of(st.just(0.0), st.floats(1e-3, 1e3))


@st.composite
def G_c(draw, min_size=1, max_size=40):
    n = draw(st.integers(min_size, max_size))
    G = draw(arrays(np.float64, n, elements=nonneg))
    if not G.any():
        G[draw(st.integers(0, n - 1))] = 1.0
    c = draw(arrays(np.float64, n, elements=pos))
    return G, c


@settings(max_examples=100, deadline=None)
@given(G_c())
def test_optimal_is_proportional_to_G_over_sqrt_c(gc):
    G, c = gc
    p = dist.optimal(G, c)
    assert p.shape == G.shape and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-12)
    ref = (G / np.sqrt(c)) / np.sum(G / np.sqrt(c))
    np.testing.assert_allclose(p, ref, rtol=1e-12, atol=1e-300)
    assert np.array_equal(p > 0, G > 0)


@settings(max_examples=60, deadline=None)
@given(G_c())
def test_variance_uniform_and_inverse_sqrt_match_closed_forms(gc):
    G, c = gc
    np.testing.assert_allclose(dist.variance(G), G / G.sum(), rtol=1e-12)
    np.testing.assert_allclose(dist.uniform(G.size), np.full(G.size, 1 / G.size), rtol=1e-15)
    np.testing.assert_allclose(dist.inverse_sqrt_cost(c), dist.optimal(np.ones_like(c), c), rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(G_c(), st.floats(0.0, 1.0))
def test_smoothed_mixes_p_with_uniform(gc, alpha):
    G, c = gc
    p = dist.optimal(G, c)
    q = dist.smoothed(p, alpha)
    np.testing.assert_allclose(q, (1 - alpha) * p + alpha / p.size, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(q.sum(), 1.0, rtol=1e-12)
    if alpha / p.size > 0:  # (a subnormal α can underflow α/n to 0)
        assert dist.support_size(q) == q.size
    np.testing.assert_array_equal(dist.smoothed(p, 0.0), p)
    np.testing.assert_allclose(dist.smoothed(p, 1.0), dist.uniform(p.size), rtol=1e-12)


def test_noisy_proxy_moments_and_reproducibility():
    G = np.full(200_000, 5.0)
    a = dist.noisy_proxy(G, 0.25, rng=3)
    np.testing.assert_array_equal(a, dist.noisy_proxy(G, 0.25, rng=3))
    # N(0, 0.25) noise far from the clip at 0: mean 5 ± 3·0.5/√n, variance 0.25 ± 3·0.25·√(2/n)
    assert abs(a.mean() - 5.0) < 3 * 0.5 / np.sqrt(G.size)
    assert abs(a.var() - 0.25) < 3 * 0.25 * np.sqrt(2 / G.size)
    np.testing.assert_array_equal(dist.noisy_proxy(G, 0.0), G)
    clipped = dist.noisy_proxy(np.zeros(1000), 1.0, rng=0)
    assert clipped.min() == 0.0 and (clipped > 0).any()


def test_support_size_counts_the_positive_entries():
    assert dist.support_size([0.5, 0.0, 0.5]) == 2


@settings(max_examples=80, deadline=None)
@given(G_c(), st.sampled_from(["centred", "raw"]))
def test_weights_closed_form_and_centring(gc, mode):
    G, c = gc
    p = dist.optimal(G, c)
    w = dist.importance_weights(p, mode=mode)
    supp = p > 0
    n = supp.sum() if mode == "centred" else p.size
    np.testing.assert_allclose(w[supp], 1 / (n * p[supp]), rtol=1e-12)
    assert np.all(w[~supp] == 0)
    # E_p[w] = n_supp/n for raw and exactly 1 for centred
    expected = 1.0 if mode == "centred" else supp.sum() / p.size
    np.testing.assert_allclose(p @ w, expected, rtol=1e-10)
    idx = np.flatnonzero(supp)
    np.testing.assert_allclose(dist.importance_weights(p, idx, mode=mode), w[idx], rtol=0)


def test_importance_weighted_gradient_is_unbiased_on_least_squares():
    """Monte-Carlo: E_{i~p}[w_i ∇f_i(x)] = ∇f(x) for f = (1/n) Σ ½(a_i·x − b_i)², raw weights."""
    rng = np.random.default_rng(0)
    n, d, m = 60, 5, 400_000
    A = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=(n, 1))
    b = rng.normal(size=n)
    x = rng.normal(size=d)
    grads = A * (A @ x - b)[:, None]  # ∇f_i(x), rows
    full = grads.mean(0)
    G = np.linalg.norm(grads, axis=1)
    c = rng.uniform(1, 1000, size=n)
    p = dist.optimal(G, c)
    idx = rng.choice(n, size=m, p=p)
    w = dist.importance_weights(p, idx, mode="raw")
    samples = w[:, None] * grads[idx]
    est = samples.mean(0)
    se = samples.std(0) / np.sqrt(m)
    assert np.all(np.abs(est - full) < 4 * se), (est, full, se)
    # The test can fail: a biased weighting (no 1/(n p) factor) is far outside 4 SE.
    biased = grads[idx].mean(0)
    assert np.any(np.abs(biased - full) > 20 * se)


def test_centred_weights_have_unit_mean_under_p_monte_carlo():
    rng = np.random.default_rng(1)
    G = np.r_[np.zeros(10), rng.uniform(0, 2, 90)]
    c = rng.uniform(1, 100, 100)
    p = dist.optimal(G, c)
    idx = rng.choice(p.size, size=500_000, p=p)
    w = dist.importance_weights(p, idx, mode="centred")
    assert abs(w.mean() - 1.0) < 4 * w.std() / np.sqrt(w.size)


BAD_VECTORS = [
    ([1.0, np.nan], "finite"),
    ([1.0, np.inf], "finite"),
    ([], "empty"),
    ([[1.0, 2.0]], "1-D"),
    (["a", "b"], "numeric"),
]


@pytest.mark.parametrize(("bad", "match"), BAD_VECTORS)
def test_bad_vectors_raise_in_every_function(bad, match):
    for call in (
        lambda: dist.variance(bad),
        lambda: dist.optimal(bad, [1.0, 1.0]),
        lambda: dist.optimal([1.0, 1.0], bad),
        lambda: dist.inverse_sqrt_cost(bad),
        lambda: dist.smoothed(bad, 0.1),
        lambda: dist.noisy_proxy(bad, 0.1),
        lambda: dist.importance_weights(bad),
    ):
        with pytest.raises(ValueError, match=match):
            call()


def test_bad_values_raise_value_error_naming_the_argument():
    with pytest.raises(ValueError, match=r"c must be > 0"):
        dist.optimal([1.0, 1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"c must be > 0"):
        dist.inverse_sqrt_cost([1.0, -2.0])
    with pytest.raises(ValueError, match=r"G must be >= 0"):
        dist.optimal([1.0, -1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="all zeros"):
        dist.optimal([0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="all zeros"):
        dist.variance([0.0, 0.0])
    with pytest.raises(ValueError, match="mismatched lengths"):
        dist.optimal([1.0, 1.0], [1.0, 1.0, 1.0])
    for alpha in (-0.1, 1.1, np.nan, np.inf):
        with pytest.raises(ValueError, match="alpha"):
            dist.smoothed([0.5, 0.5], alpha)
    with pytest.raises(ValueError, match="sum to 1"):
        dist.smoothed([0.5, 0.6], 0.1)
    with pytest.raises(ValueError, match="sigma2"):
        dist.noisy_proxy([1.0], -1.0)
    with pytest.raises(ValueError, match="sigma2"):
        dist.noisy_proxy([1.0], np.nan)
    for n in (0, -1, 2.5):
        with pytest.raises(ValueError, match="n must be"):
            dist.uniform(n)
    with pytest.raises(ValueError, match="mode"):
        dist.importance_weights([0.5, 0.5], mode="self-normalised")
    with pytest.raises(ValueError, match="indices must lie"):
        dist.importance_weights([0.5, 0.5], [2])
    with pytest.raises(ValueError, match="p = 0"):
        dist.importance_weights([1.0, 0.0], [1])


@pytest.mark.parametrize("n", [np.inf, -np.inf, np.nan, 1e30, 10**30, 2**63, np.float64(1e19), 2.5, True, None, "3"])
def test_uniform_rejects_non_integer_infinite_or_huge_n(n):
    with pytest.raises(ValueError, match=rf"n must be a positive integer.*got {re.escape(repr(n))}"):
        dist.uniform(n)


def test_uniform_accepts_integral_n_of_any_numeric_type():
    for n in (3, np.int64(3), np.uint8(3), 3.0):
        np.testing.assert_array_equal(dist.uniform(n), np.full(3, 1 / 3))


@pytest.mark.parametrize(
    "indices, dtype",
    [([True, False], "bool"), (np.array([True, True]), "bool"), ([0.0, 1.0], "float64"), ([1.5], "float64")],
)
def test_importance_weights_rejects_bool_and_float_indices(indices, dtype):
    with pytest.raises(ValueError, match=rf"indices must be integers, got dtype {dtype}: \["):
        dist.importance_weights([0.5, 0.5], indices)


def test_importance_weights_integer_and_empty_indices():
    p = np.array([0.5, 0.25, 0.25])
    for idx in ([1, 2], np.array([1, 2], dtype=np.uint32)):
        np.testing.assert_allclose(dist.importance_weights(p, idx, mode="raw"), [4 / 3, 4 / 3])
    for empty in ([], np.array([], dtype=np.int64)):
        assert dist.importance_weights(p, empty).shape == (0,)


def test_support_size_rejects_negative_entries():
    with pytest.raises(ValueError, match=r"p must be >= 0, got -0.5 at index 1"):
        dist.support_size([0.5, -0.5, 1.0])
    assert dist.support_size([0.0, 0.0]) == 0  # a count, not a distribution: all zeros is allowed
