"""experiments.row_variance: the closed-form step variances against Monte-Carlo over real plans
(grpo.plan.plan_minibatches), negative controls that the check must reject, the per-row gradients
against a brute-force loop, and a tiny end-to-end run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from costaware.experiments import row_variance as rv
from costaware.experiments.profile import Profile
from costaware.grpo.advantages import group_advantages
from costaware.grpo.config import SamplingConfig
from costaware.grpo.plan import plan_minibatches

STEPS, DRAWS = 2, 3000  # steps per pool; Monte-Carlo plans per method


@pytest.fixture(scope="module")
def pool():
    """A pool of 6 groups of 5 (3 informative: n_supp = 15, odd, so `nonzero`'s chunks are unequal) with
    per-row gradients g_i = A_i · u_i of very unequal norms in R^4, and costs spread 2..40."""
    rng = np.random.default_rng(7)
    rewards = np.array([1, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1, 0] + [1] * 5 + [0] * 10, dtype=np.float32)
    adv = group_advantages(torch.from_numpy(rewards), 5, eps=1e-4).double().numpy()
    costs = rng.integers(2, 41, adv.size).astype(float)
    u = rng.normal(size=(adv.size, 4)) * rng.lognormal(0, 1.0, size=(adv.size, 1)) + np.array([1.0, 0, 0, 0])
    g = adv[:, None] * u
    supp = np.abs(adv) > 0
    return adv, costs, g, supp


def mc_steps(plans, g, target):
    """Per plan, the deviations ε_s = step_s − target (steps, dim) of each step's estimate
    (1/num_draws) Σ weights · g[indices] (a merged row's weight holds its count)."""
    out = np.zeros((len(plans), STEPS, g.shape[1]))
    for k, plan in enumerate(plans):
        for s, mb in enumerate(plan.minibatches):
            out[k, s] = mb.weights.double().numpy() @ g[mb.indices.numpy()] / mb.num_draws - target
    return out


def within(value, samples, z=4.0):
    """|value − mean(samples)| < z standard errors of the mean."""
    return abs(value - samples.mean()) < z * samples.std(ddof=1) / np.sqrt(samples.size)


def plans(adv, costs, config, seed=0, minibatch_size=None):
    gen = torch.Generator().manual_seed(seed)
    return [plan_minibatches(adv, costs, num_minibatches=STEPS, minibatch_size=minibatch_size, config=config,
                             generator=gen) for _ in range(DRAWS)]  # fmt: skip


def closed_iid(g, supp, p_supp, m):
    target = g[supp].mean(0)
    return rv.iid_step_variance((g[supp] ** 2).sum(1), p_supp, float(target @ target), m)


def test_iid_step_variances_match_monte_carlo_over_real_plans(pool):
    adv, costs, g, supp = pool
    m, target = adv.size // STEPS, g[supp].mean(0)
    norms = np.linalg.norm(g, axis=1)
    probs = rv.method_probs(np.abs(adv[supp]), norms[supp], costs[supp])
    # the same draws as the job's: p* from |A| and the costs; the oracle and uniform-on-A≠0 through p*'s
    # plan with the oracle's norms, and with |A| := 1 on the support and unit costs
    cases = {
        "p_star": (adv, costs),
        "p_star_oracle": (norms, costs),
        "uniform": (supp.astype(float), np.ones_like(costs)),
    }
    for name, (a, c) in cases.items():
        eps = mc_steps(plans(a, c, SamplingConfig("p_star")), g, target)
        closed = closed_iid(g, supp, probs[name], m)
        assert within(closed, (eps**2).sum(-1).ravel()), name
        # steps are independent: the pool's summed noise has S times one step's variance
        assert within(STEPS * closed, (eps.sum(1) ** 2).sum(-1)), name
    # p_star_nzrows: the same p, nonzero's rows per step
    small = round(int(supp.sum()) / STEPS)
    eps = mc_steps(plans(adv, costs, SamplingConfig("p_star"), minibatch_size=small), g, target)
    assert within(closed_iid(g, supp, probs["p_star"], small), (eps**2).sum(-1).ravel())


def test_nonzero_partition_variances_match_monte_carlo_over_real_plans(pool):
    adv, costs, g, supp = pool
    target = g[supp].mean(0)
    eps = mc_steps(plans(adv, costs, SamplingConfig("nonzero")), g, target)
    per_step, summed = rv.partition_variances((g[supp] ** 2).sum(1), float(target @ target), STEPS)
    assert rv.chunk_sizes(int(supp.sum()), STEPS).tolist() == [8, 7]
    assert within(per_step, (eps**2).sum(-1).mean(1))
    assert within(summed, (eps.sum(1) ** 2).sum(-1))
    assert summed < 0.05 * STEPS * per_step  # the chunks nearly cancel: a partition, not fresh draws


def test_check_rejects_without_replacement_treated_as_with_replacement(pool):
    adv, costs, g, supp = pool
    target = g[supp].mean(0)
    eps = mc_steps(plans(adv, costs, SamplingConfig("nonzero")), g, target)
    n, sq = int(supp.sum()), (g[supp] ** 2).sum(1)
    sizes = rv.chunk_sizes(n, STEPS)
    sigma2 = sq.mean() - target @ target
    with_replacement = float(np.mean(sigma2 / sizes))  # no finite-population correction
    assert not within(with_replacement, (eps**2).sum(-1).mean(1))
    # and independent steps (S × one step) for the pool's summed noise
    assert not within(STEPS * with_replacement, (eps.sum(1) ** 2).sum(-1))


def test_check_rejects_self_normalised_weights(pool):
    adv, costs, g, supp = pool
    m, target = adv.size // STEPS, g[supp].mean(0)
    probs = rv.method_probs(np.abs(adv[supp]), np.linalg.norm(g[supp], axis=1), costs[supp])
    devs = []
    for plan in plans(adv, costs, SamplingConfig("p_star")):
        for mb in plan.minibatches:  # Σ w g / Σ w: the weights divided by their own sum
            w = mb.weights.double().numpy()
            devs.append(float(np.sum((w @ g[mb.indices.numpy()] / w.sum() - target) ** 2)))
    assert not within(closed_iid(g, supp, probs["p_star"], m), np.array(devs))


def test_fed_tokens_match_the_plans_tokens(pool):
    adv, costs, _, supp = pool
    p = rv.method_probs(np.abs(adv[supp]), np.ones(int(supp.sum())), costs[supp])["p_star"]
    tokens = np.array([mb.tokens for plan in plans(adv, costs, SamplingConfig("p_star")) for mb in plan.minibatches])
    assert within(rv.fed_tokens(p, costs[supp], adv.size // STEPS), tokens.astype(float))
    assert not within(adv.size // STEPS * float(p @ costs[supp]), tokens.astype(float))  # duplicates run once


def test_doctests_hold():
    import doctest

    assert doctest.testmod(rv, raise_on_error=True).attempted >= 2


TINY = Profile(hidden_size=32, num_layers=1, max_size=3, sft_steps=100, sft_batch=32, sft_lr=1e-2, rounds=1,
               prompts_per_round=8, generations=4, steps_per_generation=2, warmup_rounds=0, learning_rate=1e-3,
               eval_prompts=8, validation_prompts=0, diagnostics_rows=0, seeds=(0,), lr_sweep=())  # fmt: skip


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from costaware.experiments.sft import warm_up

    torch.set_num_threads(1)
    return warm_up(TINY, "sort", tmp_path_factory.mktemp("rv"))


def test_pool_gradient_and_row_norms_match_a_row_by_row_loop(tiny_dir):
    from costaware.experiments.worker import load_checkpoint

    tok, model = load_checkpoint(tiny_dir)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    batch = None
    while batch is None:
        batch, rows, rate = rv.rollout_batch(model, tok, "sort", TINY, rng, gen)
    pool = rv.measure_pool(model, batch, rows, rate)
    assert rows == TINY.prompts_per_round * TINY.generations and np.all(pool.adv != 0)
    # brute force: each row alone (its own padding only) through the sequence-mean loss, one backward each
    params = [p for p in model.parameters() if p.requires_grad]
    grads = []
    for i in range(pool.adv.size):
        n = int(batch["attention_mask"][i].sum())
        row = {k: v[i : i + 1, :n] if v.ndim == 2 else v[i : i + 1] for k, v in batch.items()}
        loss = rv.grpo_row_losses(model, row).sum()
        grads.append(torch.cat([x.double().flatten() for x in torch.autograd.grad(loss, params)]))
    grads = torch.stack(grads)
    assert torch.allclose(grads.mean(0), pool.grad, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose((grads**2).sum(1).numpy(), pool.sq_norms, rtol=1e-4)
    np.testing.assert_array_equal(pool.costs, [int(batch["attention_mask"][i].sum()) for i in range(pool.adv.size)])


def test_tiny_run_returns_a_typed_table(tiny_dir, tmp_path):
    import shutil

    shutil.copytree(tiny_dir, tmp_path / tiny_dir.name)
    res = rv.run(TINY, rounds=(0, 1), pools=3, seed=0, out=tmp_path)
    assert dataclasses.is_dataclass(res) and [c.rounds for c in res.checkpoints] == [0, 1]
    for c in res.checkpoints:
        assert [r.method for r in c.methods] == list(rv.METHODS)
        nz = c.methods[0]
        assert nz.j_vs_nonzero == nz.j_eff_vs_nonzero == 1.0 and c.v_pool >= 0
        for r in c.methods:
            assert np.isfinite([r.v_sub, r.v_eff, r.tokens, r.j_vs_uniform, r.j_eff_vs_nonzero]).all()
            assert r.v_eff >= TINY.steps_per_generation * c.v_pool  # the pool noise is a floor
    assert "V_pool" in rv.format_checkpoint(res.checkpoints[0])


@pytest.mark.parametrize(
    "kw, name", [(dict(pools=1), "pools"), (dict(rounds=(-1,)), "rounds"), (dict(seed=-2), "seed")]
)
def test_bad_options_get_one_error_naming_them(kw, name, tmp_path, capsys):
    args = {"rounds": (0,), "pools": 2, "seed": 0} | kw
    with pytest.raises(ValueError, match=f"^{name} must"):
        rv.run(TINY, out=tmp_path, **args)
    argv = {"pools": ["--pools", "1"], "rounds": ["--rounds", "-1"], "seed": ["--seed", "-2"]}[name]
    assert rv.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"row_variance: error: {name} must") and "\n" not in err
