"""CostAwareSampler: frequencies match p, unbiased weighted means, ranks/seeds, DataLoader, bad input."""

import numpy as np
import pytest
import torch
from scipy import stats
from torch.utils.data import DataLoader, TensorDataset

from costaware import distributions as dist
from costaware.sampler import CostAwareSampler, WeightedIndexDataset


def _problem(n=50, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(1, 100, n), rng.uniform(0, 2, n)


def test_frequencies_match_p_chi_square():
    c, G = _problem()
    s = CostAwareSampler(c, G, alpha=0.05, num_samples=500_000, seed=1)
    p = dist.smoothed(dist.optimal(G, c), 0.05)
    np.testing.assert_allclose(s.probabilities, p, rtol=1e-12)
    idx = np.fromiter(iter(s), dtype=np.int64)
    assert idx.size == len(s) == 500_000
    counts = np.bincount(idx, minlength=c.size)
    assert stats.chisquare(counts, p * idx.size).pvalue > 1e-4
    # the same statistic rejects the cost-blind variance distribution
    assert stats.chisquare(counts, dist.variance(G) * idx.size).pvalue < 1e-10


def test_default_proxies_give_inverse_sqrt_cost():
    c, _ = _problem()
    np.testing.assert_allclose(CostAwareSampler(c).probabilities, dist.inverse_sqrt_cost(c), rtol=1e-12)


@pytest.mark.parametrize("mode", ["centred", "raw"])
def test_weighted_mean_is_unbiased(mode):
    """Monte-Carlo: mean of w_i·x_i over draws is (1/n) Σ x_i (raw) or n/n_supp times it (centred).

    α = 0 and ten G_i = 0, so n_supp = 70 < n = 80 and the two modes differ; x vanishes off the
    support (otherwise no sampler restricted to it could be unbiased)."""
    c, G = _problem(n=80, seed=2)
    G[:10] = 0.0
    x = np.random.default_rng(3).normal(size=80) + 3.0
    x[:10] = 0.0  # components outside the support must carry no mass for unbiasedness
    s = CostAwareSampler(c, G, num_samples=400_000, seed=4, weights=mode, yield_weights=True)
    pairs = np.array(list(s))
    idx, w = pairs[:, 0].astype(np.int64), pairs[:, 1]
    est = w * x[idx]
    target, other = x.mean() * 80 / 70, x.mean()  # centred = raw × n/n_supp
    if mode == "raw":
        target, other = other, target
    se = est.std() / np.sqrt(est.size)
    assert abs(est.mean() - target) < 4 * se
    assert abs(est.mean() - other) > 4 * se  # the test distinguishes the two scalings
    np.testing.assert_allclose(s.weights_for(idx[:100], dtype=torch.float64).numpy(), w[:100], rtol=1e-15)
    if mode == "centred":
        assert abs(w.mean() - 1.0) < 4 * w.std() / np.sqrt(w.size)


def test_ranks_differ_seed_reproduces_epochs_differ():
    c, G = _problem()
    mk = lambda **kw: list(CostAwareSampler(c, G, num_samples=1000, world_size=4, **kw))  # noqa: E731
    r0, r1 = mk(rank=0, seed=7), mk(rank=1, seed=7)
    assert r0 != r1 and r0 == mk(rank=0, seed=7)
    assert r0 != mk(rank=0, seed=8)
    s = CostAwareSampler(c, G, num_samples=1000, seed=7, rank=0, world_size=4)
    assert list(s) == r0 and list(s) == r0  # same epoch, same stream
    s.set_epoch(1)
    e1 = list(s)
    assert e1 != r0
    s.set_epoch(1)
    assert list(s) == e1
    # default num_samples splits n over the ranks like DistributedSampler
    assert len(CostAwareSampler(c, world_size=3, rank=2)) == 17


def test_generator_gives_fresh_reproducible_streams():
    c, G = _problem()
    a = CostAwareSampler(c, G, num_samples=100, generator=torch.Generator().manual_seed(0))
    b = CostAwareSampler(c, G, num_samples=100, generator=torch.Generator().manual_seed(0))
    first = list(a)
    assert first == list(b) and list(a) != first


def test_update_proxies_changes_p_and_ema():
    c = np.ones(4)
    s = CostAwareSampler(c, num_samples=10_000, seed=0, chunk_size=100)
    s.update_proxies(torch.tensor([0, 1]), torch.tensor([3.0, 0.0]))
    np.testing.assert_allclose(s.proxies, [3.0, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(s.probabilities, [0.6, 0.0, 0.2, 0.2])
    assert 1 not in set(s)
    e = CostAwareSampler(c, momentum=0.75)
    e.update_proxies([2, 2], [9.0, 5.0])  # last occurrence wins
    assert e.proxies[2] == pytest.approx(0.75 * 1.0 + 0.25 * 5.0)
    with pytest.raises(ValueError, match="every proxy to 0"):
        s.update_proxies([0, 2, 3], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(s.proxies, [3.0, 0.0, 1.0, 1.0])  # refused update changed nothing
    with pytest.raises(ValueError, match="p = 0"):
        s.weights_for([1])


def test_update_mid_epoch_takes_effect_at_next_chunk():
    s = CostAwareSampler(np.ones(2), num_samples=200, chunk_size=100, seed=0, yield_weights=True)
    it = iter(s)
    first = [next(it) for _ in range(100)]
    s.update_proxies([0], [0.0])
    rest = list(it)
    assert {i for i, _ in first} == {0, 1}
    assert {i for i, _ in rest} == {1} and all(w == 1.0 for _, w in rest)


def test_state_dict_roundtrip():
    c, G = _problem()
    s = CostAwareSampler(c, G, num_samples=50, seed=3)
    s.update_proxies([0, 1], [5.0, 6.0])
    s.set_epoch(2)
    t = CostAwareSampler(c, num_samples=50)
    t.load_state_dict(s.state_dict())
    assert list(t) == list(s)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_integration(num_workers):
    n = 30
    x = torch.arange(n, dtype=torch.float32)
    c, G = _problem(n=n, seed=5)
    s = CostAwareSampler(c, G, alpha=0.1, num_samples=64, seed=0, yield_weights=True)
    loader = DataLoader(
        WeightedIndexDataset(TensorDataset(x)), batch_size=16, sampler=s, num_workers=num_workers
    )
    seen_idx, seen_w = [], []
    for (xb,), idx, w in loader:
        assert xb.shape == idx.shape == w.shape == (16,) and w.dtype == torch.float32
        torch.testing.assert_close(xb, idx.float())  # the sample is the one the index names
        seen_idx.append(idx)
        seen_w.append(w)
    idx, w = torch.cat(seen_idx), torch.cat(seen_w)
    assert idx.tolist() == [i for i, _ in s]
    torch.testing.assert_close(w, s.weights_for(idx))
    # plain integer sampler also works as a drop-in
    plain = CostAwareSampler(c, G, num_samples=20, seed=0)
    batches = list(DataLoader(TensorDataset(x), batch_size=5, sampler=plain))
    assert torch.cat([b[0] for b in batches]).long().tolist() == list(plain)
    # a plain key into the wrapper gets weight 1
    assert WeightedIndexDataset(TensorDataset(x))[3][2].item() == 1.0


def test_bad_input():
    c = [1.0, 2.0]
    cases = [
        (dict(costs=[1.0, 0.0]), "costs must be > 0"),
        (dict(costs=[1.0, np.nan]), "finite"),
        (dict(costs=[]), "empty"),
        (dict(costs=c, proxies=[1.0]), "mismatched"),
        (dict(costs=c, proxies=[0.0, 0.0]), "all zeros"),
        (dict(costs=c, proxies=[1.0, -1.0]), ">= 0"),
        (dict(costs=c, alpha=1.5), "alpha"),
        (dict(costs=c, num_samples=0), "num_samples"),
        (dict(costs=c, num_samples=2.5), "num_samples"),
        (dict(costs=c, replacement=False), "replacement"),
        (dict(costs=c, weights="mean"), "weights"),
        (dict(costs=c, rank=2, world_size=2), "rank"),
        (dict(costs=c, world_size=0), "world_size"),
        (dict(costs=c, seed=-1), "seed"),
        (dict(costs=c, momentum=1.0), "momentum"),
        (dict(costs=c, generator=0), "generator"),
        (dict(costs=c, chunk_size=0), "chunk_size"),
    ]
    for kw, match in cases:
        costs = kw.pop("costs")
        with pytest.raises(ValueError, match=match):
            CostAwareSampler(costs, **kw)
    s = CostAwareSampler(c)
    with pytest.raises(ValueError, match="indices"):
        s.weights_for([2])
    with pytest.raises(ValueError, match="indices"):
        s.update_proxies([5], [1.0])
    with pytest.raises(ValueError, match="mismatched"):
        s.update_proxies([0, 1], [1.0])
    with pytest.raises(ValueError, match="values must be finite"):
        s.update_proxies([0], [np.inf])
    with pytest.raises(ValueError, match="epoch"):
        s.set_epoch(-1)
