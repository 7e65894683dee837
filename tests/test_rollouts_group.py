"""The group proxy Σ|A_i| for 0/1 rewards: closed form against the real advantage code, and its
expectations against exact enumeration over reward vectors and against Monte-Carlo."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import betabinom

from costaware.grpo.advantages import group_advantages
from costaware.rollouts.group import (
    TRL_EPS,
    abs_adv_sum,
    expected_abs_adv_sum,
    predictive_abs_adv_sum,
    row_abs_advantages,
)


def _real(rewards: np.ndarray, G: int, unbiased: bool = True, eps: float = TRL_EPS) -> np.ndarray:
    """Σ|A| per group from costaware.grpo.advantages.group_advantages (float64)."""
    a = group_advantages(torch.tensor(rewards.reshape(-1), dtype=torch.float64), G, eps=eps, unbiased_std=unbiased)
    return a.abs().numpy().reshape(-1, G).sum(axis=1)


@pytest.mark.parametrize("G", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("std", ["sample", "population"])
def test_closed_form_matches_group_advantages_for_every_k(G, std):
    k = np.arange(G + 1)
    rewards = (np.arange(G)[None, :] < k[:, None]).astype(float)  # k ones then zeros
    np.testing.assert_allclose(abs_adv_sum(k, G, std=std), _real(rewards, G, std == "sample"), rtol=1e-12, atol=1e-12)


def test_closed_forms_without_eps():
    G, k = 8, np.arange(9)
    q = k / G
    np.testing.assert_allclose(abs_adv_sum(k, G, std="population", eps=0), 2 * G * np.sqrt(q * (1 - q)), atol=1e-12)
    np.testing.assert_allclose(abs_adv_sum(k, G, eps=0), 2 * np.sqrt(G * (G - 1) * q * (1 - q)), atol=1e-12)
    assert abs_adv_sum([0, G], G).tolist() == [0.0, 0.0] and abs_adv_sum([1], 1).tolist() == [0.0]


@pytest.mark.parametrize("G", [2, 4, 6])
def test_expectation_matches_enumeration_of_every_reward_vector(G):
    pis = np.array([0.0, 0.1, 0.5, 0.83, 1.0])
    vecs = np.array(list(itertools.product([0.0, 1.0], repeat=G)))
    s = _real(vecs, G)
    k = vecs.sum(axis=1)
    for moment in (1, 2):
        exact = [(pi**k * (1 - pi) ** (G - k) * s**moment).sum() for pi in pis]
        np.testing.assert_allclose(expected_abs_adv_sum(pis, G, moment=moment), exact, rtol=1e-10, atol=1e-12)


def test_expectation_matches_monte_carlo_with_the_real_advantages():
    rng = np.random.default_rng(0)
    G, pis, n = 8, np.array([0.05, 0.3, 0.6, 0.95]), 20000
    r = (rng.random((pis.size, n, G)) < pis[:, None, None]).astype(float)
    mc = _real(r.reshape(-1, G), G).reshape(pis.size, n)
    se = mc.std(axis=1) / np.sqrt(n)
    assert (np.abs(mc.mean(axis=1) - expected_abs_adv_sum(pis, G)) < 4 * se).all()


def test_beta_binomial_predictive_matches_monte_carlo_over_the_posterior():
    rng = np.random.default_rng(1)
    G, a, b, n = 6, np.array([0.5, 2.0, 7.0]), np.array([0.5, 5.0, 1.5]), 40000
    pi = rng.beta(a[:, None], b[:, None], (a.size, n))
    r = (rng.random((a.size, n, G)) < pi[..., None]).astype(float)
    mc = _real(r.reshape(-1, G), G).reshape(a.size, n)
    se = mc.std(axis=1) / np.sqrt(n)
    assert (np.abs(mc.mean(axis=1) - predictive_abs_adv_sum(a, b, G)) < 4 * se).all()


def test_predictive_given_the_first_responses_matches_enumeration():
    G, m, a, b = 5, 2, 1.5, 2.5
    for k1 in range(m + 1):
        # posterior after the first m: Beta(a + k1, b + m - k1); the rest enumerated with Beta-binomial weights
        j = np.arange(G - m + 1)
        w = betabinom.pmf(j, G - m, a + k1, b + m - k1)
        exact = (w * abs_adv_sum(k1 + j, G)).sum()
        assert predictive_abs_adv_sum(a, b, G, first=m, first_correct=k1) == pytest.approx(exact, rel=1e-12)


def test_row_abs_advantages_match_group_advantages():
    r = np.random.default_rng(2).random((5, 4))
    want = group_advantages(torch.tensor(r.reshape(-1)), 4, eps=TRL_EPS).abs().numpy().reshape(5, 4)
    np.testing.assert_allclose(row_abs_advantages(r), want, rtol=1e-12)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: abs_adv_sum([3], 2), "k must hold integers in"),
        (lambda: expected_abs_adv_sum(1.5, 4), "pass_rate must lie in"),
        (lambda: predictive_abs_adv_sum(0.0, 1.0, 4), "a must be > 0"),
        (lambda: abs_adv_sum([1], 4, std="ddof2"), "std must be"),
        (lambda: abs_adv_sum([1], 4, eps=-1), "eps must be >= 0"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
