"""costaware.theory (cost, proxy_quality, lower_bounds): J optimality, χ² identity, closed-form ratios,
Theorem D.5 by Monte-Carlo, lower bound."""

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from costaware import distributions as dist
from costaware import theory as th

pos = st.floats(1e-2, 1e2)


@st.composite
def G_c_p(draw, max_size=30, zeros=True):
    n = draw(st.integers(1, max_size))
    G = draw(arrays(np.float64, n, elements=st.one_of(st.just(0.0), pos) if zeros else pos))
    if not G.any():
        G[0] = 1.0
    c = draw(arrays(np.float64, n, elements=pos))
    p = draw(arrays(np.float64, n, elements=st.floats(1e-3, 1.0)))
    return G, c, p / p.sum()


@settings(max_examples=150, deadline=None)
@given(G_c_p())
def test_optimal_minimises_J(gcp):
    G, c, p = gcp
    j_star = th.J(dist.optimal(G, c), G, c)
    np.testing.assert_allclose(j_star, th.J_optimal(G, c), rtol=1e-10)
    assert j_star <= th.J(p, G, c) * (1 + 1e-10)


@settings(max_examples=150, deadline=None)
@given(G_c_p())
def test_chi2_identity_both_ways(gcp):
    """J(p′)/J(p*) = 1 + χ²(p̃*‖p̃′): direct ratio of J's, suboptimality(), and Σ p̃*²/p̃′ by hand."""
    G, c, p = gcp
    direct = th.J(p, G, c) / th.J_optimal(G, c)
    via_chi2 = th.suboptimality(p, G, c)
    ps = dist.optimal(G, c)
    qs, qp = ps * c / (ps @ c), p * c / (p @ c)
    by_hand = np.sum(qs**2 / qp)
    np.testing.assert_allclose(via_chi2, direct, rtol=1e-9)
    np.testing.assert_allclose(by_hand, direct, rtol=1e-9)
    assert via_chi2 >= 1 - 1e-12


def test_chi2_identity_fails_for_the_wrong_side():
    """The identity uses p̃* ‖ p̃′ — the reversed divergence gives a different number (test can fail)."""
    rng = np.random.default_rng(0)
    G, c = rng.uniform(0.1, 2, 20), rng.uniform(1, 100, 20)
    p = dist.variance(G)
    rev = 1 + th.chi2_divergence(th.cost_biased(p, c), th.cost_biased(dist.optimal(G, c), c))
    assert abs(rev - th.J(p, G, c) / th.J_optimal(G, c)) > 1e-3


def test_suboptimality_infinite_when_proxy_misses_support():
    G, c = np.array([1.0, 1.0]), np.array([1.0, 2.0])
    assert th.suboptimality([1.0, 0.0], G, c) == np.inf
    assert th.S([1.0, 0.0], G) == np.inf
    # Components with G = 0 may be missed at no cost
    assert np.isfinite(th.suboptimality([1.0, 0.0], [1.0, 0.0], c))


@settings(max_examples=150, deadline=None)
@given(G_c_p())
def test_closed_form_ratios_match_J_ratios(gcp):
    G, c, _ = gcp
    J = lambda q: th.J(q, G, c)  # noqa: E731
    pu, pv, ps = dist.uniform(G.size), dist.variance(G), dist.optimal(G, c)
    r_su, r_sv, r_vu = (
        th.ratio_optimal_to_uniform(G, c),
        th.ratio_optimal_to_variance(G, c),
        th.ratio_variance_to_uniform(G, c),
    )
    np.testing.assert_allclose(r_su, J(ps) / J(pu), rtol=1e-9)
    np.testing.assert_allclose(r_sv, J(ps) / J(pv), rtol=1e-9)
    np.testing.assert_allclose(r_vu, J(pv) / J(pu), rtol=1e-9)
    assert r_su <= 1 + 1e-12 and r_sv <= 1 + 1e-12
    np.testing.assert_allclose(r_su, r_sv * r_vu, rtol=1e-9)


def test_variance_to_uniform_can_exceed_one():
    # G and c positively correlated: variance sampling over-samples expensive components
    G, c = np.array([1.0, 10.0]), np.array([1.0, 100.0])
    assert th.ratio_variance_to_uniform(G, c) > 1
    assert th.ratio_variance_to_uniform(G, c[::-1]) < 1


def test_S_C_J_and_expected_cost_by_hand():
    G, c, p = np.array([1.0, 2.0, 0.0]), np.array([1.0, 4.0, 9.0]), np.array([0.5, 0.25, 0.25])
    S = (1 / 0.5 + 4 / 0.25) / 9
    C = 0.5 + 1 + 2.25
    assert th.S(p, G) == pytest.approx(S, rel=1e-14)
    assert th.C(p, c) == pytest.approx(C, rel=1e-14)
    assert th.J(p, G, c) == pytest.approx(S * C, rel=1e-14)
    assert th.expected_cost(0.1, p, G, c, D=2.0) == pytest.approx(4 * S * C / 0.01, rel=1e-14)
    assert th.expected_cost(0.1, p, G, c, mu=0.5) == pytest.approx(4 * S * C / 0.05, rel=1e-14)
    np.testing.assert_allclose(th.cost_biased(p, c), p * c / C, rtol=1e-14)
    assert th.chi2_divergence([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.25 / 0.25 + 0.25 / 0.75 - 1)


# --- Theorem D.5 -------------------------------------------------------------------------------


def _mc_ratio(G, c, sigma, m, rng, noise="normal"):
    """Mean and standard error of J(p′)/J(p*) over m noisy proxies G′ = G + ε (vectorised over rows)."""
    if noise == "normal":
        E = rng.normal(0.0, sigma, size=(m, G.size))
    else:  # uniform on [−a, a], variance a²/3 = σ²
        a = sigma * np.sqrt(3.0)
        E = rng.uniform(-a, a, size=(m, G.size))
    Gp = G + E
    assert Gp.min() > 0, "noise too large for this check: a proxy went non-positive"
    sq = np.sqrt(c)
    r = (np.sum(G**2 * sq / Gp, axis=1) * (Gp @ sq)) / np.sum(G * sq) ** 2
    return r.mean(), r.std() / np.sqrt(m), Gp


def test_mc_ratio_helper_agrees_with_theory_J():
    rng = np.random.default_rng(0)
    G, c = rng.uniform(1, 3, 8), rng.uniform(1, 100, 8)
    _, _, Gp = _mc_ratio(G, c, 0.1, 3, rng)
    for row in Gp:
        r = th.J(dist.optimal(row, c), G, c) / th.J_optimal(G, c)
        ref = (np.sum(G**2 * np.sqrt(c) / row) * (row @ np.sqrt(c))) / np.sum(G * np.sqrt(c)) ** 2
        assert r == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("noise", ["normal", "uniform"])
def test_theorem_D5_large_n_small_noise(noise):
    """n = 200, σ = 0.05·min G: both forms within 3% of the Monte-Carlo excess E[J(p′)]/J(p*) − 1.

    Error budget: 4th-order Taylor term ≈ 3σ²/G² ≈ 0.75% of the excess, the paper's dropped covariance
    term ≈ 1/n ≈ 0.5%, and Monte-Carlo error ≈ 0.3% (20000 proxies).
    """
    rng = np.random.default_rng(1)
    n = 200
    G, c = rng.uniform(1, 3, n), rng.uniform(1, 1000, n)
    sigma = 0.05
    mean, se, _ = _mc_ratio(G, c, sigma, 20_000, rng, noise)
    for cov in (False, True):
        pred = th.expected_suboptimality_noisy(G, c, sigma**2, covariance_term=cov)
        assert abs((pred - 1) - (mean - 1)) < 0.03 * (mean - 1) + 4 * se, (cov, pred, mean, se)


def test_theorem_D5_small_n_needs_the_covariance_term():
    """n = 5: the paper's form overshoots by ≈ 20%; with the covariance term it is within 2%."""
    rng = np.random.default_rng(2)
    G, c = rng.uniform(1, 3, 5), rng.uniform(1, 100, 5)
    sigma = 0.05
    mean, se, _ = _mc_ratio(G, c, sigma, 200_000, rng)
    excess = mean - 1
    paper = th.expected_suboptimality_noisy(G, c, sigma**2) - 1
    full = th.expected_suboptimality_noisy(G, c, sigma**2, covariance_term=True) - 1
    assert abs(full - excess) < 0.02 * excess + 4 * se
    assert (paper - excess) > 0.1 * excess


def test_theorem_D5_breaks_for_large_noise():
    """σ = 0.5·min G (uniform noise, so G′ > 0): higher-order terms dominate; the approximation
    underestimates the Monte-Carlo excess by ≈ 20% (asserted > 15%), against < 3% at σ = 0.05·min G.
    This is where the second-order expansion stops holding."""
    rng = np.random.default_rng(3)
    n = 200
    G, c = rng.uniform(1, 3, n), rng.uniform(1, 1000, n)
    sigma = 0.5
    mean, se, _ = _mc_ratio(G, c, sigma, 20_000, rng, "uniform")
    pred = th.expected_suboptimality_noisy(G, c, sigma**2, covariance_term=True)
    assert (mean - 1) - (pred - 1) > 0.15 * (mean - 1)


@settings(max_examples=50, deadline=None)
@given(G_c_p(zeros=False), st.floats(0.05, 1.0))
def test_pearson_form_equals_sigma_form(gcp, rho):
    G, c, _ = gcp
    assume(np.var(G) > 1e-6 * np.mean(G) ** 2)
    s2 = np.var(G) * (1 - rho**2) / rho**2
    for cov in (False, True):
        a = th.expected_suboptimality_pearson(G, c, rho, covariance_term=cov)
        b = th.expected_suboptimality_noisy(G, c, s2, covariance_term=cov)
        assert a == pytest.approx(b, rel=1e-12)
    assert th.expected_suboptimality_pearson(G, c, 1.0) == pytest.approx(1.0)


def test_pearson_matches_realised_correlation():
    """ρ from noise_variance_from_pearson is the correlation one actually gets between G and G + ε."""
    rng = np.random.default_rng(4)
    G = rng.uniform(1, 3, 400_000)
    s2 = th.noise_variance_from_pearson(0.8, np.var(G))
    Gp = G + rng.normal(0, np.sqrt(s2), G.size)
    assert th.pearson(G, Gp) == pytest.approx(0.8, abs=3e-3)


def test_pearson_of_known_pairs_and_errors_on_constant_or_short_input():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert th.pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert th.pearson(x, -x) == pytest.approx(-1.0)
    assert th.pearson(x, [1.0, -1.0, -1.0, 1.0]) == pytest.approx(0.0, abs=1e-15)
    np.testing.assert_allclose(th.pearson(x, [3.0, 1.0, 4.0, 1.0]), np.corrcoef(x, [3, 1, 4, 1])[0, 1])
    with pytest.raises(ValueError, match="y is constant"):
        th.pearson(x, np.full(4, 0.3))
    with pytest.raises(ValueError, match="x is constant"):
        th.pearson(np.full(4, 1e12), x)
    with pytest.raises(ValueError, match="at least 2"):
        th.pearson([1.0], [2.0])
    with pytest.raises(ValueError, match="mismatched"):
        th.pearson(x, x[:3])
    with pytest.raises(ValueError, match="finite"):
        th.pearson([1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="rho"):
        th.expected_suboptimality_pearson([1.0, 2.0], [1.0, 1.0], 0.0)
    with pytest.raises(ValueError, match="constant"):
        th.expected_suboptimality_pearson([1.0, 1.0], [1.0, 1.0], 0.5)
    with pytest.raises(ValueError, match="G must be > 0"):
        th.expected_suboptimality_noisy([1.0, 0.0], [1.0, 1.0], 0.1)
    with pytest.raises(ValueError, match="sigma2"):
        th.expected_suboptimality_noisy([1.0, 2.0], [1.0, 1.0], -0.1)


# --- lower bound -------------------------------------------------------------------------------


def _brute_force_S(c, kappa):
    """max Σ_S √c over all non-empty S with max_S √c ≤ κ Σ_S √c (same relative slack as the code)."""
    r = np.sqrt(c)
    best = 0.0
    for k in range(1, c.size + 1):
        for S in itertools.combinations(range(c.size), k):
            s = r[list(S)]
            if s.max() <= kappa * s.sum() * (1 + 1e-12):
                best = max(best, s.sum())
    return best


@settings(max_examples=80, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 9), elements=st.floats(1.0, 1e4)),
    st.floats(0.01, 1.0),
)
def test_lower_bound_set_equals_brute_force(c, eps):
    lb = th.lower_bound(c, 1.0, eps)
    best = _brute_force_S(c, lb.kappa)
    found = float(np.sqrt(c[lb.subset]).sum())
    assert found == pytest.approx(best, rel=1e-12, abs=0)
    if lb.k:
        s = np.sqrt(c[lb.subset])
        assert s.max() <= lb.kappa * s.sum() * (1 + 1e-12)
        # S* is the k cheapest components
        assert np.sort(c)[: lb.k] == pytest.approx(np.sort(c[lb.subset]))
        assert lb.value == pytest.approx((1 / 32) / eps**2 * (found / c.size) ** 2, rel=1e-12)
    else:
        assert lb.value == 0.0


@settings(max_examples=80, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 50), elements=st.floats(1.0, 1e4)),
    st.floats(1e-3, 10.0),
    st.floats(0.1, 10.0),
    st.floats(0.1, 10.0),
)
def test_lower_bound_below_upper_bound_uniform_G(c, eps, G, D):
    lb = th.lower_bound(c, G, eps, D=D)
    ub = th.expected_cost(eps, dist.optimal(np.full(c.size, G), c), np.full(c.size, G), c, D=D)
    assert lb.value <= ub * (1 + 1e-12)


def test_lower_bound_uniform_costs_matches_upper_bound_up_to_constant():
    c, G, eps = np.full(100, 7.0), 2.0, 0.3  # ε ≥ G√(ln 20/(3n)) ≈ 0.2: Step 2 regime
    lb = th.lower_bound(c, G, eps)
    ub = th.expected_cost(eps, dist.uniform(100), np.full(100, G), c, D=1.0)
    assert lb.k == 100 and lb.step2_holds
    assert ub / lb.value == pytest.approx(32.0, rel=1e-12)
    # at ε = G·D/shift exactly every prefix is (tightly) feasible; just above, none is
    assert th.lower_bound(c, G, G).k == 100
    assert th.lower_bound(c, G, G * 1.001).k == 0


def test_lower_bound_excludes_expensive_components_and_non_monotone_prefixes():
    c = np.r_[np.ones(10), 1e6]
    lb = th.lower_bound(c, 1.0, 0.5)  # κ = 1/(0.5·11)
    assert lb.k == 10 and 10 not in lb.subset
    # prefix [1] infeasible (κ < 1) but [10] feasible: the search takes the largest feasible k
    assert lb.kappa < 1
    # a jump breaks [k] for middle k, later prefixes recover: k* is the last feasible one
    c2 = np.r_[np.ones(5), 400.0, np.full(200, 400.0)]
    lb2 = th.lower_bound(c2, 1.0, 0.02)
    r = np.sqrt(np.sort(c2))
    feas = r <= lb2.kappa * np.cumsum(r)
    assert not feas.all() and lb2.k == np.flatnonzero(feas)[-1] + 1 == 206


def test_lower_bound_rejects_non_positive_or_empty_input():
    with pytest.raises(ValueError, match="c must be > 0"):
        th.lower_bound([1.0, 0.0], 1.0, 0.1)
    with pytest.raises(ValueError, match="G must be > 0"):
        th.lower_bound([1.0], 0.0, 0.1)
    with pytest.raises(ValueError, match="eps"):
        th.lower_bound([1.0], 1.0, np.inf)
    with pytest.raises(ValueError, match="empty"):
        th.lower_bound([], 1.0, 0.1)


# --- bad input for the existing functions -------------------------------------------------------


def test_bad_input_raises_value_error():
    G, c, p = [1.0, 2.0], [1.0, 2.0], [0.5, 0.5]
    calls = {
        "S": lambda G=G, c=c, p=p: th.S(p, G),
        "C": lambda G=G, c=c, p=p: th.C(p, c),
        "J": lambda G=G, c=c, p=p: th.J(p, G, c),
        "J_optimal": lambda G=G, c=c, p=p: th.J_optimal(G, c),
        "ratio_su": lambda G=G, c=c, p=p: th.ratio_optimal_to_uniform(G, c),
        "ratio_sv": lambda G=G, c=c, p=p: th.ratio_optimal_to_variance(G, c),
        "ratio_vu": lambda G=G, c=c, p=p: th.ratio_variance_to_uniform(G, c),
        "cost_biased": lambda G=G, c=c, p=p: th.cost_biased(p, c),
        "suboptimality": lambda G=G, c=c, p=p: th.suboptimality(p, G, c),
        "expected_cost": lambda G=G, c=c, p=p: th.expected_cost(0.1, p, G, c, D=1.0),
    }
    uses_G = {"S", "J", "J_optimal", "ratio_su", "ratio_sv", "ratio_vu", "suboptimality", "expected_cost"}
    uses_c = set(calls) - {"S"}
    uses_p = {"S", "C", "J", "cost_biased", "suboptimality", "expected_cost"}
    for name, f in calls.items():
        f()  # the good call works
        if name in uses_G:
            for bad, match in (([1.0, np.nan], "finite"), ([0.0, 0.0], "all zeros"), ([1.0, -1.0], ">= 0")):
                with pytest.raises(ValueError, match=match):
                    f(G=bad)
            with pytest.raises(ValueError, match="mismatched"):
                f(G=[1.0, 2.0, 3.0])
        if name in uses_c:
            for bad, match in (([1.0, np.inf], "finite"), ([1.0, 0.0], "> 0"), ([1.0, -2.0], "> 0")):
                with pytest.raises(ValueError, match=match):
                    f(c=bad)
            with pytest.raises(ValueError, match="mismatched"):
                f(c=[1.0])
        if name in uses_p:
            for bad, match in (([0.5, 0.6], "sum to 1"), ([1.5, -0.5], ">= 0"), ([], "empty")):
                with pytest.raises(ValueError, match=match):
                    f(p=bad)
    with pytest.raises(ValueError, match="exactly one"):
        th.expected_cost(0.1, p, G, c)
    with pytest.raises(ValueError, match="exactly one"):
        th.expected_cost(0.1, p, G, c, D=1.0, mu=1.0)
    with pytest.raises(ValueError, match="eps"):
        th.expected_cost(0.0, p, G, c, D=1.0)
    with pytest.raises(ValueError, match="mu"):
        th.expected_cost(0.1, p, G, c, mu=-1.0)
    with pytest.raises(ValueError, match="mismatched"):
        th.chi2_divergence([0.5, 0.5], [1.0])
