"""One global plan, fed by several ranks: each drawn row on the rank that holds it, equal shapes.

On P data-parallel ranks each rank holds its own rows of the generation batch. The plan is drawn
once on the *global* pool (every rank's rows concatenated in rank order, the order of
``accelerator.gather``), from a seed every rank shares, so every rank computes the same plan and the
same n_supp (a per-rank plan with a local n_supp up-weights ranks with few informative rows, which
biases the expected gradient across ranks). :func:`shard_minibatches` then gives every rank, for every
optimiser step, the rows of that step's mini-batch it holds, padded with zero-factor rows to the
largest rank's count, so that every rank runs the same number of rows in every micro-step and the
collectives in the loss (``accelerator.gather`` of per-row values, DDP's all-reduce) meet equal
shapes. A step the plan does not fill (fewer mini-batches than steps, or a skipped pool) is one
padding row on every rank.

Why padding is exact: a padding row is a real row of the rank's pool (finite loss) fed with loss
factor 0, so it adds 0·∇ℓ = 0 to the gradient. The only place it can act is a normaliser that
counts the micro-batch: a row-mean loss divides by the rows fed (padding included) and a token-mean
loss by the tokens fed (padding included). :func:`costaware.grpo.factors.row_factors` therefore takes
the padded row count and the padded token count, so the weighted sum is the same with or without
padding (``tests/test_grpo_shard.py`` checks this against the unsharded plan).

>>> import torch
>>> from costaware.grpo.plan import MiniBatch
>>> mb = MiniBatch(indices=torch.tensor([0, 1, 5]), weights=torch.tensor([1.0, 2.0, 1.0]),
...                counts=torch.tensor([1, 2, 1]), num_draws=4, tokens=30)
>>> steps = shard_minibatches((mb,), rank_sizes=[4, 4], num_steps=2)
>>> [s.rows.tolist() for s in steps[0]], [s.rows.tolist() for s in steps[1]]
([[0, 1], [0]], [[1, 0], [0]])
>>> steps[1][0].weights.tolist(), steps[1][0].padding.tolist()
([1.0, 0.0], [False, True])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from costaware._checks import boolean, check_container, integer
from costaware.grpo.config import MAX_STEPS
from costaware.grpo.plan import MiniBatch

_MAX_ROWS = 2**53  # a rank's rows; cumulative sums of larger counts would leave int64

__all__ = ["ShardStep", "shard_minibatches", "rank_offsets"]


@dataclass(frozen=True)
class ShardStep:
    """One rank's rows for one optimiser step.

    Attributes:
        rows: (s,) row indices into this rank's *local* pool; padding rows point at the rank's
            padding row (``pad_rows[r]``, local row 0 by default).
        global_rows: (s,) the same rows as global pool indices (−1 for padding).
        weights: (s,) importance weight × draw count per row; 0 for padding.
        counts: (s,) draws each row stands for; 0 for padding.
        padding: (s,) True for the zero-factor rows that only equalise shapes.
        draws: draws the whole (global) mini-batch stands for (0 for a step the plan leaves empty).
        step: the optimiser step (mini-batch) index.
    """

    rows: torch.Tensor
    global_rows: torch.Tensor
    weights: torch.Tensor
    counts: torch.Tensor
    padding: torch.Tensor
    draws: int
    step: int


def rank_offsets(rank_sizes: Sequence[int]) -> np.ndarray:
    """Global index of each rank's first row: ``[0, n_0, n_0 + n_1, …]`` (P + 1 entries)."""
    check_container(rank_sizes, "rank_sizes", "a list of row counts", needs="__iter__")
    sizes = [integer(s, "rank_sizes", minimum=1, maximum=_MAX_ROWS) for s in rank_sizes]
    if not sizes:
        raise ValueError(f"rank_sizes must be a non-empty list of positive row counts, got {rank_sizes!r}")
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])


def shard_minibatches(
    minibatches: Sequence[MiniBatch],
    rank_sizes: Sequence[int],
    num_steps: int,
    pad_rows: Sequence[int] | None = None,
    *,
    equal_steps: bool = False,
    row_multiple: int = 1,
) -> list[tuple[ShardStep, ...]]:
    """Split the global plan's mini-batches over ranks: ``out[r][j]`` is rank r's part of step j.

    Every rank gets exactly ``num_steps`` steps (at most :data:`~costaware.grpo.config.MAX_STEPS`) and, in
    step j, the same number of rows s_j = max(1, max_r rows of mini-batch j held by rank r). Rows keep the
    plan's order within a rank.
    ``pad_rows[r]`` is the local row rank r feeds as padding (any row is exact; the engines pass
    the rank's cheapest row, so that padding costs the least compute).

    For an engine that cuts one batch into mini-batches of one size (verl's workers): ``equal_steps``
    pads every step to the largest s_j, and ``row_multiple`` rounds s_j up to a multiple of it (the
    engine's data-parallel ranks, when one core rank holds the whole batch and the engine deals it).
    """
    offsets = rank_offsets(rank_sizes)
    num_ranks = offsets.size - 1
    if pad_rows is None:
        pads = [0] * num_ranks
    else:
        check_container(pad_rows, "pad_rows", "a list of local rows, one per rank", needs="__iter__")
        pads = [integer(x, "pad_rows", minimum=0) for x in pad_rows]
    if len(pads) != num_ranks or any(not 0 <= x < int(offsets[r + 1] - offsets[r]) for r, x in enumerate(pads)):
        raise ValueError(f"pad_rows must hold one local row per rank (sizes {list(rank_sizes)}), got {pad_rows!r}")
    num_steps = integer(num_steps, "num_steps", minimum=1, maximum=MAX_STEPS)
    equal_steps = boolean(equal_steps, "equal_steps")
    row_multiple = integer(row_multiple, "row_multiple", minimum=1, maximum=_MAX_ROWS)
    check_container(minibatches, "minibatches", "a sequence of MiniBatch", needs="__len__")
    if len(minibatches) > num_steps:
        raise ValueError(f"the plan has {len(minibatches)} mini-batches, more than num_steps={num_steps}")
    total = int(offsets[-1])
    split = [_split_step(minibatches[j] if j < len(minibatches) else None, j, offsets, total) for j in range(num_steps)]
    sizes = [max(1, int(per_rank.max())) for _, _, per_rank, _, _, _ in split]
    if equal_steps:
        sizes = [max(sizes)] * num_steps
    sizes = [-(-s // row_multiple) * row_multiple for s in sizes]
    out: list[list[ShardStep]] = [[] for _ in range(num_ranks)]
    for j, ((idx, _, per_rank, w, c, draws), s) in enumerate(zip(split, sizes, strict=True)):
        for r, (g_rows, g_w, g_c) in enumerate(
            zip(idx.split(per_rank.tolist()), w.split(per_rank.tolist()), c.split(per_rank.tolist()), strict=True)
        ):
            pad = s - g_rows.numel()
            out[r].append(
                ShardStep(
                    rows=torch.cat([g_rows - int(offsets[r]), torch.full((pad,), pads[r], dtype=torch.int64)]),
                    global_rows=torch.cat([g_rows, torch.full((pad,), -1, dtype=torch.int64)]),
                    weights=torch.cat([g_w, torch.zeros(pad, dtype=torch.float64)]),
                    counts=torch.cat([g_c, torch.zeros(pad, dtype=torch.int64)]),
                    padding=torch.cat(
                        [torch.zeros(g_rows.numel(), dtype=torch.bool), torch.ones(pad, dtype=torch.bool)]
                    ),
                    draws=draws,
                    step=j,
                )
            )
    return [tuple(steps) for steps in out]


def _split_step(
    mb: MiniBatch | None, j: int, offsets: np.ndarray, total: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Step j's rows grouped by the rank that holds them: (rows, owner, rows per rank, weights, counts,
    draws); an empty step (past the plan) holds none."""
    num_ranks = offsets.size - 1
    if mb is None:
        empty = torch.zeros(0, dtype=torch.int64)
        return empty, empty, torch.zeros(num_ranks, dtype=torch.int64), torch.zeros(0, dtype=torch.float64), empty, 0
    idx = mb.indices.to(torch.int64)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= total):
        raise ValueError(f"minibatches[{j}] holds rows outside the pool of {total} rows (the sum of rank_sizes)")
    owner = torch.from_numpy(np.searchsorted(offsets, idx.numpy(), side="right") - 1)
    order = torch.argsort(owner, stable=True)  # group by rank, plan order within a rank
    per_rank = torch.bincount(owner, minlength=num_ranks)
    w, c = mb.weights[order].to(torch.float64), mb.counts[order].to(torch.int64)
    return idx[order], owner[order], per_rank, w, c, int(mb.num_draws)
