"""Prompt-level importance weights: the expected update over prompt draws × row draws is full-dataset
GRPO's, (1/N) Σ_j g_j, by exact enumeration and by Monte-Carlo through the real sampler and row plan.

Three wrong prompt weights are implemented here and must be detected: self-normalised factors, a
missing factor, and the factor applied twice. The two-stage rollout's 1/ρ weight is checked the same way.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from costaware.grpo.advantages import group_advantages
from costaware.grpo.plan import SamplingConfig, plan_minibatches
from costaware.rollouts import PromptState, StateConfig, cost_aware_prompts, two_stage, uniform_prompts
from costaware.sampler import CostAwareSampler

G, EPS = 3, 1e-4
# N = 4 prompts with fixed groups (ordered rewards): informative, informative, informative, all correct
REWARDS = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
N = REWARDS.shape[0]
RNG = np.random.default_rng(7)
X = RNG.normal(size=(N, G, 2))  # per-row "∇ log π" directions: row gradient = A_i · x_i
COSTS = RNG.integers(3, 20, size=(N, G)).astype(float)
ADV = group_advantages(torch.tensor(REWARDS.reshape(-1)), G, eps=EPS).numpy().reshape(N, G)
GROUP_GRAD = (ADV[..., None] * X).mean(axis=1)  # g_j: GRPO's sequence-mean loss over a group's rows
FULL = GROUP_GRAD.mean(axis=0)  # full-dataset GRPO: (1/N) Σ_j g_j


def _state() -> PromptState:
    st = PromptState(StateConfig(group_size=G, decay=0.8), N, prompt_tokens=[10, 40, 5, 20])
    st.update(
        [0, 3, 3, 1], [[0, 0, 1], [1, 1, 1], [1, 1, 1], [1, 0, 1]], [[9, 9, 9], [3, 3, 3], [4, 4, 4], [20] * 3], 0
    )
    return st


def _q() -> np.ndarray:
    q = cost_aware_prompts(floor=0.2).probabilities(_state(), round=1)
    assert np.ptp(q) > 0.05  # a non-uniform q, or the wrong weights could not show
    return q


def _row_p(adv: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """p* of the row plan over a pool, p ∝ |A|/√c (zero-advantage rows excluded), in float64."""
    a = np.abs(adv)
    a = np.where(a > 1e-6 * a.max(), a, 0.0) if a.max() > 0 else a
    s = a / np.sqrt(cost)
    return s / s.sum() if s.sum() > 0 else s


FACTOR_RULES = {
    "correct": lambda f: f,
    "self_normalised": lambda f: f / f.mean(),
    "missing": lambda f: np.ones_like(f),
    "twice": lambda f: f**2,
}


def _expected_update(q: np.ndarray, B: int, m: int, rule: str, stage_two=None) -> np.ndarray:
    """E over every ordered draw of B prompts from q and of m rows from p*: exact enumeration."""
    total = np.zeros(2)
    factor = FACTOR_RULES[rule]
    for draw in itertools.product(range(N), repeat=B):
        ids = np.array(draw)
        pq = float(np.prod(q[ids]))
        f = factor(uniform_prompts().prompt_factors(q, ids))
        outcomes = [(1.0, np.ones(B, bool), np.ones(B))] if stage_two is None else stage_two(ids)
        for pc, completed, extra in outcomes:
            adv = np.where(completed[:, None], ADV[ids], 0.0).reshape(-1)  # stopped groups: zero rows
            vec = ((f * extra)[:, None, None] * adv.reshape(B, G)[..., None] * X[ids]).reshape(B * G, 2)
            p = _row_p(adv, COSTS[ids].reshape(-1))
            if p.sum() == 0:
                continue
            n = B * G
            for rows in itertools.product(np.flatnonzero(p), repeat=m):  # m i.i.d. row draws
                r = np.array(rows)
                pr = float(np.prod(p[r]))
                est = (vec[r] / (n * p[r, None])).mean(axis=0)  # raw weights 1/(n p): unbiased for the pool mean
                total += pq * pc * pr * est
    return total


def test_row_plan_p_star_is_the_formula_used_by_the_enumeration():
    ids = np.array([0, 1])
    adv = ADV[ids].reshape(-1)
    plan = plan_minibatches(
        torch.tensor(adv),
        torch.tensor(COSTS[ids].reshape(-1)),
        num_minibatches=1,
        config=SamplingConfig(method="p_star", weights="raw"),
    )
    np.testing.assert_allclose(plan.probs.numpy(), _row_p(adv, COSTS[ids].reshape(-1)), rtol=1e-6)


@pytest.mark.parametrize("B", [1, 2])
def test_prompt_factors_make_the_expected_update_full_dataset_grpo(B):
    q = _q()
    np.testing.assert_allclose(_expected_update(q, B, m=2, rule="correct"), FULL, rtol=1e-12, atol=1e-14)


def test_uniform_prompts_have_factor_exactly_one_and_are_unbiased():
    q = uniform_prompts().probabilities(_state(), 1)
    assert (uniform_prompts().prompt_factors(q, np.arange(N)) == 1.0).all()
    np.testing.assert_allclose(_expected_update(q, 2, m=1, rule="correct"), FULL, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("rule", ["self_normalised", "missing", "twice"])
def test_wrong_prompt_weights_are_detected_by_enumeration(rule):
    q = _q()
    got = _expected_update(q, 2, m=1, rule=rule)
    assert np.abs(got - FULL).max() > 1e-3 * np.abs(FULL).max(), f"{rule} was not detected"


def _two_stage_outcomes(q: np.ndarray, m: int, fixed_rho: float | None = None):
    """Every stage-2 coin outcome of a draw: (probability, completed groups, weight 1/ρ on completed)."""
    st, ts = _state(), two_stage(first=m, floor=0.3)

    def outcomes(ids: np.ndarray):
        agree = REWARDS[ids, :m].max(axis=1) == REWARDS[ids, :m].min(axis=1)
        if fixed_rho is None:
            rho = ts.continue_probabilities(
                st, 1, ids, REWARDS[ids, :m], prompt_factors=uniform_prompts().prompt_factors(q, ids)
            )
        else:
            rho = np.where(agree, fixed_rho, 1.0)
        assert (rho[~agree] == 1).all() and (rho[agree] >= 0.3).all() and (rho <= 1).all()
        out = []
        for coins in itertools.product([True, False], repeat=ids.size):
            coins = np.array(coins)
            if (~coins & ~agree).any():
                continue  # a group whose first m disagree always completes
            pc = float(np.prod(np.where(agree, np.where(coins, rho, 1 - rho), 1.0)))
            out.append((pc, coins, np.where(coins, 1.0 / rho, 0.0)))
        return out

    return outcomes


def _without_rho(outcomes):
    return lambda ids: [(pc, done, np.where(done, 1.0, 0.0)) for pc, done, _ in outcomes(ids)]


@pytest.mark.parametrize("m,fixed_rho", [(1, 0.35), (2, 0.35), (2, None)])
def test_two_stage_with_inverse_rho_is_unbiased_and_without_it_is_not(m, fixed_rho):
    q = _q()
    outcomes = _two_stage_outcomes(q, m, fixed_rho)
    if fixed_rho is None:  # the rule's ρ: prompt 1's first two agree but its group is informative
        rho = two_stage(first=m, floor=0.3).continue_probabilities(_state(), 1, [0, 1], REWARDS[[0, 1], :m])
        assert rho[0] == 1 and 0.3 <= rho[1] < 1
    got = _expected_update(q, 2, m=1, rule="correct", stage_two=outcomes)
    np.testing.assert_allclose(got, FULL, rtol=1e-12, atol=1e-14)
    wrong = _expected_update(q, 2, m=1, rule="correct", stage_two=_without_rho(outcomes))
    assert np.abs(wrong - FULL).max() > 1e-3 * np.abs(FULL).max()


def test_two_stage_with_one_first_response_completes_everything():
    """m = 1: no first stage disagrees, so no variance is fixed and the variance × cost optimum is ρ = 1."""
    rho = two_stage(first=1, floor=0.1).continue_probabilities(_state(), 1, [0, 1, 2, 3], REWARDS[:, :1])
    assert (rho == 1).all()


def test_monte_carlo_through_the_sampler_and_the_row_plan_matches_full_grpo():
    """Prompts drawn by CostAwareSampler (p = q, raw weights = prompt factors), rows by plan_minibatches."""
    q, B, trials = _q(), 4, 3000
    sampler = CostAwareSampler(
        *reversed(cost_aware_prompts(floor=0.2).sampler_inputs(_state(), 1)),
        alpha=0.2,
        weights="raw",
        num_samples=B * trials,
        seed=0,
        yield_weights=True,
    )
    np.testing.assert_allclose(sampler.probabilities, q, rtol=1e-12)
    draws = np.array(list(sampler))
    ids_all, f_all = draws[:, 0].astype(int).reshape(trials, B), draws[:, 1].reshape(trials, B)
    np.testing.assert_allclose(f_all, 1.0 / (N * q[ids_all]), rtol=1e-12)
    gen = torch.Generator().manual_seed(1)
    cfg = SamplingConfig(method="p_star", weights="raw")
    est = {rule: np.zeros((trials, 2)) for rule in FACTOR_RULES}
    for t in range(trials):
        ids = ids_all[t]
        adv = ADV[ids].reshape(-1)
        if not np.abs(adv).max() > 0:
            continue
        plan = plan_minibatches(
            torch.tensor(adv),
            torch.tensor(COSTS[ids].reshape(-1)),
            num_minibatches=1,
            minibatch_size=3,
            config=cfg,
            generator=gen,
        )
        (mb,) = plan.minibatches
        rows = mb.indices.numpy()
        grad = adv[rows, None] * X[ids].reshape(-1, 2)[rows]
        for rule, fn in FACTOR_RULES.items():
            f = fn(f_all[t])[rows // G]
            est[rule][t] = (mb.weights.numpy().astype(np.float64)[:, None] * f[:, None] * grad).sum(0) / mb.num_draws
    se = est["correct"].std(axis=0) / np.sqrt(trials)
    assert (np.abs(est["correct"].mean(axis=0) - FULL) < 4 * se + 1e-6).all()
    for rule in ("missing", "twice"):
        assert (np.abs(est[rule].mean(axis=0) - FULL) > 6 * se).any(), f"{rule} was not detected by Monte-Carlo"
