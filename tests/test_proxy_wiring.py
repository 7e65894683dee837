"""The proxy G ≈ |A|·c^β wired into SamplingConfig and the plan: options, β = 0 unchanged bit
for bit, p ∝ |A|·c^(β−½), adaptive α, unbiasedness of the weighted estimator under the new p, and the
engines' resolution of ``proxy="auto"`` per loss type."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware import distributions as dist
from costaware.grpo.config import ALPHA_AUTO_MAX, SamplingConfig, paper_proxy_warning, resolve_proxy
from costaware.grpo.plan import plan_minibatches
from costaware.grpo.proxy import adaptive_alpha, loss_family


def _pool(n, seed):
    rng = np.random.default_rng(seed)
    adv = rng.normal(size=n) * (rng.random(n) < 0.7)  # ~30% zero advantages
    adv[0] = 1.0
    costs = rng.integers(1, 500, size=n)
    return adv, costs


def _plan(adv, costs, seed=0, k=3, **cfg):
    return plan_minibatches(
        adv, costs, num_minibatches=k, config=SamplingConfig(**cfg), generator=torch.Generator().manual_seed(seed)
    )


# ------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"proxy": "bogus"}, "proxy must be one of.*bogus"),
        ({"proxy": "advantage", "proxy_beta": 0.5}, "proxy_beta=0.5 with proxy='advantage'"),
        ({"proxy": "length_aware"}, "needs proxy_beta.*None"),
        ({"proxy": "calibrated"}, "needs proxy_beta.*None"),
        ({"proxy": "length_aware", "proxy_beta": 5.0}, r"proxy_beta must lie in \[-0.5, 2.0\].*5.0"),
        ({"proxy": "length_aware", "proxy_beta": float("nan")}, "proxy_beta must be a finite number.*nan"),
        ({"proxy": "length_aware", "proxy_beta": True}, "proxy_beta must be a finite number.*True"),
        ({"proxy": "length_aware", "proxy_beta": 1.0, "method": "uniform"}, "method='uniform'"),
        ({"adaptive_alpha_max_weight": 10.0}, "needs method='p_smooth'"),
        ({"method": "p_smooth", "adaptive_alpha_max_weight": 1.0}, "adaptive_alpha_max_weight.*> 1.*1.0"),
        ({"method": "p_smooth", "adaptive_alpha_max_weight": "10"}, "adaptive_alpha_max_weight.*'10'"),
        ({"method": "p_smooth", "alpha": 0.8, "adaptive_alpha_max_weight": 10.0}, "alpha=0.8.*<= 0.5"),
    ],
)
def test_bad_proxy_options_are_refused_naming_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingConfig(**kwargs)


def test_resolve_proxy_per_loss_family():
    assert resolve_proxy("auto", None, loss_type="dapo", method="p_star") == ("calibrated", 1.0)
    assert resolve_proxy("auto", None, loss_type="cispo", method="p_smooth") == ("calibrated", 1.0)
    assert resolve_proxy("auto", None, loss_type="grpo", method="p_star") == ("advantage", 0.0)
    assert resolve_proxy("auto", None, loss_type="dapo", method="nonzero") == ("advantage", 0.0)
    assert resolve_proxy("length_aware", None, loss_type="token-mean", method="p_star") == ("length_aware", 1.0)
    assert resolve_proxy("length_aware", 0.4, loss_type="grpo", method="p_star") == ("length_aware", 0.4)
    for bad, match in (
        (("auto", 0.3), "proxy='auto'"),
        (("advantage", 0.3), "proxy='advantage'"),
        (("nope", None), "nope"),
    ):
        with pytest.raises(ValueError, match=match):
            resolve_proxy(*bad, loss_type="dapo", method="p_star")
    with pytest.raises(ValueError, match="loss_type.*bogus"):
        resolve_proxy("auto", None, loss_type="bogus", method="p_star")


def test_proxy_advice_only_for_auto_with_a_proxy_method_under_a_token_sum_loss():
    # one advice, the training measurements': the paper's proxy under token-sum losses, never the reverse
    advice = paper_proxy_warning("auto", loss_type="dapo", method="p_star", field="cost_aware_proxy")
    assert "cost_aware_proxy='advantage'" in advice and "'nonzero'" in advice
    assert paper_proxy_warning("advantage", loss_type="dapo", method="p_star") is None  # the measured choice
    assert paper_proxy_warning("calibrated", loss_type="dapo", method="p_star") is None  # named: the user's
    assert paper_proxy_warning("auto", loss_type="grpo", method="p_star") is None  # auto is the paper's there
    assert paper_proxy_warning("auto", loss_type="dapo", method="nonzero") is None  # no proxy used


# ---------------------------------------------------------------------------------- β = 0 unchanged


def _fingerprint(plan):
    h = hashlib.sha256(plan.probs.numpy().tobytes())
    for mb in plan.minibatches:
        h.update(mb.indices.numpy().astype(np.int64).tobytes())
        h.update(mb.weights.numpy().tobytes())
    return h.hexdigest()[:16]


# Fingerprints of plans built by plan.py before the proxy was wired in (commit ebfbe93), same inputs.
_GOLDEN = {
    ("p_star", "rows"): "44508296cfbe5124",
    ("p_star", "tokens"): "54f962c2d616423e",
    ("p_smooth", "rows"): "6b691a78d9214a68",
    ("p_smooth", "tokens"): "c3a7dd867558b68c",
}


@pytest.mark.parametrize("method,budget", sorted(_GOLDEN))
def test_beta_zero_reproduces_the_pre_proxy_plans_bit_for_bit(method, budget):
    adv, costs = _pool(97, 11)
    for extra in ({}, {"proxy": "length_aware", "proxy_beta": 0.0}):
        plan = plan_minibatches(
            adv,
            costs,
            num_minibatches=3,
            config=SamplingConfig(method=method, alpha=0.05, budget=budget, **extra),
            generator=torch.Generator().manual_seed(5),
        )
        assert _fingerprint(plan) == _GOLDEN[(method, budget)]
        assert plan.meta["beta"] == 0.0 and plan.meta["alpha"] == (0.05 if method == "p_smooth" else 0.0)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 120), seed=st.integers(0, 10_000), method=st.sampled_from(["p_star", "p_smooth"]))
def test_beta_zero_probs_are_exactly_the_papers(n, seed, method):
    adv, costs = _pool(n, seed)
    plan = _plan(adv, costs, seed, k=1, method=method, alpha=0.1)
    a = np.abs(adv.astype(np.float32)).astype(np.float64)  # the plan reads advantages as float32
    ref = dist.optimal(np.where(a > 1e-6 * a.max(), a, 0.0), costs.astype(np.float64))
    if method == "p_smooth":
        ref = dist.smoothed(ref, 0.1)
    assert torch.equal(plan.probs, torch.from_numpy(ref).to(torch.float32))


# ------------------------------------------------------------------------------------- length-aware


@pytest.mark.parametrize("beta", [-0.5, 0.5, 1.0, 1.6, 2.0])
@pytest.mark.parametrize("method", ["p_star", "p_smooth"])
def test_length_aware_plan_samples_from_abs_a_times_c_to_beta_minus_half(beta, method):
    adv, costs = _pool(64, 2)
    plan = _plan(adv, costs, method=method, alpha=0.05, proxy="length_aware", proxy_beta=beta)
    q = np.abs(adv) * costs.astype(np.float64) ** (beta - 0.5)
    q /= q.sum()
    if method == "p_smooth":
        q = 0.95 * q + 0.05 / q.size
    np.testing.assert_allclose(plan.probs.double().numpy(), q, rtol=1e-5, atol=1e-12)
    assert plan.meta == {
        "draw_cap_hit": False,
        "proxy": "length_aware",
        "beta": beta,
        "alpha": 0.05 if method == "p_smooth" else 0.0,
    }
    drawn = torch.cat([mb.indices for mb in plan.minibatches]).numpy()
    if method == "p_star":
        assert (adv[drawn] != 0).all()
    # β = 1 favours long rows, the paper's β = 0 short ones: the mean drawn cost moves accordingly
    if beta == 1.0 and method == "p_star":
        paper = _plan(adv, costs, method=method)

        def mean_cost(p):
            return float(np.mean(np.concatenate([costs[mb.indices.numpy()] for mb in p.minibatches])))

        assert mean_cost(plan) > mean_cost(paper)


def test_non_proxy_methods_record_no_beta():
    adv, costs = _pool(40, 1)
    plan = _plan(adv, costs, method="inv_sqrt_cost")
    assert plan.meta["beta"] is None and plan.meta["alpha"] is None and plan.meta["proxy"] == "advantage"


# ------------------------------------------------------------------------------------- adaptive α


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(4, 150),
    seed=st.integers(0, 10_000),
    W=st.floats(1.5, 50.0),
    floor=st.one_of(st.just(0.0), st.floats(1e-300, 0.3)),
    beta=st.sampled_from([0.0, 1.0]),
)
def test_adaptive_alpha_bounds_the_largest_weight_within_its_range(n, seed, W, floor, beta):
    adv, costs = _pool(n, seed)
    proxy = {"proxy": "length_aware", "proxy_beta": beta} if beta else {}
    plan = _plan(adv, costs, seed, method="p_smooth", alpha=floor, adaptive_alpha_max_weight=W, **proxy)
    a = plan.meta["alpha"]
    assert floor <= a <= ALPHA_AUTO_MAX
    base = _plan(adv, costs, seed, method="p_star", **proxy).probs.double().numpy()
    # base is the plan's float32 p: near the bound, 1/W − n·p_min cancels, so compare to float32 rounding
    assert a == pytest.approx(adaptive_alpha(base, max_weight=W, alpha_min=floor, alpha_max=ALPHA_AUTO_MAX), abs=1e-7)
    # the bound covers rows with A ≠ 0: a row with A = 0 has no policy gradient for its weight to scale
    raw = 1.0 / (n * plan.probs.double().numpy()[base > 0])
    if a < ALPHA_AUTO_MAX:  # the bound is met unless α hit its cap
        assert raw.max() <= W * (1 + 1e-5)


# ------------------------------------------------------------------ unbiasedness under the new p


def _mc(cfg, adv, costs, g, trials, wrong=None, k=8):
    """Σ_draws w·g over many plans, divided by the draws (the estimator of (1/n_supp)Σ g for centred
    weights); 'self_normalised' divides each mini-batch's weights by their mean, 'n_instead_of_n_supp'
    scales centred weights by n_supp/n (the wrong support size)."""
    gen = torch.Generator().manual_seed(5)
    n_supp = int((adv != 0).sum())
    sums, draws = np.zeros((trials, g.shape[1])), np.zeros(trials)
    for t in range(trials):
        plan = plan_minibatches(adv, costs, num_minibatches=k, config=cfg, generator=gen)
        for mb in plan.minibatches:
            w = mb.weights.double().numpy()
            if wrong == "self_normalised":
                w = w / (w.sum() / mb.num_draws)
            elif wrong == "n_instead_of_n_supp":
                w = w * n_supp / adv.size
            sums[t] += (w[:, None] * g[mb.indices.numpy()]).sum(0)
            draws[t] += mb.num_draws
    est = sums.sum(0) / draws.sum()
    resid = sums - est[None, :] * draws[:, None]  # delta method for the ratio of sums
    se = resid.std(0) * np.sqrt(trials) / draws.sum()
    return est, g.sum(0) / n_supp, se


def _unbiased_pool():
    n = 24
    adv, costs = _pool(n, 3)
    costs = np.random.default_rng(9).integers(5, 400, size=n)  # a wide cost range: β matters
    g = np.random.default_rng(4).normal(size=(n, 3)) + 1.0
    g *= (adv != 0)[:, None]  # a row with A = 0 has no policy gradient
    return adv, costs, g


_LENGTH_AWARE = dict(method="p_star", proxy="length_aware", proxy_beta=1.0, merge_duplicates=False)


def test_weights_times_p_are_one_over_n_supp_exactly_under_length_aware_p():
    adv, costs, _ = _unbiased_pool()
    plan = _plan(adv, costs, k=4, **_LENGTH_AWARE)
    n_supp = int((adv != 0).sum())
    for mb in plan.minibatches:
        pw = plan.probs.double().numpy()[mb.indices.numpy()] * mb.weights.double().numpy()
        np.testing.assert_allclose(pw, 1.0 / n_supp, rtol=1e-6)


@pytest.mark.parametrize("budget", ["rows", "tokens"])
def test_weighted_estimator_is_unbiased_under_length_aware_p(budget):
    adv, costs, g = _unbiased_pool()
    cfg = SamplingConfig(budget=budget, **_LENGTH_AWARE)
    est, target, se = _mc(cfg, adv, costs, g, trials=800)
    assert (np.abs(est - target) < 4 * se + 1e-9).all(), (est, target, se)


@pytest.mark.parametrize("wrong", ["self_normalised", "n_instead_of_n_supp"])
def test_the_unbiasedness_check_fails_on_wrong_weights(wrong):
    adv, costs, g = _unbiased_pool()
    est, target, se = _mc(SamplingConfig(**_LENGTH_AWARE), adv, costs, g, trials=800, wrong=wrong)
    assert (np.abs(est - target) > 4 * se).any(), (wrong, est, target, se)


def test_weighted_estimator_is_unbiased_under_adaptive_smoothing():
    adv, costs, g = _unbiased_pool()
    g = g + (adv == 0)[:, None] * 0.5  # full support: rows with A = 0 may carry a (KL) gradient
    cfg = SamplingConfig(
        method="p_smooth",
        alpha=0.0,
        adaptive_alpha_max_weight=4.0,
        proxy="length_aware",
        proxy_beta=1.0,
        merge_duplicates=False,
    )
    plan = _plan(
        adv,
        costs,
        **{k: getattr(cfg, k) for k in ("method", "alpha", "adaptive_alpha_max_weight", "proxy", "proxy_beta")},
    )
    assert 0.0 < plan.meta["alpha"] < ALPHA_AUTO_MAX  # smoothing was needed, so the support is every row
    gen = torch.Generator().manual_seed(1)
    trials, sums, draws = 800, np.zeros((800, 3)), np.zeros(800)
    for t in range(trials):
        p = plan_minibatches(adv, costs, num_minibatches=8, config=cfg, generator=gen)
        for mb in p.minibatches:
            sums[t] += (mb.weights.double().numpy()[:, None] * g[mb.indices.numpy()]).sum(0)
            draws[t] += mb.num_draws
    est = sums.sum(0) / draws.sum()
    se = (sums - est[None] * draws[:, None]).std(0) * np.sqrt(trials) / draws.sum()
    assert (np.abs(est - g.mean(0)) < 4 * se + 1e-9).all(), (est, g.mean(0), se)


def test_loss_family_prior_is_what_auto_uses():
    assert resolve_proxy("auto", None, loss_type="dapo", method="p_star")[1] == loss_family("dapo").prior_beta
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SamplingConfig(method="p_star", proxy="calibrated", proxy_beta=loss_family("dapo").prior_beta)
