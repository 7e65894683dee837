"""plan_minibatches: budgets, merging, unbiasedness of the weighted estimator, determinism."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.grpo.plan import SamplingConfig, plan_minibatches


def _pool(n, seed):
    rng = np.random.default_rng(seed)
    adv = rng.normal(size=n) * (rng.random(n) < 0.7)  # ~30% zero advantages
    adv[0] = 1.0
    costs = rng.integers(5, 60, size=n)
    return adv, costs


@settings(max_examples=25, deadline=None)
@given(n=st.integers(4, 200), k=st.integers(1, 4), seed=st.integers(0, 10_000), merge=st.booleans())
def test_token_budget_matches_the_baseline_tokens(n, k, seed, merge):
    adv, costs = _pool(n, seed)
    cfg = SamplingConfig(method="p_star", budget="tokens", merge_duplicates=merge)
    plan = plan_minibatches(adv, costs, num_minibatches=k, config=cfg, generator=torch.Generator().manual_seed(seed))
    assert len(plan.minibatches) == k  # one per baseline step, even when a few long rows meet the budget
    share = plan.tokens_plain / k
    support_tokens = int(costs[adv != 0].sum())
    for mb in plan.minibatches:
        assert mb.tokens == int(costs[mb.indices.numpy()].sum())
        if merge:  # fed tokens reach the share (or the whole support), and the last new row is what crossed it
            assert len(set(mb.indices.tolist())) == mb.indices.numel()
            assert mb.num_draws <= cfg.max_draws_factor * (n // k)  # the documented draw cap
            if not plan.meta["draw_cap_hit"]:
                assert mb.tokens >= min(share, support_tokens) - 1e-9
            assert mb.tokens - costs.max() < share
    if not merge:  # drawn tokens over the plan reach the pool's tokens, overshooting by less than one row
        # (unless one draw per mini-batch, the minimum that leaves none empty, overshot on its own)
        assert plan.tokens < plan.tokens_plain + costs.max() or plan.rows_drawn == k
        assert plan.meta["draw_cap_hit"] or plan.tokens_plain <= plan.tokens


def test_rows_budget_draw_counts_and_merge():
    adv, costs = _pool(64, 1)
    for merge in (True, False):
        plan = plan_minibatches(
            adv,
            costs,
            num_minibatches=4,
            config=SamplingConfig(merge_duplicates=merge),
            generator=torch.Generator().manual_seed(0),
        )
        assert [mb.num_draws for mb in plan.minibatches] == [16] * 4
        assert all(int(mb.counts.sum()) == mb.num_draws for mb in plan.minibatches)
        assert all((adv[mb.indices.numpy()] != 0).all() for mb in plan.minibatches)  # p* never draws A = 0
    assert plan_minibatches(np.zeros(8), np.ones(8), num_minibatches=2).skipped


@pytest.mark.parametrize("budget", ["rows", "tokens"])
@pytest.mark.parametrize("method,weights", [("p_star", "centred"), ("p_star", "raw"), ("p_smooth", "centred")])
def test_weighted_estimator_is_unbiased_monte_carlo(budget, method, weights):
    """E[Σ_draws w_i g_i] / E[draws] = (1/n_supp)·Σ g_i (centred) or (1/n)·Σ g_i (raw), n_supp global.

    Wald's identity for 'tokens'. The pool has zero-advantage rows (p* gives them p = 0, so n_supp <
    n and centred differs from raw) and unequal costs; the bound is 4 standard errors per component,
    so self-normalised weights (w / mean w within a mini-batch) fail it.
    """
    n = 24
    adv, costs = _pool(n, 3)
    g = np.random.default_rng(4).normal(size=(n, 3)) + 1.0
    g *= (adv != 0)[:, None]  # a row with A = 0 has no gradient
    gen = torch.Generator().manual_seed(5)
    cfg = SamplingConfig(method=method, alpha=0.2, budget=budget, weights=weights)
    n_supp = n if method == "p_smooth" else int((adv != 0).sum())
    target = g.sum(0) / (n_supp if weights == "centred" else n)
    trials = 1500
    sums, draws = np.zeros((trials, 3)), np.zeros(trials)
    for t in range(trials):
        plan = plan_minibatches(adv, costs, num_minibatches=2, config=cfg, generator=gen)
        for mb in plan.minibatches:
            sums[t] += (mb.weights.double().numpy()[:, None] * g[mb.indices.numpy()]).sum(0)
            draws[t] += mb.num_draws
    est = sums.sum(0) / draws.sum()
    resid = sums - est[None, :] * draws[:, None]  # delta method for the ratio of sums
    se = resid.std(0) * np.sqrt(trials) / draws.sum()
    assert (np.abs(est - target) < 4 * se + 1e-9).all(), (est, target, se)


def test_same_generator_seed_same_plan():
    adv, costs = _pool(100, 7)
    cfg = SamplingConfig(method="p_star", budget="tokens")
    a, b = (
        plan_minibatches(adv, costs, num_minibatches=3, config=cfg, generator=torch.Generator().manual_seed(9))
        for _ in range(2)
    )
    assert all(
        torch.equal(x.indices, y.indices) and torch.equal(x.weights, y.weights)
        for x, y in zip(a.minibatches, b.minibatches, strict=True)
    )
