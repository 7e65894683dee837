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
    assert len(plan.minibatches) == k
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
        assert plan.tokens < plan.tokens_plain + costs.max()
        assert plan.meta["draw_cap_hit"] or plan.tokens_plain <= plan.tokens


def test_rows_budget_draw_counts_and_merge():
    adv, costs = _pool(64, 1)
    for merge in (True, False):
        plan = plan_minibatches(adv, costs, num_minibatches=4, config=SamplingConfig(merge_duplicates=merge),
                                generator=torch.Generator().manual_seed(0))
        assert [mb.num_draws for mb in plan.minibatches] == [16] * 4
        assert all(int(mb.counts.sum()) == mb.num_draws for mb in plan.minibatches)
        assert all((adv[mb.indices.numpy()] != 0).all() for mb in plan.minibatches)  # p* never draws A = 0
    assert plan_minibatches(np.zeros(8), np.ones(8), num_minibatches=2).skipped


@pytest.mark.parametrize("budget", ["rows", "tokens"])
def test_weighted_estimator_is_unbiased_monte_carlo(budget):
    """E[Σ_draws w_i g_i] / E[draws] = (1/n_supp)·Σ g_i with centred weights (Wald's identity for 'tokens').

    n_supp = #{p_i > 0}: here every row, since smoothing puts mass on the A = 0 rows too.
    """
    n = 24
    adv, costs = _pool(n, 3)
    g = np.random.default_rng(4).normal(size=(n, 3)) * (adv != 0)[:, None]  # a row with A = 0 has no gradient
    target = g.sum(0) / n
    gen = torch.Generator().manual_seed(5)
    cfg = SamplingConfig(method="p_smooth", alpha=0.2, budget=budget)
    total, draws = np.zeros(3), 0
    trials = 3000
    for _ in range(trials):
        plan = plan_minibatches(adv, costs, num_minibatches=2, config=cfg, generator=gen)
        for mb in plan.minibatches:
            total += (mb.weights.double().numpy()[:, None] * g[mb.indices.numpy()]).sum(0)
            draws += mb.num_draws
    est = total / draws
    assert np.abs(est - target).max() < 0.06 * np.abs(target).max() + 0.01, (est, target)


def test_same_generator_seed_same_plan():
    adv, costs = _pool(100, 7)
    cfg = SamplingConfig(method="p_star", budget="tokens")
    a, b = (plan_minibatches(adv, costs, num_minibatches=3, config=cfg, generator=torch.Generator().manual_seed(9))
            for _ in range(2))
    assert all(torch.equal(x.indices, y.indices) and torch.equal(x.weights, y.weights)
               for x, y in zip(a.minibatches, b.minibatches, strict=True))
