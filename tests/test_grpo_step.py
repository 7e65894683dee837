"""The core's one entry point for a round (grpo/step.py): plan, shards, factors and counts.

The references below are the adapters' code before the round moved into the core (TRL's
``_weighted_minibatches`` and ``_split`` accounting, verl's ``loss_factors``), copied verbatim onto the
core's public functions: the round must give what they gave, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from costaware.grpo.accounting import StepCounts
from costaware.grpo.config import SamplingConfig, plan_seed
from costaware.grpo.factors import global_tokens, row_factors, step_normalisers
from costaware.grpo.plan import plan_minibatches
from costaware.grpo.shard import rank_offsets, shard_minibatches
from costaware.grpo.step import GlobalPool, plan_round

FAMILIES = ("row_mean", "token_mean", "global_tokens")
CONFIGS = {
    "p_star": SamplingConfig("p_star"),
    "p_smooth tokens": SamplingConfig("p_smooth", alpha=0.1, budget="tokens"),
    "p_star raw unmerged": SamplingConfig("p_star", weights="raw", merge_duplicates=False),
    "nonzero": SamplingConfig("nonzero"),
    "pods": SamplingConfig("pods"),
    "cost_pods": SamplingConfig("cost_pods"),
    "none": SamplingConfig("none"),
}


def two_rank_pool(seed: int, sizes=(12, 8), group=4) -> GlobalPool:
    """Two ranks holding unequal row counts, rows of unequal costs and completion lengths."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    rewards = torch.randint(0, 3, (n,), generator=g).double() / 2
    r = rewards.reshape(-1, group)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).reshape(-1).float()
    lengths = torch.randint(1, 60, (n,), generator=g).double()
    costs = lengths.long() + torch.randint(3, 20, (n,), generator=g)
    return GlobalPool(adv, costs, lengths, rewards, tuple(sizes))


def old_trl_round(pool, config, *, seed, step, family, num_steps, minibatch_size, normaliser, iters, group):
    """TRL's adapter before the move: plan, shard, per-step factors and advantages, accounting."""
    procs = len(pool.rank_sizes)
    plan = plan_minibatches(
        pool.advantages, pool.costs, num_minibatches=num_steps, minibatch_size=minibatch_size, config=config,
        rewards=pool.rewards if config.method in ("pods", "cost_pods") else None, group_size=group,
        generator=torch.Generator().manual_seed(plan_seed(seed, step)),
    )  # fmt: skip
    offsets = rank_offsets(pool.rank_sizes)
    pad_rows = [int(torch.argmin(pool.costs[offsets[r] : offsets[r + 1]])) for r in range(procs)]
    steps = shard_minibatches(plan.minibatches, pool.rank_sizes, num_steps, pad_rows)
    norms = step_normalisers(
        plan.minibatches, pool.lengths, normaliser=normaliser, pool_rows=pool.advantages.numel(),
        num_steps=num_steps, subset=plan.method in ("nonzero", "pods", "cost_pods"),
    )  # fmt: skip
    out = []
    for r in range(procs):
        lengths = pool.lengths[offsets[r] : offsets[r + 1]]
        per_rank = []
        for s, norm in zip(steps[r], norms, strict=True):
            factor = row_factors(
                family, s.weights, lengths[s.rows], num_ranks=procs, draws=norm.draws, tokens=norm.tokens
            )
            adv = torch.where(s.padding, 0.0, plan.advantages[s.global_rows.clamp(min=0)].double())
            per_rank.append((s.rows, factor, adv))
        out.append(per_rank)
    num_pad = pad_tokens = 0
    if procs > 1 or plan.minibatches:
        for r, per_rank in enumerate(steps):
            k = sum(int(s.padding.sum()) for s in per_rank if procs > 1 or not bool(s.padding.all()))
            num_pad += k
            pad_tokens += k * int(pool.costs[int(offsets[r]) + pad_rows[r]])
    counts = StepCounts(
        tokens=plan.tokens * iters, tokens_plain=plan.tokens_plain * iters,
        tokens_nonzero=plan.tokens_nonzero * iters, rows_drawn=plan.rows_drawn * iters,
        rows_fed=plan.rows_fed * iters, rows_unique=plan.rows_unique, rows_padding=num_pad * iters,
        tokens_padding=pad_tokens * iters, skipped=float(plan.skipped is not None),
    )  # fmt: skip
    return out, counts, global_tokens(norms)


def old_verl_factors(minibatches, lengths, family):
    """verl's ``resample.loss_factors`` before the move."""
    lengths = lengths.to(torch.float64)
    norms = step_normalisers(
        minibatches, lengths, normaliser="pool", pool_rows=int(lengths.numel()), num_steps=len(minibatches)
    )
    return torch.stack([
        row_factors(family, mb.weights, lengths[mb.indices], num_ranks=1, draws=nm.draws, tokens=nm.tokens)
        for mb, nm in zip(minibatches, norms, strict=True)
    ]).to(torch.float32)  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("normaliser", ["draws", "pool"])
def test_two_unequal_ranks_get_the_old_trl_adapters_factors_and_counts(family, name, normaliser):
    config = CONFIGS[name]
    for seed in range(3):
        pool = two_rank_pool(seed)
        kw = dict(seed=seed, step=seed + 5, family=family, num_steps=2, minibatch_size=10, normaliser=normaliser)
        rnd = plan_round(pool, config, **kw, epochs=2, group_size=4)
        old, counts, tokens = old_trl_round(pool, config, **kw, iters=2, group=4)
        assert rnd.counts == counts and rnd.global_tokens == tokens and rnd.seed == plan_seed(seed, seed + 5)
        assert len(rnd.steps) == 2 and all(len(per_rank) == 2 for per_rank in rnd.steps)
        for r in range(2):
            for step, (rows, factor, adv) in zip(rnd.steps[r], old[r], strict=True):
                assert torch.equal(step.shard.rows, rows)
                assert torch.equal(step.factors, factor) and step.factors.dtype == torch.float64
                assert torch.equal(step.advantages, adv)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["p_star", "p_star raw unmerged", "none"])
def test_one_rank_gets_the_old_verl_factors(family, name):
    config = SamplingConfig(CONFIGS[name].method, weights=CONFIGS[name].weights, merge_duplicates=False)
    pool = two_rank_pool(7)
    pool = GlobalPool(pool.advantages, pool.costs, pool.lengths)  # one rank holding every row
    rnd = plan_round(pool, config, seed=1, step=2, family=family, num_steps=4, normaliser="pool")
    old = old_verl_factors(rnd.plan.minibatches, pool.lengths, family)
    assert torch.equal(torch.stack([s.factors for s in rnd.steps[0]]).to(torch.float32), old)
    assert rnd.counts.rows_padding == 0 and rnd.counts.rows_fed == rnd.counts.rows_drawn == 20


def test_a_skipped_pool_feeds_padding_only_and_counts_it_on_several_ranks():
    pool = two_rank_pool(0)
    zero = GlobalPool(torch.zeros_like(pool.advantages), pool.costs, pool.lengths, pool.rewards, pool.rank_sizes)
    rnd = plan_round(zero, SamplingConfig("p_star"), seed=0, step=0, family="row_mean", num_steps=3)
    assert rnd.plan.skipped and rnd.counts.skipped == 1.0 and rnd.counts.tokens == 0.0
    assert rnd.counts.rows_padding == 2 * 3  # one padding row per rank and step, so collectives meet
    assert all(bool(s.shard.padding.all()) and float(s.factors.abs().sum()) == 0.0 for per in rnd.steps for s in per)
    one = GlobalPool(zero.advantages, zero.costs, zero.lengths)
    assert (
        plan_round(one, SamplingConfig("p_star"), seed=0, step=0, family="row_mean", num_steps=3).counts.rows_padding
        == 0
    )


@pytest.mark.parametrize(("method", "merge"), [("p_smooth", False), ("p_smooth", True), ("nonzero", True)])
def test_trl_and_verl_get_identical_plans_for_the_same_pool_and_seed(method, merge):
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    from costaware.integrations.trl import CostAwareGRPOConfig
    from costaware.integrations.trl.losses import TRL_LOSS_FAMILY
    from costaware.integrations.verl import CostAwareConfig, plan_resampling

    pool = two_rank_pool(3, sizes=(16, 16))
    trl = CostAwareGRPOConfig(output_dir="unused", cost_aware_method=method, cost_aware_alpha=0.05,
                              cost_aware_merge_duplicates=merge, loss_type="grpo",
                              use_cpu=True).sampling_config()  # fmt: skip
    verl = CostAwareConfig(method=method, alpha=0.05, balance_dp=False, merge_duplicates=merge)
    assert trl == verl.sampling_config("seq-mean-token-mean")  # the same core config from both edges
    rnd = plan_round(pool, trl, seed=4, step=9, family=TRL_LOSS_FAMILY["grpo"], num_steps=4, minibatch_size=8)
    res = plan_resampling(pool.advantages, pool.costs, verl, minibatch_size=8, dp_size=2, seed=4, step=9,
                          lengths=pool.lengths, loss_agg_mode="seq-mean-token-mean")  # fmt: skip
    size = res.minibatch_size  # every verl step padded to the largest step's rows, a multiple of dp
    assert size == -(-max(mb.indices.numel() for mb in rnd.plan.minibatches) // 2) * 2
    assert size <= 8 and (merge or size == 8)
    # rank-major layout (dp, k, S/dp) back to steps (k, S); the fed rows (weight > 0) are TRL's, in order
    index, weight = (t.view(2, 4, size // 2).transpose(0, 1).reshape(4, size) for t in (res.indices, res.weights))
    for j, mb in enumerate(rnd.plan.minibatches):
        assert torch.equal(index[j][weight[j] > 0], mb.indices)
    pad = float(res.indices.numel() - sum(mb.indices.numel() for mb in rnd.plan.minibatches))
    assert res.counts.rows_padding == pad
    assert replace(res.counts, rows_padding=0.0, tokens_padding=0.0) == replace(
        rnd.counts, rows_padding=0.0, tokens_padding=0.0
    )


def test_bad_round_arguments_are_refused_naming_them():
    pool = two_rank_pool(0)
    with pytest.raises(ValueError, match="family must be one of .*'dapo'"):
        plan_round(pool, SamplingConfig(), seed=0, step=0, family="dapo", num_steps=2)
    with pytest.raises(ValueError, match="normaliser must be one of"):
        plan_round(pool, SamplingConfig(), seed=0, step=0, family="row_mean", num_steps=2, normaliser="x")
    with pytest.raises(ValueError, match=r"rank_sizes \[12, 9\] hold 21 rows, the pool has 20"):
        bad = GlobalPool(pool.advantages, pool.costs, pool.lengths, pool.rewards, (12, 9))
        plan_round(bad, SamplingConfig(), seed=0, step=0, family="row_mean", num_steps=2)
    with pytest.raises(ValueError, match=r"seed must be a non-negative integer, got -1"):
        plan_round(pool, SamplingConfig(), seed=-1, step=0, family="row_mean", num_steps=2)
    with pytest.raises(TypeError, match="pool must be a GlobalPool"):
        plan_round({}, SamplingConfig(), seed=0, step=0, family="row_mean", num_steps=2)
