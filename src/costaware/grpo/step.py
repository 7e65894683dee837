"""One round of Cost-Aware GRPO's policy optimisation, from the global pool to each rank's weighted rows.

Every engine runs the same four stages on each generation batch, so they live here, behind one call:

1. the plan (:func:`~costaware.grpo.plan.plan_minibatches`) on the *global* pool, from the one seed
   derivation (:func:`~costaware.grpo.config.plan_seed`), so every rank computes the same plan;
2. its shards (:func:`~costaware.grpo.shard.shard_minibatches`): each rank's rows of every step, padded
   with zero-factor copies of the rank's cheapest row to equal shapes;
3. the loss factor of every fed row (:mod:`costaware.grpo.factors`) for the engine's loss family;
4. the accounting (:class:`~costaware.grpo.accounting.StepCounts`).

An adapter translates: it gathers the pool, maps its loss name to a family, calls :func:`plan_round`, and
feeds each rank's rows with their factors. The pool is checked once here; the kernels below check nothing.

>>> import torch
>>> pool = GlobalPool(advantages=torch.tensor([1.0, -1.0, 0.0, 0.5, 0.0, -0.5]),
...                   costs=torch.tensor([10, 40, 25, 10, 30, 20]),
...                   lengths=torch.tensor([6.0, 30.0, 20.0, 4.0, 25.0, 12.0]), rank_sizes=(4, 2))
>>> rnd = plan_round(pool, SamplingConfig("p_star"), seed=0, step=3, family="row_mean", num_steps=2)
>>> rnd.seed == plan_seed(0, 3), len(rnd.steps), len(rnd.steps[0])      # 2 ranks, 2 steps each
(True, 2, 2)
>>> rnd.counts.rows_drawn, rnd.counts.tokens_plain
(6.0, 135.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from costaware._checks import integer, nonnegative_vector
from costaware.grpo.accounting import StepCounts
from costaware.grpo.config import MAX_STEPS, SamplingConfig, plan_seed
from costaware.grpo.factors import (
    FAMILIES,
    NORMALISERS,
    StepNormaliser,
    row_factors_kernel,
    step_normalisers_kernel,
)
from costaware.grpo.plan import Plan, plan_minibatches
from costaware.grpo.shard import ShardStep, rank_offsets, shard_minibatches

__all__ = ["GlobalPool", "RankStep", "Round", "plan_round"]


@dataclass(frozen=True)
class GlobalPool:
    """Every rank's rows of one generation batch, concatenated in rank order.

    advantages: (N,) A_i; costs: (N,) c_i > 0, prompt + completion tokens (what a fed row costs);
    lengths: (N,) completion tokens each row's loss counts (the token normalisers); rewards: (N,), read
    by methods that ``needs_groups`` (None otherwise); rank_sizes: rows held by each rank, in rank
    order (empty: one rank holds every row); grad_norms: (N,) every row's exact ‖∇ℓ_i‖, for
    ``proxy="oracle"`` alone (None otherwise).
    """

    advantages: torch.Tensor
    costs: torch.Tensor
    lengths: torch.Tensor
    rewards: torch.Tensor | None = None
    rank_sizes: tuple[int, ...] = ()
    grad_norms: torch.Tensor | None = None


@dataclass(frozen=True)
class RankStep:
    """One rank's part of one optimiser step: its rows (``shard``), with what the loss needs.

    factors: (s,) float64 loss factor of each fed row (0 on padding rows), for the round's family;
    advantages: (s,) float64 the plan's advantage of each fed row (0 on padding rows; PODS-style
    methods recompute them).
    """

    shard: ShardStep
    factors: torch.Tensor
    advantages: torch.Tensor


@dataclass(frozen=True)
class Round:
    """What one generation batch runs: the plan, every rank's steps, the accounting and the seed used.

    ``steps[r][j]`` is rank r's part of step j; ``normalisers[j]`` the step's (M_j, T_j); global_tokens the T the
    global-token family divides every step by (TRL's ``num_items_in_batch``); counts the pool's
    :class:`StepCounts` over every rank and epoch (``po_seconds`` left for the engine to add); seed the
    plan generator's seed (:func:`plan_seed`); pad_rows[r] the local row rank r pads with.
    """

    plan: Plan
    steps: tuple[tuple[RankStep, ...], ...]
    normalisers: tuple[StepNormaliser, ...]
    global_tokens: float
    counts: StepCounts
    seed: int
    pad_rows: tuple[int, ...]

    @property
    def meta(self) -> dict[str, Any]:
        """The plan's meta (the proxy, β and α it used, whether a draw cap was hit)."""
        return self.plan.meta

    @property
    def shards(self) -> list[tuple[ShardStep, ...]]:
        """``shards[r][j]``: the rows alone, as :func:`shard_minibatches` gives them."""
        return [tuple(s.shard for s in per_rank) for per_rank in self.steps]


def plan_round(
    pool: GlobalPool,
    config: SamplingConfig,
    *,
    seed: int,
    step: int,
    family: str,
    num_steps: int,
    minibatch_size: int | None = None,
    normaliser: str = "draws",
    epochs: int = 1,
    group_size: int | None = None,
    keep_zero_pool: bool = False,
    equal_steps: bool = False,
    row_multiple: int = 1,
) -> Round:
    """Plan, shard, weight and count one generation batch (see the module docstring).

    Args:
        pool: the global pool, every rank's rows in rank order.
        config: the sampling method (``config.rule``) and its options.
        seed: the run's seed; the plan is drawn from ``plan_seed(seed, step)``, so every rank, and a
            resumed run, gets the same plan.
        step: this generation batch's index.
        family: the engine loss's normaliser family, one of :data:`~costaware.grpo.factors.FAMILIES`.
        num_steps: the optimiser steps the baseline takes on this pool (its mini-batches).
        minibatch_size: draws per step (default: N // num_steps).
        normaliser: ``"draws"`` or ``"pool"`` (:func:`~costaware.grpo.factors.step_normalisers`).
        epochs: how many times the engine re-runs the plan (PPO epochs): the token counts scale with it.
        group_size: rows per group, for methods that ``needs_groups``.
        keep_zero_pool: the loss has a term with a gradient on every row (KL, entropy), so a full-support
            method draws an all-zero-advantage pool instead of skipping it.
        equal_steps: for an engine whose workers cut one batch into equal mini-batches (verl): every
            step padded to the largest step's rows (:func:`~costaware.grpo.shard.shard_minibatches`); every
            step is then fed, its padding counted.
        row_multiple: with ``equal_steps``, the padded step size is rounded up to a multiple of this
            (the data-parallel ranks).
    """
    if not isinstance(pool, GlobalPool):
        raise TypeError(f"pool must be a GlobalPool, got {type(pool).__name__}")
    if not isinstance(config, SamplingConfig):
        raise TypeError(f"config must be a SamplingConfig, got {type(config).__name__}")
    seed = integer(seed, "seed", minimum=0)
    step = integer(step, "step", minimum=0)
    if not (isinstance(family, str) and family in FAMILIES):
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if not (isinstance(normaliser, str) and normaliser in NORMALISERS):
        raise ValueError(f"normaliser must be one of {NORMALISERS}, got {normaliser!r}")
    epochs = integer(epochs, "epochs", minimum=1)
    num_steps = integer(num_steps, "num_steps", minimum=1, maximum=MAX_STEPS)
    used_seed = plan_seed(seed, step)
    plan = plan_minibatches(
        pool.advantages, pool.costs, num_minibatches=num_steps, minibatch_size=minibatch_size, config=config,
        rewards=pool.rewards, group_size=group_size, generator=torch.Generator().manual_seed(used_seed),
        keep_zero_pool=keep_zero_pool, grad_norms=pool.grad_norms,
    )  # fmt: skip
    n = plan.advantages.numel()
    lengths = torch.from_numpy(nonnegative_vector(pool.lengths, "lengths"))
    if lengths.numel() != n:
        raise ValueError(f"lengths has {lengths.numel()} rows but advantages has {n}")
    sizes = tuple(pool.rank_sizes) or (n,)
    offsets = rank_offsets(sizes)
    if int(offsets[-1]) != n:
        raise ValueError(f"rank_sizes {list(sizes)} hold {int(offsets[-1])} rows, the pool has {n}")
    costs = torch.as_tensor(pool.costs)
    # each rank pads with its cheapest row: exact whatever the row, and the least compute
    pad_rows = tuple(int(torch.argmin(costs[offsets[r] : offsets[r + 1]])) for r in range(len(sizes)))
    shards = shard_minibatches(
        plan.minibatches, sizes, num_steps, pad_rows, equal_steps=equal_steps, row_multiple=row_multiple
    )
    norms = step_normalisers_kernel(plan.minibatches, lengths, normaliser, n, num_steps, not config.rule.fixed_size)
    procs = len(sizes)
    steps = tuple(
        tuple(
            RankStep(
                shard=s,
                factors=row_factors_kernel(
                    family, s.weights, lengths[int(offsets[r]) + s.rows].numpy(), procs, norm.draws, norm.tokens
                ),  # fmt: skip
                advantages=torch.where(s.padding, 0.0, plan.advantages[s.global_rows.clamp(min=0)].double()),
            )
            for s, norm in zip(per_rank, norms, strict=True)
        )
        for r, per_rank in enumerate(shards)
    )
    return Round(
        plan=plan, steps=steps, normalisers=tuple(norms), global_tokens=float(sum(m.tokens for m in norms)),
        counts=_counts(plan, shards, costs, offsets, pad_rows, epochs, equal_steps), seed=used_seed,
        pad_rows=pad_rows,
    )  # fmt: skip


def _counts(
    plan: Plan,
    shards: list[tuple[ShardStep, ...]],
    costs: torch.Tensor,
    offsets: np.ndarray,
    pad_rows: tuple[int, ...],
    epochs: int,
    equal_steps: bool = False,
) -> StepCounts:
    """The pool's accounting over every rank, each forward/backward counted once per epoch.

    Padding rows are fed only so that every rank runs the same shapes; with one rank, a step the plan
    leaves empty is not fed at all (the engine skips its forward), so it counts no padding, unless
    ``equal_steps`` (the engine's workers run every step).
    """
    procs = len(shards)
    fed_all = procs > 1 or equal_steps
    num_pad = pad_tokens = 0
    if fed_all or plan.minibatches:
        for r, per_rank in enumerate(shards):
            k = sum(int(s.padding.sum()) for s in per_rank if fed_all or not bool(s.padding.all()))
            num_pad += k
            pad_tokens += k * int(costs[int(offsets[r]) + pad_rows[r]])
    return StepCounts(
        tokens=float(plan.tokens * epochs), tokens_plain=float(plan.tokens_plain * epochs),
        tokens_nonzero=float(plan.tokens_nonzero * epochs), rows_drawn=float(plan.rows_drawn * epochs),
        rows_fed=float(plan.rows_fed * epochs), rows_unique=float(plan.rows_unique),
        rows_padding=float(num_pad * epochs), tokens_padding=float(pad_tokens * epochs),
        skipped=float(plan.skipped is not None),
    )  # fmt: skip
