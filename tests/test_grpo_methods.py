"""Sampling methods as objects: each factory's flags, and its probabilities or rows against a brute-force
reference; cost-aware PODS against exhaustive search over every subset."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
import torch

from costaware.grpo import methods as M
from costaware.grpo.config import SamplingConfig
from costaware.grpo.plan import plan_minibatches
from costaware.grpo.pods import MAX_SUBSETS, cost_pods_select, pods_select

RNG = np.random.default_rng(0)
G = np.array([0.0, 1.0, 2.0, 0.5, 0.0, 3.0])  # proxy |A|
C = np.array([10.0, 40.0, 25.0, 10.0, 30.0, 90.0])  # costs
FLAGS = ("weighted", "fixed_size", "full_support", "uses_proxy", "uses_costs", "needs_groups", "biased", "plain")


def flags(m: M.SamplingMethod) -> dict[str, bool]:
    return {f: bool(getattr(m, f)) for f in FLAGS}


def expect(**on: bool) -> dict[str, bool]:
    return {f: on.get(f, False) for f in FLAGS}


def test_none_is_plain_grpo_every_row_once():
    m = M.none()
    assert m.name == "none" and flags(m) == expect(fixed_size=True, full_support=True, plain=True)
    pool = M.RowPool(torch.tensor([1.0, 0.0, -1.0]), torch.tensor([True, False, True]), C[:3], None, None, 1e-6)
    assert m.select(pool).rows is None  # every row of the pool


def test_p_star_is_proportional_to_the_proxy_over_root_cost():
    m = M.p_star()
    assert m.name == "p_star" and flags(m) == expect(weighted=True, fixed_size=True, uses_proxy=True, uses_costs=True)
    want = (G / np.sqrt(C)) / (G / np.sqrt(C)).sum()
    got = m.probs(G, C, 0.0)
    np.testing.assert_allclose(got.p, want, rtol=1e-12)
    assert (got.beta, got.alpha) == (0.0, 0.0)
    length_aware = G * C ** (1.0 - 0.5)  # beta = 1: p ∝ |A|·c^(β−½)
    np.testing.assert_allclose(m.probs(G, C, 1.0).p, length_aware / length_aware.sum(), rtol=1e-12)


def test_p_smooth_mixes_in_uniform_and_has_full_support_only_with_alpha():
    m = M.p_smooth(0.2)
    assert flags(m) == expect(weighted=True, fixed_size=True, full_support=True, uses_proxy=True, uses_costs=True)
    assert not M.p_smooth(0.0).full_support
    star = (G / np.sqrt(C)) / (G / np.sqrt(C)).sum()
    np.testing.assert_allclose(m.probs(G, C, 0.0).p, 0.8 * star + 0.2 / G.size, rtol=1e-12)
    zero = m.probs(np.zeros(4), C[:4], 0.0)  # p* has no mass: the uniform part alone
    assert zero.p.tolist() == [0.25] * 4


def test_p_smooth_adaptive_alpha_bounds_the_largest_raw_weight():
    m = M.p_smooth(0.0, adaptive_max_weight=1.05)  # p* alone gives a raw weight of 1.09
    got = m.probs(G, C, 0.0)
    raw = 1.0 / (G.size * got.p[G > 0])
    assert raw.max() <= 1.05 * (1 + 1e-9) and 0 < got.alpha <= M.ALPHA_AUTO_MAX
    # the smallest such α: a slightly smaller one breaks the bound
    star = (G / np.sqrt(C)) / (G / np.sqrt(C)).sum()
    smaller = (1 - got.alpha * 0.99) * star + got.alpha * 0.99 / G.size
    assert (1.0 / (G.size * smaller[G > 0])).max() > 1.05


def test_inv_sqrt_cost_ignores_the_proxy():
    m = M.inv_sqrt_cost()
    assert flags(m) == expect(weighted=True, fixed_size=True, full_support=True, uses_costs=True)
    want = C**-0.5 / (C**-0.5).sum()
    np.testing.assert_allclose(m.probs(np.zeros_like(C), C, 0.0).p, want, rtol=1e-12)


def test_variance_is_proportional_to_the_proxy_and_blind_to_costs():
    m = M.variance()
    assert flags(m) == expect(weighted=True, fixed_size=True)
    np.testing.assert_allclose(m.probs(G, C, 0.0).p, G / G.sum(), rtol=1e-12)


def test_uniform_gives_every_row_one_over_n():
    m = M.uniform()
    assert flags(m) == expect(weighted=True, fixed_size=True, full_support=True)
    assert m.probs(G, C, 0.0).p.tolist() == [1 / 6] * 6


def test_nonzero_keeps_exactly_the_rows_with_signal_and_is_unbiased_in_direction():
    m = M.nonzero()
    assert flags(m) == expect()  # not fixed size, not biased: its expectation is centred p*'s
    signal = torch.from_numpy(G > 0)
    pool = M.RowPool(torch.from_numpy(G).float(), signal, C, None, None, 1e-6)
    assert m.select(pool).rows.tolist() == np.flatnonzero(G > 0).tolist()


def test_pods_keeps_the_max_variance_subset_of_each_group():
    m = M.pods(2)
    assert flags(m) == expect(needs_groups=True, biased=True)
    r = torch.tensor([0.1, 0.9, 0.5, 0.4, 3.0, 1.0, 2.0, 2.5], dtype=torch.float64)
    mask = pods_select(r, 4, 2).reshape(2, 4)
    for g in range(2):
        vals = r[4 * g : 4 * g + 4].numpy()
        best = max(combinations(range(4), 2), key=lambda s: np.var(vals[list(s)]))
        assert sorted(torch.nonzero(mask[g]).reshape(-1).tolist()) == list(best)


def test_cost_pods_flags_and_its_default_keep_is_half_the_group():
    m = M.cost_pods()
    assert m.name == "cost_pods" and m.keep is None
    assert flags(m) == expect(needs_groups=True, biased=True, uses_costs=True)


def _brute_cost_pods(r: np.ndarray, c: np.ndarray, keep: int) -> float:
    """The best objective Σ(r − r̄_S)² / Σ c over every keep-subset of one group."""
    return max(
        ((r[list(s)] - r[list(s)].mean()) ** 2).sum() / c[list(s)].sum() for s in combinations(range(r.size), keep)
    )


def _objective(r: np.ndarray, c: np.ndarray, rows: np.ndarray) -> float:
    return float(((r[rows] - r[rows].mean()) ** 2).sum() / c[rows].sum())


@pytest.mark.parametrize(("group", "keep"), [(4, 2), (6, 3), (8, 3), (8, 5), (5, 4)])
def test_cost_pods_matches_brute_force_over_every_subset_with_unequal_costs(group, keep):
    rng = np.random.default_rng(group * 10 + keep)
    groups = 40
    rewards = np.where(rng.random(groups * group) < 0.5, rng.integers(0, 2, groups * group), rng.random(groups * group))
    costs = rng.integers(5, 400, groups * group).astype(np.float64)
    mask = cost_pods_select(torch.from_numpy(rewards), torch.from_numpy(costs), group, keep).numpy()
    for g in range(groups):
        sl = slice(g * group, (g + 1) * group)
        rows = np.flatnonzero(mask[sl])
        assert rows.size == keep
        assert _objective(rewards[sl], costs[sl], rows) == pytest.approx(
            _brute_cost_pods(rewards[sl], costs[sl], keep), rel=1e-12
        )


def test_cost_pods_prefers_the_cheaper_of_two_equally_varied_subsets():
    # rows 0/1 and 2/3 carry the same reward spread; 2/3 cost a tenth as much
    mask = cost_pods_select(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([90.0, 90.0, 9.0, 9.0]), 4, 2)
    assert mask.tolist() == [False, False, True, True]
    # pods ignores the costs: it may keep the expensive pair
    assert pods_select(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4, 2).tolist() == [True, False, False, True]


@pytest.mark.parametrize(("group", "keep"), [(4, 2), (8, 4), (8, 3), (6, 5)])
def test_cost_pods_with_equal_costs_makes_pods_choice(group, keep):
    rng = np.random.default_rng(keep)
    rewards = torch.from_numpy(rng.normal(size=50 * group))  # continuous: the max-variance subset is unique
    equal = torch.full((50 * group,), 37.0, dtype=torch.float64)
    assert torch.equal(cost_pods_select(rewards, equal, group, keep), pods_select(rewards, group, keep))
    # 0/1 rewards tie: the chosen subsets then reach PODS's variance
    binary = torch.from_numpy(rng.integers(0, 2, 50 * group).astype(np.float64))
    a, b = cost_pods_select(binary, equal, group, keep), pods_select(binary, group, keep)
    va = binary.reshape(-1, group)[a.reshape(-1, group)].reshape(-1, keep).var(1)
    vb = binary.reshape(-1, group)[b.reshape(-1, group)].reshape(-1, keep).var(1)
    torch.testing.assert_close(va, vb)


def test_cost_pods_refuses_a_search_over_too_many_subsets():
    with pytest.raises(ValueError, match=r"group_size=24, keep=12 .*MAX_SUBSETS"):
        cost_pods_select(torch.zeros(24), torch.ones(24), 24, 12)
    assert MAX_SUBSETS >= 12870  # every keep of a 16-row group fits


def test_cost_pods_plan_runs_the_kept_rows_with_recomputed_advantages():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    costs = torch.tensor([90, 90, 9, 9, 50, 10, 10, 50])
    adv = torch.ones(8)  # the pool's own advantages are not what the kept rows use
    plan = plan_minibatches(adv, costs, num_minibatches=1, config=SamplingConfig("cost_pods", pods_keep=2),
                            rewards=rewards, group_size=4, generator=torch.Generator().manual_seed(0))  # fmt: skip
    rows = sorted(plan.minibatches[0].indices.tolist())
    assert rows == [2, 3, 5, 6]  # the cheap 1/0 pair of each group
    assert plan.advantages[[0, 1, 4, 7]].tolist() == [0.0] * 4 and plan.probs is None
    assert SamplingConfig("cost_pods").rule.needs_groups
    with pytest.raises(ValueError, match="needs rewards and group_size"):
        plan_minibatches(adv, costs, num_minibatches=1, config=SamplingConfig("cost_pods"))


def test_the_parser_is_the_one_place_a_name_meets_its_object():
    assert M.METHODS == tuple(M.REGISTRY) and "cost_pods" in M.METHODS
    for name in M.METHODS:
        assert M.method_from_name(name).name == name == SamplingConfig(name).rule.name
    assert M.method_from_name("pods", keep=3, alpha=0.5) == M.pods(3)
    with pytest.raises(ValueError, match="method must be one of .*'bogus'"):
        M.method_from_name("bogus")
    with pytest.raises(TypeError, match="options must be among"):
        M.method_from_name("p_star", beta=1.0)
    with pytest.raises(ValueError, match="keep must be a positive integer or None, got 0"):
        M.pods(0)
    with pytest.raises(ValueError, match=r"alpha must be 0 or lie in \[1e-300, 1\], got 2"):
        M.p_smooth(2)
    assert M.method_names(lambda m: m.uses_costs) == ("p_star", "p_smooth", "inv_sqrt_cost", "cost_pods")


def test_a_method_name_is_registered_once_and_a_class_checks_its_options():
    from dataclasses import dataclass
    from typing import ClassVar

    from costaware.sampling_options import DEFAULT_ALPHA, option

    @dataclass(frozen=True)
    class Impostor(M.Drawing):
        name: ClassVar[str] = "p_star"

        def probs(self, proxy, costs, beta):
            return M.Probs(proxy / proxy.sum(), None, None)

    with pytest.raises(ValueError, match=r"a sampling method named 'p_star' is already registered \(PStar\)"):
        M.register_method(Impostor)
    assert M.REGISTRY["p_star"] is M.PStar and M.register_method(M.PStar) is M.PStar
    assert M.p_smooth is M.PSmooth and M.PSmooth().alpha == DEFAULT_ALPHA == option("alpha").default
    with pytest.raises(ValueError, match=r"alpha must be 0 or lie in \[1e-300, 1\], got 2"):
        M.PSmooth(alpha=2)  # the class checks what the factory did
    with pytest.raises(ValueError, match="keep must be a positive integer or None, got 0"):
        M.CostPods(keep=0)
