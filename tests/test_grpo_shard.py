"""shard_minibatches and row_factors directly: shapes, ownership, padding, and bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.grpo.factors import row_factors, step_normalisers
from costaware.grpo.plan import MiniBatch, SamplingConfig, plan_minibatches
from costaware.grpo.shard import shard_minibatches


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    steps=st.integers(1, 4),
    seed=st.integers(0, 1000),
    merge=st.booleans(),
)
def test_every_drawn_row_is_fed_once_by_its_owner_with_equal_shapes(sizes, steps, seed, merge):
    n = sum(sizes)
    gen = torch.Generator().manual_seed(seed)
    adv = torch.randn(n, generator=gen) * (torch.rand(n, generator=gen) < 0.6)
    adv[0] = 1.0
    costs = torch.randint(1, 50, (n,), generator=gen)
    plan = plan_minibatches(
        adv,
        costs,
        num_minibatches=steps,
        minibatch_size=max(1, n // steps),
        config=SamplingConfig(merge_duplicates=merge),
        generator=gen,
    )
    pads = [seed % k for k in sizes]
    out = shard_minibatches(plan.minibatches, sizes, steps, pads)
    offsets = torch.tensor([0, *sizes]).cumsum(0)
    assert len(out) == len(sizes) and all(len(r) == steps for r in out)
    for j in range(steps):
        assert len({r[j].rows.numel() for r in out}) == 1  # equal shapes on every rank
        real = torch.cat([r[j].global_rows[~r[j].padding] for r in out])
        weights = torch.cat([r[j].weights[~r[j].padding] for r in out])
        if j < len(plan.minibatches):
            mb = plan.minibatches[j]
            assert sorted(real.tolist()) == sorted(mb.indices.tolist())
            assert float(weights.sum()) == pytest.approx(float(mb.weights.double().sum()))
        for r, steps_r in enumerate(out):
            s = steps_r[j]
            assert bool((s.weights[s.padding] == 0).all()) and bool((s.counts[s.padding] == 0).all())
            own = s.global_rows[~s.padding]
            assert bool(((own >= offsets[r]) & (own < offsets[r + 1])).all())  # fed by the owner
            assert bool((s.rows[s.padding] == pads[r]).all())
            assert bool((s.rows[~s.padding] == own - offsets[r]).all())


def test_padding_is_exact_for_row_mean_and_token_mean():
    """The rank's mean over s padded rows with f = w·P·s/M equals Σ w ℓ / M over its real rows."""
    w = torch.tensor([2.0, 1.0, 0.0, 0.0])  # two padding rows
    lengths = torch.tensor([4.0, 6.0, 3.0, 3.0])
    loss = torch.tensor([0.5, -1.0, 7.0, 7.0])  # padding rows have a finite, nonzero loss
    f = row_factors("row_mean", w, lengths, num_ranks=2, draws=6, tokens=20.0)
    assert float((f * loss).sum() / 4 / 2) == pytest.approx(float((w * loss).sum() / 6))
    f = row_factors("token_mean", w, lengths, num_ranks=2, draws=6, tokens=20.0)
    assert float((f * loss).sum() / lengths.sum() / 2) == pytest.approx(float((w * loss).sum() / 20.0))
    assert torch.equal(row_factors("global_tokens", w, lengths, num_ranks=2, draws=6, tokens=20.0), w.double())


def test_step_normalisers_draws_and_pool():
    mb = MiniBatch(
        indices=torch.tensor([0, 2]),
        weights=torch.tensor([1.0, 1.0]),
        counts=torch.tensor([2, 1]),
        num_draws=3,
        tokens=9,
    )
    lengths = torch.tensor([2.0, 5.0, 3.0, 6.0])
    (d,) = step_normalisers([mb], lengths, normaliser="draws", pool_rows=4, num_steps=1)
    assert (d.draws, d.tokens) == (3.0, 2 * 2.0 + 3.0)
    p1, p2 = step_normalisers([mb], lengths, normaliser="pool", pool_rows=4, num_steps=2)
    assert (p1.draws, p1.tokens) == (3.0, 16.0 * 3 / 4) and (p2.draws, p2.tokens) == (0.0, 0.0)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: shard_minibatches([], [2, 0], 1), "rank_sizes"),
        (lambda: shard_minibatches([], [2], 0), "num_steps"),
        (lambda: shard_minibatches([], [2, 3], 1, pad_rows=[0, 3]), "pad_rows"),
        (lambda: row_factors("rows", torch.ones(2), torch.ones(2), num_ranks=1, draws=2, tokens=2), "family"),
        (lambda: row_factors("row_mean", torch.ones(2), torch.ones(2), num_ranks=0, draws=2, tokens=2), "num_ranks"),
        (lambda: step_normalisers([], torch.ones(3), normaliser="x", pool_rows=3, num_steps=1), "normaliser"),
        (lambda: step_normalisers([], torch.ones(3), normaliser="pool", pool_rows=4, num_steps=1), "lengths"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(4, 40), steps=st.integers(1, 4), multiple=st.integers(1, 4), seed=st.integers(0, 1000))
def test_equal_steps_pad_every_step_to_one_size_a_multiple_of_row_multiple(n, steps, multiple, seed):
    """The layout verl's workers need: one rank holding the pool, every step S rows with S % multiple == 0,
    the plan's rows first (in order) and zero-weight padding after; plan_round counts that padding."""
    from costaware.grpo.step import GlobalPool, plan_round

    gen = torch.Generator().manual_seed(seed)
    adv = torch.randn(n, generator=gen) * (torch.rand(n, generator=gen) < 0.5)
    adv[0] = 1.0
    costs = torch.randint(1, 50, (n,), generator=gen)
    config = SamplingConfig("nonzero")
    plan = plan_minibatches(adv, costs, num_minibatches=steps, config=config, generator=gen)
    out = shard_minibatches(plan.minibatches, [n], steps, [1], equal_steps=True, row_multiple=multiple)[0]
    sizes = {s.rows.numel() for s in out}
    assert len(sizes) == 1
    size = sizes.pop()
    assert (
        size % multiple == 0
        and size == -(-max(max(mb.indices.numel() for mb in plan.minibatches), 1) // multiple) * multiple
    )
    for s, mb in zip(out, plan.minibatches, strict=False):
        k = mb.indices.numel()
        assert (
            torch.equal(s.rows[:k], mb.indices)
            and bool((s.rows[k:] == 1).all())
            and float(s.weights[k:].abs().sum()) == 0
        )
    pool = GlobalPool(adv, costs, costs.double())
    rnd = plan_round(pool, config, seed=seed, step=0, family="row_mean", num_steps=steps, equal_steps=True,
                     row_multiple=multiple)  # fmt: skip
    fed = sum(mb.indices.numel() for mb in rnd.plan.minibatches)
    assert rnd.counts.rows_padding == steps * rnd.steps[0][0].shard.rows.numel() - fed
