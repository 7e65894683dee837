"""Tests for costaware.grpo.proxy: the calibrated proxy G ≈ |A|·c^β, its fit, shrinkage and smoothing.

Synthetic per-row gradients are built explicitly: row i has c_i token vectors (unequal lengths) and its
gradient is A_i times their sum. Independent tokens give ‖g_i‖ ∝ |A_i| c_i^½ and aligned ones
‖g_i‖ ∝ |A_i| c_i, with a noise factor that does not depend on c, so the log-linear model is exact.
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware import distributions as dist
from costaware import theory
from costaware.grpo import losses, proxy
from costaware.grpo.proxy import (
    BETA_BOUNDS,
    BetaCalibrator,
    BetaFit,
    adaptive_alpha,
    fit_beta,
    loss_family,
    predicted_j_ratios,
    proxy_probs,
    shrink,
)


def synthetic_pool(n, *, aligned, rng, d=16, zero_frac=0.25, min_len=4, max_len=300):
    """(per-row gradients (n, d), A (n,), c (n,)) from explicit token vectors, rows of unequal length."""
    c = rng.integers(min_len, max_len + 1, size=n)
    a = rng.normal(size=n)
    a[rng.random(n) < zero_frac] = 0.0  # groups with equal rewards
    row = np.repeat(np.arange(n), c)
    if aligned:  # every token of a row points the same way, at a per-row scale s_i
        u = rng.normal(size=(n, d))
        u *= (np.exp(0.3 * rng.normal(size=n)) / np.linalg.norm(u, axis=1))[:, None]
        tokens = u[row]
    else:  # independent token directions
        tokens = rng.normal(size=(c.sum(), d)) / math.sqrt(d)
    sums = np.add.reduceat(tokens, np.r_[0, np.cumsum(c)[:-1]], axis=0)
    return a[:, None] * sums, a, c.astype(float)


# ---------------------------------------------------------------------------------------------
# loss families


def test_doctests_pass():
    assert doctest.testmod(proxy, raise_on_error=False).failed == 0


@pytest.mark.parametrize(
    "mode,expected", [("seq-mean-token-mean", -0.5), ("token-mean", 0.5), ("seq-mean-token-sum", 0.5)]
)
def test_family_matches_the_aggregation_formula(mode, expected):
    """Exact gradients of each aggregation on independent token vectors: the slope separates families.

    A linear per-token loss ℓ_t = A·(v_t·θ): a row-mean gives ‖∇‖ ∝ c^−½, a row-sum ∝ c^½.
    """
    rng = np.random.default_rng(0)
    n, d = 40, 16
    c = rng.integers(4, 200, size=n)
    T = int(c.max())
    v = torch.tensor(rng.normal(size=(n, T, d)) / math.sqrt(d))
    mask = torch.tensor(np.arange(T)[None, :] < c[:, None], dtype=torch.float64)
    a = torch.tensor(rng.choice([-1.0, 1.0], size=n) * rng.uniform(0.2, 2.0, size=n))
    theta = torch.zeros(d, dtype=torch.float64, requires_grad=True)
    token_losses = a[:, None] * (v @ theta)
    # gradient of each row's share of the batch loss: seq_weights one-hot through the aggregation
    norms = []
    for i in range(n):  # a handful of rows, each one autograd call
        w = torch.zeros(n, dtype=torch.float64)
        w[i] = 1.0
        out = losses.aggregate(token_losses, mask, mode, seq_weights=w, num_tokens=1000.0, num_sequences=n)
        (g,) = torch.autograd.grad(out, theta, retain_graph=True)
        norms.append(float(g.norm()))
    fit = fit_beta(a.abs().numpy(), np.array(norms), c.astype(float))
    assert abs(fit.beta_hat - expected) < 0.15, (mode, fit)
    fam = loss_family(mode)
    assert (fam.name == "sequence_mean") == (expected < 0)


def test_every_trl_loss_type_has_a_family():
    # read TRL's GRPOConfig source rather than import it (importing trl takes ~10 s)
    spec = importlib.util.find_spec("trl")
    if spec is None:
        pytest.skip("trl not installed")
    text = (Path(spec.origin).parent / "trainer" / "grpo_config.py").read_text()
    supported = text[text.index("loss_type: str") :].split("Supported values are")[1].split(". ")[0]
    names = set(re.findall(r"'([a-z_]+)'", supported))
    assert {"grpo", "dapo", "cispo", "dr_grpo", "bnpo", "sapo", "luspo", "vespo"} <= names
    families = {n: loss_family(n).name for n in names}
    assert {n for n, f in families.items() if f == "sequence_mean"} == {"grpo", "sapo"}
    assert set(proxy.LOSS_FAMILY_PRIOR_BETA) == {"sequence_mean", "token_sum"}
    assert proxy.LOSS_FAMILY_PRIOR_BETA["sequence_mean"] == 0.0
    assert 0.5 <= proxy.LOSS_FAMILY_PRIOR_BETA["token_sum"] <= 1.60  # theory 1/2..1, measured 0.56..1.60


def test_unknown_loss_type_names_the_value():
    with pytest.raises(ValueError, match="'mean'"):
        loss_family("mean")


# ---------------------------------------------------------------------------------------------
# proxy_probs


def test_proxy_probs_formula_and_paper_special_case():
    rng = np.random.default_rng(1)
    a, c = np.abs(rng.normal(size=30)), rng.integers(3, 400, size=30).astype(float)
    a[:5] = 0.0
    np.testing.assert_allclose(proxy_probs(a, c, beta=0.0), dist.optimal(a, c), rtol=1e-12)
    np.testing.assert_allclose(proxy_probs(a, c, beta=0.5), a / a.sum(), rtol=1e-12)
    p = proxy_probs(a, c, beta=1.3, alpha=0.2)
    np.testing.assert_allclose(p, dist.smoothed(dist.optimal(a * c**1.3, c), 0.2), rtol=1e-12)


def test_proxy_probs_does_not_overflow():
    c = np.array([1.0, 1e200, 1e300])
    p = proxy_probs([1.0, 1.0, 1e-300], c, beta=2.0)
    assert np.isfinite(p).all() and abs(p.sum() - 1) < 1e-12 and p[1] > 0.99


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1e6), min_size=1, max_size=20).filter(lambda v: max(v) > 0),
    st.floats(-3, 3),
    st.floats(0, 1),
    st.data(),
)
def test_proxy_probs_is_a_distribution(a, beta, alpha, data):
    c = data.draw(st.lists(st.floats(1e-3, 1e6), min_size=len(a), max_size=len(a)))
    p = proxy_probs(a, c, beta=beta, alpha=alpha)
    assert np.isfinite(p).all() and (p >= 0).all() and abs(p.sum() - 1) < 1e-9
    if alpha == 0:
        assert ((p > 0) <= (np.array(a) > 0)).all()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"abs_adv": [1.0, -1.0], "costs": [1.0, 1.0], "beta": 0.0}, "abs_adv must be >= 0"),
        ({"abs_adv": [0.0, 0.0], "costs": [1.0, 1.0], "beta": 0.0}, "abs_adv must have at least one"),
        ({"abs_adv": [1.0], "costs": [0.0], "beta": 0.0}, "costs must be > 0"),
        ({"abs_adv": [1.0], "costs": [1.0, 2.0], "beta": 0.0}, "mismatched lengths"),
        ({"abs_adv": [1.0], "costs": [1.0], "beta": float("nan")}, "beta must be finite, got nan"),
        ({"abs_adv": [1.0], "costs": [1.0], "beta": 0.0, "alpha": 1.5}, "alpha must lie in"),
    ],
)
def test_proxy_probs_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        proxy_probs(**kwargs)


# ---------------------------------------------------------------------------------------------
# fit_beta


@pytest.mark.parametrize("aligned,beta", [(False, 0.5), (True, 1.0)])
def test_fit_recovers_known_beta(aligned, beta):
    rng = np.random.default_rng(2)
    g, a, c = synthetic_pool(64, aligned=aligned, rng=rng)
    fit = fit_beta(np.abs(a), np.linalg.norm(g, axis=1), c)
    lo, hi = fit.interval
    assert lo <= beta <= hi and hi - lo < 0.3, fit
    assert fit.n_used == int((a != 0).sum())


@pytest.mark.parametrize("aligned,beta", [(False, 0.5), (True, 1.0)])
def test_interval_coverage_is_nominal(aligned, beta):
    """Over 300 seeds the 90% interval holds the true β about 90% of the time (binomial sd 1.7%)."""
    rng = np.random.default_rng(3)
    hits = []
    for _ in range(300):  # seeds, each fit vectorised
        g, a, c = synthetic_pool(24, aligned=aligned, rng=rng, d=8)
        lo, hi = fit_beta(np.abs(a), np.linalg.norm(g, axis=1), c, level=0.9).interval
        hits.append(lo <= beta <= hi)
    assert 0.84 <= np.mean(hits) <= 0.96, np.mean(hits)


def test_small_fit_interval_uses_student_t():
    """Five rows (3 dof): a normal-quantile 90% interval would cover only ~80%."""
    rng = np.random.default_rng(10)
    hits = []
    for _ in range(600):  # seeds, each fit vectorised
        c = rng.integers(4, 300, size=5).astype(float)
        G = c**0.7 * np.exp(0.3 * rng.normal(size=5))
        lo, hi = fit_beta(np.ones(5), G, c, level=0.9).interval
        hits.append(lo <= 0.7 <= hi)
    assert 0.86 <= np.mean(hits) <= 0.94, np.mean(hits)


def test_fit_drops_nan_and_zero_gradients():
    rng = np.random.default_rng(4)
    g, a, c = synthetic_pool(40, aligned=True, rng=rng, zero_frac=0.0)
    G = np.linalg.norm(g, axis=1)
    full = fit_beta(np.abs(a), G, c)
    G2 = np.r_[G, np.nan, np.inf, 0.0]
    fit = fit_beta(np.r_[np.abs(a), 1.0, 1.0, 1.0], torch.tensor(G2), np.r_[c, 5.0, 6.0, 7.0])
    assert fit.n_used == 40 and fit.beta_hat == pytest.approx(full.beta_hat)


@pytest.mark.parametrize(
    "a,G,c",
    [
        ([1.0, 2.0, 3.0, 1.0], [1.0, 2.0, 5.0, 0.5], [10.0] * 4),  # all costs equal
        ([1.0], [2.0], [10.0]),  # one row
        ([1.0, 1.0], [2.0, 3.0], [10.0, 20.0]),  # two rows: a slope but no residual
        ([1.0, 2.0, 3.0], [np.nan] * 3, [1.0, 2.0, 3.0]),  # NaN gradients
        ([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]),  # all A equal (zero)
        ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]),  # vanished gradients
    ],
)
def test_degenerate_subsets_give_uninformative_fits(a, G, c):
    fit = fit_beta(a, G, c)
    assert math.isinf(fit.stderr) and fit.beta_hat == 0.0 and fit.interval == (-math.inf, math.inf)
    assert shrink(fit, 1.4, 0.3) == 1.4


def test_all_advantages_equal_is_still_a_fit():
    c = np.array([10.0, 20.0, 40.0, 80.0, 160.0])
    fit = fit_beta(np.full(5, 0.7), 0.7 * c**0.8 * np.exp([0.01, -0.02, 0.0, 0.02, -0.01]), c)
    assert fit.beta_hat == pytest.approx(0.8, abs=0.02) and fit.informative


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1e3), st.one_of(st.floats(0, 1e12), st.just(float("nan"))), st.floats(1e-6, 1e9)),
        min_size=1,
        max_size=12,
    )
)
def test_fit_and_shrink_never_nan_and_stay_bounded(rows):
    a, G, c = (np.array(v) for v in zip(*rows, strict=True))
    fit = fit_beta(a, G, c)
    assert not math.isnan(fit.beta_hat) and not math.isnan(fit.stderr) and fit.stderr >= 0
    for prior, sd in ((0.0, 0.25), (1.4, 0.3), (1.4, math.inf), (5.0, 0.0)):
        b = shrink(fit, prior, sd)
        assert BETA_BOUNDS[0] <= b <= BETA_BOUNDS[1]


def test_fit_rejects_bad_input():
    with pytest.raises(ValueError, match="grad_norms must be >= 0"):
        fit_beta([1.0, 1.0], [1.0, -2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="abs_adv must be finite"):
        fit_beta([1.0, np.nan], [1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="mismatched"):
        fit_beta([1.0, 1.0], [1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="level"):
        fit_beta([1.0], [1.0], [1.0], level=1.0)


# ---------------------------------------------------------------------------------------------
# shrink


def test_shrink_is_the_normal_posterior_mean_and_clips():
    fit = BetaFit(1.0, 0.1, (0.8, 1.2), 30)
    expect = (1.4 / 0.3**2 + 1.0 / 0.1**2) / (1 / 0.3**2 + 1 / 0.1**2)
    assert shrink(fit, 1.4, 0.3) == pytest.approx(expect)
    assert shrink(fit, 1.4, 0.0) == 1.4 and shrink(fit, 1.4, math.inf) == 1.0
    wild = BetaFit(40.0, 0.0, (40.0, 40.0), 3)  # an adversarial exact fit
    assert shrink(wild, 1.4, 0.3) == BETA_BOUNDS[1]
    assert shrink(BetaFit(-40.0, 0.01, (-41, -39), 3), 0.0, 0.25) == BETA_BOUNDS[0]
    with pytest.raises(ValueError, match="prior_sd"):
        shrink(fit, 1.4, -1.0)
    with pytest.raises(ValueError, match="bounds"):
        shrink(fit, 1.4, 0.3, bounds=(1.0, 0.0))


def test_noisy_small_fit_barely_moves_beta():
    """A 4-row fit from noisy gradients moves β less than the fit's own error does."""
    rng = np.random.default_rng(5)
    moves, errs = [], []
    for _ in range(200):
        c = rng.integers(5, 300, size=4).astype(float)
        G = c**1.0 * np.exp(1.0 * rng.normal(size=4))
        fit = fit_beta(np.ones(4), G, c)
        if fit.informative:
            moves.append(abs(shrink(fit, 1.0, 0.3) - 1.0))
            errs.append(abs(fit.beta_hat - 1.0))
    assert np.mean(moves) < 0.5 * np.mean(errs)


# ---------------------------------------------------------------------------------------------
# J of the calibrated p


@pytest.mark.parametrize("aligned", [False, True])
def test_calibrated_p_beats_the_papers_and_nears_optimal(aligned):
    rng = np.random.default_rng(6)
    g, a, c = synthetic_pool(256, aligned=aligned, rng=rng)
    G = np.linalg.norm(g, axis=1)
    sub = rng.choice(256, 16, replace=False)  # the calibration subset
    fam = loss_family("dapo")
    beta = shrink(fit_beta(np.abs(a[sub]), G[sub], c[sub]), fam.prior_beta, fam.prior_sd)
    p = proxy_probs(np.abs(a), c, beta=beta)
    j, j_paper, j_star = (
        theory.J(p, G, c),
        theory.J(proxy_probs(np.abs(a), c, beta=0.0), G, c),
        theory.J_optimal(G, c),
    )
    assert j <= j_paper
    assert j / j_star < (1.15 if aligned else 1.05), (beta, j / j_star, j_paper / j_star)


def test_predicted_j_ratios_match_theory():
    rng = np.random.default_rng(7)
    g, a, c = synthetic_pool(32, aligned=True, rng=rng, zero_frac=0.0)
    G = np.linalg.norm(g, axis=1)
    out = predicted_j_ratios(dist.optimal(G, c), G, c)
    assert out["j_vs_optimal"] == pytest.approx(1.0) and out["j_vs_uniform"] <= 1.0
    p = proxy_probs(np.abs(a), c, beta=0.0)
    out = predicted_j_ratios(3.0 * p, np.r_[G[:-1], np.nan], c)  # unnormalised; a NaN row dropped
    q = p[:-1] / p[:-1].sum()
    assert out["j_vs_optimal"] == pytest.approx(theory.suboptimality(q, G[:-1], c[:-1]))
    assert out["j_vs_uniform"] == pytest.approx(
        theory.J(q, G[:-1], c[:-1]) / theory.J(dist.uniform(31), G[:-1], c[:-1])
    )
    with pytest.raises(ValueError, match="grad_norms"):
        predicted_j_ratios(p, np.full(32, np.nan), c)


# ---------------------------------------------------------------------------------------------
# unbiasedness under the new p


def _mc_bias(weight_fn, *, draws=20000, m=8, seed=8):
    """Monte-Carlo mean of the m-row weighted estimator minus the exact support mean, in standard errors."""
    rng = np.random.default_rng(seed)
    g, a, c = synthetic_pool(40, aligned=True, rng=rng, d=4, max_len=120)
    p = proxy_probs(np.abs(a), c, beta=1.4)  # rows with A = 0 are outside the support
    idx = rng.choice(40, size=(draws, m), p=p)
    w = weight_fn(p, idx)
    est = np.einsum("rm,rmd->rd", w, g[idx]) / m
    target = g[p > 0].mean(axis=0)
    se = est.std(axis=0, ddof=1) / math.sqrt(draws)
    return float(np.max(np.abs(est.mean(axis=0) - target) / se))


def centred(p, idx):
    return dist.importance_weights(p, idx.ravel()).reshape(idx.shape)


def test_weighted_estimator_is_unbiased_under_calibrated_p():
    assert _mc_bias(centred) < 4.5


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda p, i: (w := centred(p, i)) / w.mean(axis=1, keepdims=True), id="self-normalised"),
        pytest.param(
            lambda p, i: dist.importance_weights(p, i.ravel(), mode="raw").reshape(i.shape), id="n-not-n_supp"
        ),
        pytest.param(lambda p, i: centred(p, i) * (p > 0).sum() / (p[: len(p) // 2] > 0).sum(), id="per-rank-n_supp"),
    ],
)
def test_the_unbiasedness_check_catches_wrong_weights(wrong):
    assert _mc_bias(wrong) > 6.0


# ---------------------------------------------------------------------------------------------
# BetaCalibrator


def test_calibrator_pools_rounds_with_different_scales():
    """Rounds whose G differ by a constant factor: the per-round intercepts keep the slope right."""
    rng = np.random.default_rng(9)
    cal = BetaCalibrator(prior_beta=0.0, prior_sd=math.inf, decay=1.0)
    naive_x, naive_y = [], []
    for scale in (1.0, 30.0, 0.05):
        c = rng.integers(5, 300, size=12).astype(float)
        G = scale * c**1.2 * np.exp(0.05 * rng.normal(size=12))
        cal.update(fit_beta(np.ones(12), G, c))
        naive_x.append(np.log(c))
        naive_y.append(np.log(G))
    assert cal.beta == pytest.approx(1.2, abs=0.03)
    lo, hi = cal.pooled().interval
    assert lo <= 1.2 <= hi and cal.pooled().dof == pytest.approx(3 * 11 - 1)
    naive = np.polyfit(np.concatenate(naive_x), np.concatenate(naive_y), 1)[0]
    assert abs(naive - 1.2) > 0.1  # the pooling a single intercept would do is visibly off


def test_calibrator_starts_at_prior_ignores_uninformative_and_forgets():
    cal = BetaCalibrator.for_loss("grpo", every=3, decay=0.5)
    assert cal.beta == 0.0 and [cal.due(r) for r in range(4)] == [True, False, False, True]
    assert cal.update(fit_beta([1.0], [1.0], [1.0])) == 0.0
    c = np.geomspace(10, 300, 20)
    for _ in range(6):
        cal.update(fit_beta(np.ones(20), c**0.4 * np.exp(0.1 * np.sin(7 * c)), c))
    assert 0.2 < cal.beta < 0.45
    m = cal.metrics()
    assert set(m) == {"beta", "beta_hat", "beta_stderr", "beta_low", "beta_high", "beta_rows"}
    assert m["beta_low"] <= m["beta_hat"] <= m["beta_high"]


def test_calibrator_forgets_old_rounds_at_its_decay():
    c = np.geomspace(10, 300, 20)
    wiggle = np.exp(0.05 * np.sin(7 * c))
    betas = {}
    for decay in (1.0, 0.3):
        cal = BetaCalibrator(prior_beta=1.0, prior_sd=math.inf, decay=decay)
        for b in (1.0, 1.0, 1.0, 0.3):  # β drifts in the last round
            cal.update(fit_beta(np.ones(20), c**b * wiggle, c))
        betas[decay] = cal.beta
    # equal-weight pooling gives the mean slope; decay 0.3 weights the last round 1/(1 + .3 + .09 + .027)
    assert betas[1.0] == pytest.approx((3 * 1.0 + 0.3) / 4, abs=0.02)
    w = np.array([0.027, 0.09, 0.3, 1.0])
    assert betas[0.3] == pytest.approx(w @ [1.0, 1.0, 1.0, 0.3] / w.sum(), abs=0.02)


def test_calibrator_state_round_trips_through_json():
    cal = BetaCalibrator.for_loss("token-mean")
    c = np.geomspace(10, 300, 20)
    cal.update(fit_beta(np.ones(20), c**1.1 * np.exp(0.1 * np.cos(c)), c))
    back = BetaCalibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back == cal
    nxt = fit_beta(np.ones(20), c**0.9 * np.exp(0.1 * np.sin(c)), c)
    assert back.update(nxt) == cal.update(nxt)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"every": 0}, "every"),
        ({"decay": 0.0}, "decay"),
        ({"prior_sd": -1.0}, "prior_sd"),
        ({"bounds": (2, 1)}, "bounds"),
    ],
)
def test_calibrator_rejects_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BetaCalibrator(**{"prior_beta": 1.0, "prior_sd": 0.3, **kwargs})


# ---------------------------------------------------------------------------------------------
# adaptive_alpha


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1e3), min_size=1, max_size=30).filter(lambda v: max(v) > 0),
    st.floats(1.01, 100),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_adaptive_alpha_is_the_smallest_alpha_that_bounds_the_weight(v, W, x, y):
    p = np.array(v) / np.sum(v)
    lo, hi = min(x, y), max(x, y)
    alpha = adaptive_alpha(p, max_weight=W, alpha_min=lo, alpha_max=hi)
    assert lo <= alpha <= hi
    grid = np.linspace(lo, hi, 2001)
    supp = p > 0
    with np.errstate(over="ignore", divide="ignore"):  # subnormal p: an infinite weight is the point
        maxw = 1.0 / (len(p) * ((1 - grid[:, None]) * p[supp] + grid[:, None] / len(p))).min(axis=1)
    ok = maxw <= W * (1 + 1e-9)
    if ok.any():  # brute force: the first grid α that meets the bound is not below ours
        first = grid[np.argmax(ok)]
        assert alpha <= first + 1e-9 and 1.0 / (len(p) * dist.smoothed(p, alpha)[supp]).min() <= W * (1 + 1e-6)
    else:
        assert alpha == hi


def test_adaptive_alpha_ignores_rows_outside_the_support():
    """Rows with p = 0 (A = 0) have zero gradient: their weight must not force smoothing."""
    assert adaptive_alpha([0.5, 0.5, 0.0, 0.0], max_weight=4.0) == 0.0
    p = proxy_probs([1.0, 0.0, 0.01, 2.0], [10.0, 10.0, 10.0, 10.0], beta=0.0)
    alpha = adaptive_alpha(p, max_weight=5.0)
    w = 1.0 / (4 * dist.smoothed(p, alpha))
    assert w[[0, 2, 3]].max() == pytest.approx(5.0) and alpha > 0


def test_adaptive_alpha_rejects_bad_input():
    with pytest.raises(ValueError, match="max_weight"):
        adaptive_alpha([0.5, 0.5], max_weight=1.0)
    with pytest.raises(ValueError, match="alpha_min"):
        adaptive_alpha([0.5, 0.5], alpha_min=0.6, alpha_max=0.5)
    with pytest.raises(ValueError, match="must sum to 1"):
        adaptive_alpha([0.5, 0.6])
