"""``plan_minibatches(keep_zero_pool=True)``: a pool whose advantages are all zero, under a loss with terms on
every row (KL, entropy), is drawn by a full-support method instead of skipped."""

from __future__ import annotations

import pytest
import torch

from costaware.grpo.plan import SamplingConfig, plan_minibatches

COSTS = torch.tensor([3, 9, 4, 12, 5, 7, 8, 2])


def plan(method: str, keep: bool, weights: str = "centred", **kw):
    cfg = SamplingConfig(method, alpha=kw.pop("alpha", 0.2), weights=weights, merge_duplicates=False, **kw)
    return plan_minibatches(
        torch.zeros(8),
        COSTS,
        num_minibatches=2,
        config=cfg,
        keep_zero_pool=keep,
        generator=torch.Generator().manual_seed(0),
    )


@pytest.mark.parametrize("method", ["p_smooth", "uniform", "inv_sqrt_cost", "p_star", "variance"])
def test_default_skips_a_zero_pool(method):
    assert plan(method, False).skipped == "every advantage in the pool is zero"


@pytest.mark.parametrize("weights", ["centred", "raw"])
def test_p_smooth_draws_its_uniform_part_with_weight_one(weights):
    p = plan("p_smooth", True, weights)
    assert p.skipped is None and p.rows_drawn == 8
    torch.testing.assert_close(p.probs, torch.full((8,), 1 / 8))
    assert all(torch.all(mb.weights == 1) for mb in p.minibatches)  # E[w ∇ℓ] = mean ∇ℓ: unbiased


def test_other_full_support_methods_keep_their_p():
    p = plan("inv_sqrt_cost", True)
    want = COSTS.double() ** -0.5
    torch.testing.assert_close(p.probs.double(), want / want.sum(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("method,alpha", [("p_star", 0.0), ("p_smooth", 0.0), ("variance", 0.0)])
def test_methods_without_full_support_still_skip(method, alpha):
    assert plan(method, True, alpha=alpha).skipped is not None


def test_keep_zero_pool_must_be_a_bool():
    with pytest.raises(TypeError, match="keep_zero_pool must be True or False, got 1"):
        plan("p_smooth", 1)


def test_a_pool_with_signal_is_unchanged():
    adv = torch.tensor([1.0, -1.0, 0.0, 0.5, 0.0, 0.0, 2.0, -2.0])
    cfg = SamplingConfig("p_smooth", alpha=0.2)
    a, b = (
        plan_minibatches(adv, COSTS, num_minibatches=2, config=cfg, keep_zero_pool=k,
                         generator=torch.Generator().manual_seed(3))
        for k in (False, True)
    )  # fmt: skip
    assert [m.indices.tolist() for m in a.minibatches] == [m.indices.tolist() for m in b.minibatches]
