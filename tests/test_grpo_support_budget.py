"""budget="support": a drawing method draws as many rows per pool as it has rows with A != 0 (nonzero's count),
split over the steps as nonzero splits them; the estimator stays unbiased (the count is fixed by the pool)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from costaware.grpo.config import SamplingConfig
from costaware.grpo.plan import plan_minibatches

ADV = torch.tensor([1.0, -1.0, 0.0, 0.5, 0.0, -0.5, 2.0, 0.0, -2.0, 1.5])
COST = torch.tensor([10, 40, 25, 10, 30, 20, 5, 7, 60, 12])


@pytest.mark.parametrize("merge", [True, False])
def test_support_budget_draws_nonzeros_row_count_split_like_nonzero(merge):
    plan = plan_minibatches(
        ADV,
        COST,
        num_minibatches=2,
        config=SamplingConfig("p_star", budget="support", merge_duplicates=merge),
        generator=torch.Generator().manual_seed(0),
    )
    ref = plan_minibatches(
        ADV, COST, num_minibatches=2, config=SamplingConfig("nonzero"), generator=torch.Generator().manual_seed(0)
    )
    n_nonzero = int((ADV != 0).sum())
    assert plan.rows_drawn == n_nonzero == ref.rows_fed
    assert [mb.num_draws for mb in plan.minibatches] == [int(mb.indices.numel()) for mb in ref.minibatches]


def test_support_budget_is_unbiased_for_nonzeros_expected_step():
    """Monte-Carlo: E[(1/m) Σ w·g] over plans equals nonzero's (1/n_supp) Σ_{A≠0} g with centred weights."""
    g = np.random.default_rng(0).normal(size=(ADV.numel(), 3))  # a per-row gradient stand-in
    target = g[(ADV != 0).numpy()].mean(0)
    est = []
    for s in range(4000):
        plan = plan_minibatches(
            ADV,
            COST,
            num_minibatches=2,
            config=SamplingConfig("p_star", budget="support", merge_duplicates=False),
            generator=torch.Generator().manual_seed(s),
        )
        est.append(
            np.mean(
                [
                    (mb.weights.numpy()[:, None] * g[mb.indices.numpy()]).sum(0) / mb.num_draws
                    for mb in plan.minibatches
                ],
                axis=0,
            )
        )
    est = np.asarray(est)
    se = est.std(0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(0) - target) < 4 * se + 1e-9)


def test_a_bad_budget_names_the_choices():
    with pytest.raises(ValueError, match="budget must be one of"):
        SamplingConfig("p_star", budget="nonzero")
