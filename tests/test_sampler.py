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
    with pytest.raises(ValueError, match="not the next draws"):
        s.weights_for([1])  # never drawn (p = 0): no weight to give


def test_update_mid_chunk_takes_effect_at_the_next_draw():
    s = CostAwareSampler(np.ones(2), num_samples=200, chunk_size=100, seed=0, yield_weights=True)
    it = iter(s)
    first = [next(it) for _ in range(37)]  # inside the first chunk
    s.update_proxies([0], [0.0])
    rest = list(it)
    assert len(first) + len(rest) == 200 == s.drawn  # redrawn draws replace, they do not add
    assert {i for i, _ in first} == {0, 1}
    assert {i for i, _ in rest} == {1} and all(w == 1.0 for _, w in rest)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mass_moved_mid_epoch_dominates_the_next_batches(num_workers):
    """The issue's experiment: an epoch shorter than chunk_size (default 4096); after the first batch
    all the mass moves to examples 0-9. Only batches the loader fetched before the update (none with
    num_workers=0; prefetch_factor x num_workers = 4 here) may still hold other examples."""
    n, batch = 1920, 64
    s = CostAwareSampler(np.ones(n), num_samples=n, seed=0)
    assert s.chunk_size == 4096 > n
    loader = DataLoader(TensorDataset(torch.arange(n)), batch_size=batch, sampler=s, num_workers=num_workers)
    moved, batches = np.zeros(n), []
    moved[:10] = 1.0
    for b, (xb,) in enumerate(loader):
        if b == 0:
            s.update_proxies(np.arange(n), moved)
        else:
            batches.append(xb.numpy())
    ahead = 0 if num_workers == 0 else 2 * num_workers
    later = np.concatenate(batches[ahead:])
    assert later.size == n - batch * (1 + ahead) and (later < 10).all()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_feeds_each_draw_with_its_own_weight(num_workers):
    n = 30
    x = torch.arange(n, dtype=torch.float32)
    c, G = _problem(n=n, seed=5)
    s = CostAwareSampler(c, G, alpha=0.1, num_samples=64, seed=0, yield_weights=True)
    loader = DataLoader(WeightedIndexDataset(TensorDataset(x)), batch_size=16, sampler=s, num_workers=num_workers)
    seen_idx, seen_w = [], []
    for (xb,), idx, w in loader:
        assert xb.shape == idx.shape == w.shape == (16,) and w.dtype == torch.float32
        torch.testing.assert_close(xb, idx.float())  # the sample is the one the index names
        seen_idx.append(idx)
        seen_w.append(w)
    idx, w = torch.cat(seen_idx), torch.cat(seen_w)
    torch.testing.assert_close(w, s.weights_for(idx))  # the draws' own weights, claimed once
    assert idx.tolist() == [i for i, _ in s]  # a new iter() of the same epoch: the same stream
    # plain integer sampler also works as a drop-in
    plain = CostAwareSampler(c, G, num_samples=20, seed=0)
    batches = list(DataLoader(TensorDataset(x), batch_size=5, sampler=plain))
    assert torch.cat([b[0] for b in batches]).long().tolist() == list(plain)
    # a plain key into the wrapper gets weight 1
    assert WeightedIndexDataset(TensorDataset(x))[3][2].item() == 1.0


def test_bad_sampler_arguments_raise_naming_the_argument():
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


# -- online updates: weights belong to the draw -------------------------------------------------


def _online_run(lookahead, steps=4000, batch=4, seed=0):
    """Weighted estimates of mean(x) while every batch's proxies are updated from x.

    The loader is ``lookahead`` batches ahead of training (as a DataLoader with workers is), and each
    batch's proxies are updated before its weights are asked for, so the p at weights_for time is not
    the p the batch was drawn from. Returns the per-batch estimates and the yielded == claimed check."""
    rng = np.random.default_rng(seed)
    n = 10
    c, x = rng.uniform(1, 20, n), rng.uniform(1, 3, n)
    s = CostAwareSampler(c, alpha=0.2, weights="raw", num_samples=steps * batch, seed=seed, yield_weights=True)
    it = iter(s)
    queue = [[next(it) for _ in range(batch)] for _ in range(1 + lookahead)]
    est = []
    for _ in range(steps - 1 - lookahead):
        pairs = queue.pop(0)
        idx = np.array([i for i, _ in pairs])
        g = x**2 * rng.uniform(0.5, 1.5, n)  # like a loss: low right after training on an example
        g[idx] = 0.05
        s.update_proxies(np.arange(n), g)
        w = s.weights_for(idx, dtype=torch.float64).numpy()
        assert np.array_equal(w, [w_ for _, w_ in pairs])  # the same weight as the one yielded
        est.append(np.mean(w * x[idx]))
        queue.append([next(it) for _ in range(batch)])
    return np.array(est), x.mean()


@pytest.mark.parametrize("lookahead", [0, 2])
def test_weighted_mean_is_unbiased_with_online_updates(lookahead):
    """Monte-Carlo: with p changing after every batch, Σ w_i x_i / B over the batches, w from the p
    of the draw, averages to mean(x). Weights from the p at weights_for time (after the update, which
    lowers G of the examples just drawn) overshoot by +411% here, about 350 s.e.: that fails."""
    est, target = _online_run(lookahead)
    se = est.std() / np.sqrt(est.size)
    assert abs(est.mean() - target) < 4 * se, (est.mean(), target, se)
    assert se < 0.02 * target  # precise enough to see a 10% bias


def test_weights_for_refuses_what_it_cannot_tie_to_a_draw():
    s = CostAwareSampler(np.ones(5), num_samples=12, seed=1)
    it = iter(s)
    a, b, c = ([next(it) for _ in range(4)] for _ in range(3))
    assert (a, b, c) == ([2, 2, 3, 4], [0, 0, 4, 4], [1, 1, 4, 2])
    assert s.weights_for([]).shape == (0,)
    for wrong in (b, [4, 3, 2, 2], [*a, *b, *c, 0], [1, 1, 1, 1]):  # skipped, reordered, too many, foreign
        with pytest.raises(ValueError, match="not the next draws"):
            s.weights_for(wrong)
    assert s.weights_for(a).shape == (4,)
    with pytest.raises(ValueError, match="not the next draws"):
        s.weights_for(a)  # the same batch twice
    assert s.weights_for([*b, *c[:2]]).shape == (6,) and s.weights_for(c[2:]).shape == (2,)  # any split
    with pytest.raises(ValueError, match="none is unclaimed"):
        s.weights_for(c[2:])
    assert list(s) == [*a, *b, *c]  # a new iter() starts a new record
    with pytest.raises(ValueError, match="not the next draws"):
        s.weights_for(b)


def test_a_stale_iterator_raises_instead_of_drawing_silently():
    s = CostAwareSampler(np.ones(3), num_samples=10)
    old = iter(s)
    next(old)
    new = iter(s)
    next(new)
    with pytest.raises(RuntimeError, match="newer iteration"):
        next(old)
    assert len(list(new)) == 9


def test_cost_counter_counts_what_was_yielded():
    c = np.array([1.0, 2.0, 5.0, 10.0])
    s = CostAwareSampler(c, num_samples=50, chunk_size=16, seed=3)
    seen = list(s)
    s.set_epoch(1)
    it = iter(s)
    seen += [next(it) for _ in range(7)]
    s.update_proxies([0], [4.0])  # discards the rest of the chunk: those draws are not counted
    seen += list(it)
    assert s.drawn == len(seen) == 100
    assert s.drawn_cost == pytest.approx(c[seen].sum(), rel=1e-12)


# -- state ------------------------------------------------------------------------------------------


def _script(s, stop=None):
    """Draw an epoch with updates on the way; stop after ``stop`` draws (None: to the end)."""
    out, it = [], iter(s)
    for k, pair in enumerate(it):
        out.append(pair)
        if k % 13 == 5:
            s.update_proxies([pair[0]], [0.1 + k % 3])
        if stop is not None and k + 1 == stop:
            break
    return out, it


def test_state_resumes_mid_epoch_exactly():
    c, G = _problem()
    mk = lambda: CostAwareSampler(c, G, alpha=0.1, num_samples=300, chunk_size=32, seed=3, yield_weights=True)  # noqa: E731
    whole = mk()
    whole.set_epoch(2)
    ref, _ = _script(whole)
    a = mk()
    a.set_epoch(2)
    head, it = _script(a, stop=100)
    a.weights_for([i for i, _ in head[:60]])  # 40 yielded draws stay unclaimed
    state = a.state_dict()
    rest_a = [pair for pair in it]  # the original goes on
    b = mk()
    b.load_state_dict(state)
    b.set_epoch(2)  # the usual loop calls it again: the restored pass is kept
    np.testing.assert_array_equal(
        b.weights_for([i for i, _ in head[60:]], torch.float64).numpy(), [w for _, w in head[60:]]
    )
    rest_b = [pair for pair in iter(b)]
    assert rest_b == rest_a and head + rest_b != ref  # (without the later updates the streams differ)
    assert (b.drawn, b.drawn_cost) == (a.drawn, a.drawn_cost) == (300, b.drawn_cost)
    b.set_epoch(3)
    a.set_epoch(3)
    assert list(a) == list(b)


def test_state_at_an_epoch_start_and_old_states():
    c, G = _problem()
    s = CostAwareSampler(c, G, num_samples=50, seed=3)
    s.update_proxies([0, 1], [5.0, 6.0])
    s.set_epoch(2)
    t = CostAwareSampler(c, num_samples=50)
    t.load_state_dict(s.state_dict())
    assert list(t) == list(s)
    old = {"proxies": s.proxies, "epoch": 2, "seed": 3}  # a state saved before the counters existed
    u = CostAwareSampler(c, num_samples=50)
    u.load_state_dict(old)
    assert list(u) == list(s) and u.drawn == 50
    v = CostAwareSampler(c, num_samples=50)
    v.load_state_dict(s.state_dict())
    v.set_epoch(4)
    assert list(v) != list(s)


@pytest.mark.parametrize("key", ["proxies", "epoch", "seed"])
def test_load_state_dict_names_a_missing_key(key):
    s = CostAwareSampler([1.0, 2.0])
    state = s.state_dict()
    del state[key]
    with pytest.raises(ValueError, match=f"missing the key '{key}'"):
        s.load_state_dict(state)
    bad = s.state_dict()
    bad["epoch"] = -1
    with pytest.raises(ValueError, match="epoch"):
        s.load_state_dict(bad)
    with pytest.raises(TypeError, match="state must be a dict"):
        s.load_state_dict([1])


def test_sampler_docstring_examples_run():
    import doctest

    from costaware import sampler

    res = doctest.testmod(sampler, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted >= 8
