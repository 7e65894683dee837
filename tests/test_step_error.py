"""grpo.step_error: the measured step error of real plans against J's closed form of its expectation
(Monte-Carlo over grpo.plan.plan_minibatches, as tests/test_row_variance.py does for its own closed forms), a
negative control the check must reject, the closed form against experiments.row_variance's, and the edges."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

from costaware.experiments import row_variance as rv
from costaware.grpo import step_error as se
from costaware.grpo.advantages import group_advantages
from costaware.grpo.config import SamplingConfig
from costaware.grpo.plan import plan_minibatches

STEPS, PLANS = 2, 1000


@pytest.fixture(scope="module")
def pool():
    """6 groups of 5 (3 informative: n_supp = 15, odd, so `nonzero`'s chunks are unequal), per-row gradients
    g_i = A_i · u_i of very unequal norms in R^4, costs spread 2..40."""
    rng = np.random.default_rng(7)
    rewards = np.array([1, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1, 0] + [1] * 5 + [0] * 10, dtype=np.float32)
    adv = group_advantages(torch.from_numpy(rewards), 5, eps=1e-4).double().numpy()
    costs = rng.integers(2, 41, adv.size).astype(float)
    u = rng.normal(size=(adv.size, 4)) * rng.lognormal(0, 1.0, size=(adv.size, 1)) + np.array([1.0, 0, 0, 0])
    return rewards, adv, costs, u


def within(value, samples, z=4.0):
    """|value − mean(samples)| < z standard errors of the mean."""
    return abs(value - samples.mean()) < z * samples.std(ddof=1) / np.sqrt(samples.size)


def run_plans(pool, config, seed=0):
    """(measured, predicted) of PLANS real plans; g_i = A_i(plan) · u_i, the plan's own advantages (PODS
    recomputes them), so that the rows' gradients are those of the loss the plan feeds."""
    rewards, adv, costs, u = pool
    gen = torch.Generator().manual_seed(seed)
    measured, predicted = [], []
    for _ in range(PLANS):
        plan = plan_minibatches(adv, costs, num_minibatches=STEPS, config=config, rewards=rewards, group_size=5,
                                generator=gen)  # fmt: skip
        law = se.step_law(plan, config)
        g = torch.from_numpy(plan.advantages.double().numpy()[:, None] * u)
        out = se.step_errors(law, ((int(i), g[i]) for i in law.rows))
        assert out.steps == len(plan.minibatches)
        measured.append(out.measured)
        predicted.append(out.predicted)
    return np.array(measured), np.array(predicted, dtype=float)


@pytest.mark.parametrize(
    "config",
    [
        SamplingConfig("nonzero"),
        SamplingConfig("none"),
        SamplingConfig("pods", pods_keep=3),
        SamplingConfig("p_star"),
        SamplingConfig("p_star", weights="raw"),
        SamplingConfig("p_star", budget="support"),
        SamplingConfig("p_smooth", alpha=0.1),
        SamplingConfig("p_star", merge_duplicates=False),
    ],
    ids=["nonzero", "grpo", "pods", "p_star", "p_star-raw", "p_star-support", "p_smooth", "p_star-unmerged"],
)
def test_closed_form_matches_monte_carlo_over_real_plans(pool, config):
    measured, predicted = run_plans(pool, config)
    assert np.ptp(predicted) < 1e-9 * predicted.max()  # the closed form depends on the pool alone
    assert predicted[0] > 0 and within(predicted[0], measured), (predicted[0], measured.mean())


def test_the_check_rejects_a_partition_taken_for_independent_draws(pool):
    """`nonzero` read as i.i.d. uniform draws (no finite-population correction) is outside the measured mean."""
    rewards, adv, costs, u = pool
    measured, _ = run_plans(pool, SamplingConfig("nonzero"))
    supp = adv != 0
    g = adv[supp, None] * u[supp]
    mean = g.mean(0)
    sizes = rv.chunk_sizes(int(supp.sum()), STEPS)
    with_replacement = float(np.mean(((g**2).sum(1).mean() - mean @ mean) / sizes))
    assert not within(with_replacement, measured)


def test_closed_forms_are_row_variances(pool):
    """On centred p* and `nonzero` the closed form is experiments.row_variance's V_sub."""
    rewards, adv, costs, u = pool
    supp = adv != 0
    g = adv[:, None] * u
    sq, mean = (g**2).sum(1), g[supp].mean(0)
    for name, config in (("p_star", SamplingConfig("p_star")), ("nonzero", SamplingConfig("nonzero"))):
        plan = plan_minibatches(adv, costs, num_minibatches=STEPS, config=config)
        law = se.step_law(plan, config)
        np.testing.assert_allclose(law.expected[supp], 1 / supp.sum(), rtol=1e-6)
        got = law.predicted(sq, float(mean @ mean))
        if name == "nonzero":
            want = rv.partition_variances(sq[supp], float(mean @ mean), STEPS)[0]
        else:
            p = rv.method_probs(np.abs(adv[supp]), np.sqrt(sq[supp]), costs[supp])["p_star"]
            want = rv.iid_step_variance(sq[supp], p, float(mean @ mean), adv.size // STEPS)
        assert got == pytest.approx(want, rel=1e-5), name


def test_no_law_where_no_step_or_no_single_expectation(pool):
    rewards, adv, costs, u = pool
    zero = plan_minibatches(np.zeros(6), np.ones(6), num_minibatches=2, config=SamplingConfig("p_star"))
    assert se.step_law(zero, SamplingConfig("p_star")) is None  # a skipped pool feeds no step
    nz = plan_minibatches(adv, costs, num_minibatches=STEPS, config=SamplingConfig("nonzero"))
    assert se.step_law(nz, SamplingConfig("nonzero"), normaliser="pool") is None
    tokens = SamplingConfig("p_star", budget="tokens")
    law = se.step_law(plan_minibatches(adv, costs, num_minibatches=STEPS, config=tokens), tokens)
    assert law is not None and law.predicted(np.ones(adv.size), 0.0) is None  # random draws: measured only
    with pytest.raises(ValueError, match="normaliser must be one of"):
        se.step_law(nz, SamplingConfig("nonzero"), normaliser="rows")
    with pytest.raises(ValueError, match="outside the pool"):
        se.step_errors(se.step_law(nz, SamplingConfig("nonzero")), [(adv.size, torch.zeros(4))])


def test_doctests_hold():
    assert doctest.testmod(se, raise_on_error=True).attempted >= 1
