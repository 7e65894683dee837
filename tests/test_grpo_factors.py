"""costaware.grpo.factors against a brute force over tokens: the loss an engine computes from the factors
equals the plan's importance-weighted loss, for every loss family, both normalisers and several ranks.

The reference is written here from the definitions, not from the module: a plan is a list of draws per
optimiser step (row indices with repeats), every row has its own completion length and per-token
losses, and each rank feeds the merged rows it holds padded with zero-weight rows to the largest
rank's count. The engine side multiplies each fed row's per-token losses by its factor and reduces
them as the engine does (row mean over the fed rows, token mean over the fed tokens, or a token sum
over a normaliser shared by every rank); data parallelism averages the ranks. The target is

    row_mean:      (1/M_j) Σ_d w_d mean_t ℓ_{d,t}
    token_mean:    (1/T_j) Σ_d w_d Σ_t ℓ_{d,t}
    global_tokens: (1/T)   Σ_d w_d Σ_t ℓ_{d,t},   T = Σ_j T_j

with (M_j, T_j) counted by hand from the draws ("draws") or from the pool ("pool"). The negative
controls at the end run the same comparison on wrong variants of the formulas and require it to fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.grpo.factors import (
    FAMILIES,
    NORMALISERS,
    StepNormaliser,
    global_tokens,
    row_factors,
    step_normalisers,
)
from costaware.grpo.plan import MiniBatch


@dataclass(frozen=True)
class Case:
    lengths: np.ndarray  # (N,) completion tokens per pool row, unequal
    token_losses: np.ndarray  # (N, max_len) per-token loss; only the first lengths[i] count
    weights: np.ndarray  # (N,) importance weight of each pool row
    draws: tuple[tuple[int, ...], ...]  # the plan: rows drawn by each of its steps (repeats allowed)
    num_steps: int  # optimiser steps of the round; steps past the plan hold padding only
    rank_sizes: tuple[int, ...]  # rows each rank holds, contiguous in rank order
    subset: bool = False


def _row_mean_loss(case: Case, i: int) -> float:
    return float(case.token_losses[i, : case.lengths[i]].mean())


def _row_token_sum(case: Case, i: int) -> float:
    return float(case.token_losses[i, : case.lengths[i]].sum())


def _hand_normalisers(case: Case, normaliser: str) -> list[tuple[float, float]]:
    """(M_j, T_j) of every step, counted draw by draw."""
    n, pool_tokens = len(case.lengths), float(case.lengths.sum())
    out = []
    for j in range(case.num_steps):
        seq = case.draws[j] if j < len(case.draws) else ()
        if not seq:
            out.append((0.0, 0.0))
        elif normaliser == "draws":
            out.append((float(len(seq)), float(sum(case.lengths[d] for d in seq))))
        else:
            m = n / case.num_steps if case.subset else float(len(seq))
            out.append((m, pool_tokens * m / n))
    return out


def _target(case: Case, family: str, normaliser: str) -> list[float]:
    """The plan's weighted loss of every step, summed draw by draw over the rows' own tokens."""
    norms = _hand_normalisers(case, normaliser)
    total_tokens = sum(t for _, t in norms)
    out = []
    for j, (m, t) in enumerate(norms):
        seq = case.draws[j] if j < len(case.draws) else ()
        if family == "row_mean":
            out.append(sum(case.weights[d] * _row_mean_loss(case, d) for d in seq) / m if seq else 0.0)
        else:
            den = t if family == "token_mean" else total_tokens
            out.append(sum(case.weights[d] * _row_token_sum(case, d) for d in seq) / den if seq else 0.0)
    return out


def _minibatch(case: Case, seq: tuple[int, ...]) -> MiniBatch:
    rows, counts = np.unique(np.asarray(seq, dtype=np.int64), return_counts=True)
    return MiniBatch(
        indices=torch.from_numpy(rows),
        weights=torch.from_numpy(case.weights[rows] * counts),
        counts=torch.from_numpy(counts),
        num_draws=int(counts.sum()),
        tokens=0,
    )


def _engine(
    case: Case,
    family: str,
    normaliser: str,
    *,
    factors: Callable = row_factors,
    normalisers: Callable = step_normalisers,
) -> list[float]:
    """What P data-parallel ranks compute per step, with the factors folded into the per-token losses."""
    mbs = [_minibatch(case, seq) for seq in case.draws]
    lengths = torch.from_numpy(case.lengths.astype(np.float64))
    norms = normalisers(
        mbs, lengths, normaliser=normaliser, pool_rows=len(case.lengths), num_steps=case.num_steps, subset=case.subset
    )
    shared_tokens = global_tokens(norms)
    bounds = np.concatenate([[0], np.cumsum(case.rank_sizes)])
    num_ranks = len(case.rank_sizes)
    out = []
    for j, norm in enumerate(norms):
        rows = mbs[j].indices.numpy() if j < len(mbs) else np.empty(0, dtype=np.int64)
        w = mbs[j].weights.numpy() if j < len(mbs) else np.empty(0)
        owned = [(bounds[r] <= rows) & (rows < bounds[r + 1]) for r in range(num_ranks)]
        s = max(1, *(int(o.sum()) for o in owned))  # every rank feeds s rows: its own, then padding
        step_loss = 0.0
        for r in range(num_ranks):
            pad = s - int(owned[r].sum())
            fed = np.concatenate([rows[owned[r]], np.full(pad, bounds[r])])  # padding: the rank's first row
            fed_w = np.concatenate([w[owned[r]], np.zeros(pad)])
            fed_len = case.lengths[fed].astype(np.float64)
            f = factors(
                family,
                torch.from_numpy(fed_w),
                torch.from_numpy(fed_len),
                num_ranks=num_ranks,
                draws=norm.draws,
                tokens=norm.tokens,
            ).numpy()
            mask = np.arange(case.token_losses.shape[1])[None] < case.lengths[fed][:, None]
            per_token = f[:, None] * case.token_losses[fed] * mask
            if family == "row_mean":  # the rank's mean over its fed rows of each row's token mean
                loss = (per_token.sum(1) / mask.sum(1)).mean()
            elif family == "token_mean":  # over the rank's fed completion tokens (padding included)
                loss = per_token.sum() / max(mask.sum(), 1)
            else:  # a normaliser shared by every rank: T/P (TRL divides num_items_in_batch by P)
                loss = per_token.sum() / (shared_tokens / num_ranks)
            step_loss += loss / num_ranks  # data parallelism averages the ranks' gradients
        out.append(float(step_loss))
    return out


@st.composite
def cases(draw) -> Case:
    n = draw(st.integers(2, 8))
    lengths = np.asarray(draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), dtype=np.int64)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    num_ranks = draw(st.integers(1, min(3, n)))
    cuts = (
        sorted(draw(st.lists(st.integers(1, n - 1), min_size=num_ranks - 1, max_size=num_ranks - 1, unique=True)))
        if num_ranks > 1
        else []
    )
    rank_sizes = tuple(int(x) for x in np.diff([0, *cuts, n]))
    num_steps = draw(st.integers(1, 4))
    planned = draw(st.integers(1, num_steps))
    draws = tuple(tuple(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6))) for _ in range(planned))
    return Case(
        lengths=lengths,
        token_losses=rng.normal(size=(n, 9)),
        weights=rng.uniform(0.1, 3.0, n),
        draws=draws,
        num_steps=num_steps,
        rank_sizes=rank_sizes,
        subset=draw(st.booleans()),
    )


@pytest.mark.parametrize("normaliser", NORMALISERS)
@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_factored_engine_loss_equals_the_plans_weighted_loss(family, normaliser, case):
    np.testing.assert_allclose(
        _engine(case, family, normaliser), _target(case, family, normaliser), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("normaliser", NORMALISERS)
@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_step_normalisers_count_draws_and_pool_tokens_by_hand(normaliser, case):
    mbs = [_minibatch(case, seq) for seq in case.draws]
    norms = step_normalisers(
        mbs,
        torch.from_numpy(case.lengths.astype(np.float64)),
        normaliser=normaliser,
        pool_rows=len(case.lengths),
        num_steps=case.num_steps,
        subset=case.subset,
    )
    hand = _hand_normalisers(case, normaliser)
    np.testing.assert_allclose([(n.draws, n.tokens) for n in norms], hand, rtol=1e-12)
    assert global_tokens(norms) == pytest.approx(sum(t for _, t in hand), rel=1e-12)


# A fixed case where every wrong variant below shows: 2 ranks holding 3 and 4 rows, one rank short of
# rows in a step (so it feeds padding), a row drawn twice, unequal lengths, a step past the plan.
FIXED = Case(
    lengths=np.array([2, 7, 3, 9, 1, 5, 4]),
    token_losses=np.random.default_rng(7).normal(size=(7, 9)) + 0.5,
    weights=np.array([1.5, 0.4, 2.0, 0.7, 1.1, 0.9, 2.5]),
    draws=((1, 1, 4, 6), (3, 0)),
    num_steps=3,
    rank_sizes=(3, 4),
)


def _unpadded_rows(family, weights, fed_lengths, *, num_ranks, draws, tokens):
    """Wrong: a row-mean rank divides by its real rows only, not the padded s it feeds."""
    real = max(int((weights > 0).sum()), 1)
    f = row_factors(family, weights, fed_lengths, num_ranks=num_ranks, draws=draws, tokens=tokens)
    return f * real / weights.numel() if family == "row_mean" else f


def _unpadded_tokens(family, weights, fed_lengths, *, num_ranks, draws, tokens):
    """Wrong: a token-mean rank's fed tokens counted without its padding rows."""
    f = row_factors(family, weights, fed_lengths, num_ranks=num_ranks, draws=draws, tokens=tokens)
    if family != "token_mean":
        return f
    real = float(fed_lengths[weights > 0].sum())
    return f * max(real, 1.0) / max(float(fed_lengths.sum()), 1.0)


def _no_rank_factor(family, weights, fed_lengths, *, num_ranks, draws, tokens):
    """Wrong: forgets that data parallelism divides the summed gradient by P."""
    f = row_factors(family, weights, fed_lengths, num_ranks=num_ranks, draws=draws, tokens=tokens)
    return f if family == "global_tokens" else f / num_ranks


def _unique_rows(minibatches, lengths, **kwargs):
    """Wrong: M_j and T_j counted over the merged rows, not the draws (a repeat counted once)."""
    unit = [
        MiniBatch(mb.indices, mb.weights, torch.ones_like(mb.counts), int(mb.indices.numel()), mb.tokens)
        for mb in minibatches
    ]
    return step_normalisers(unit, lengths, **kwargs)


def _pool_as_draws(minibatches, lengths, *, normaliser, **kwargs):
    """Wrong: the "pool" normaliser divides by the drawn tokens instead of the pool's share."""
    return step_normalisers(minibatches, lengths, normaliser="draws", **kwargs)


def _per_step_global(minibatches, lengths, **kwargs):
    """Wrong: a global-token step divided by its own T_j (every step claims the whole pool's tokens)."""
    norms = step_normalisers(minibatches, lengths, **kwargs)
    total = sum(n.tokens for n in norms)
    return [StepNormaliser(n.draws, total) for n in norms]


@pytest.mark.parametrize(
    "family,normaliser,factors,normalisers",
    [
        ("row_mean", "draws", _unpadded_rows, step_normalisers),
        ("token_mean", "draws", _unpadded_tokens, step_normalisers),
        ("row_mean", "pool", _no_rank_factor, step_normalisers),
        ("token_mean", "pool", _no_rank_factor, step_normalisers),
        ("row_mean", "draws", row_factors, _unique_rows),
        ("token_mean", "draws", row_factors, _unique_rows),
        ("token_mean", "pool", row_factors, _pool_as_draws),
        ("token_mean", "draws", row_factors, _per_step_global),
    ],
    ids=[
        "row-mean-unpadded",
        "token-mean-unpadded",
        "row-mean-no-P",
        "token-mean-no-P",
        "row-mean-unique-rows",
        "token-mean-unique-rows",
        "pool-as-draws",
        "token-mean-shared-T",
    ],
)
def test_the_comparison_rejects_known_wrong_formulas(family, normaliser, factors, normalisers):
    target = _target(FIXED, family, normaliser)
    np.testing.assert_allclose(_engine(FIXED, family, normaliser), target, rtol=1e-12, atol=1e-12)
    wrong = _engine(FIXED, family, normaliser, factors=factors, normalisers=normalisers)
    assert not np.allclose(wrong, target, rtol=1e-6, atol=1e-9)


def test_global_family_factor_is_the_weight_whatever_the_normaliser():
    w, fed = torch.tensor([2.0, 0.0, 0.5]), torch.tensor([3.0, 8.0, 1.0])
    for draws, tokens in ((4.0, 10.0), (0.0, 0.0), (1.0, 1e6)):
        got = row_factors("global_tokens", w, fed, num_ranks=3, draws=draws, tokens=tokens)
        assert torch.equal(got, w.double())


@pytest.mark.parametrize("family", ["row_mean", "token_mean"])
def test_a_step_with_no_draws_gets_zero_factors_not_nan(family):
    f = row_factors(family, torch.zeros(3), torch.tensor([2.0, 5.0, 1.0]), num_ranks=2, draws=0.0, tokens=0.0)
    assert torch.equal(f, torch.zeros(3, dtype=torch.float64))


def test_steps_past_the_plan_normalise_by_zero_and_add_nothing_to_the_global_tokens():
    mb = _minibatch(FIXED, (0, 2, 2))
    lengths = torch.from_numpy(FIXED.lengths.astype(np.float64))
    norms = step_normalisers([mb], lengths, normaliser="draws", pool_rows=7, num_steps=3)
    assert norms[1:] == [StepNormaliser(0.0, 0.0)] * 2
    assert global_tokens(norms) == norms[0].tokens == 2.0 + 2 * 3.0


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda mb, le: step_normalisers([mb, mb], le, normaliser="draws", pool_rows=7, num_steps=1), "num_steps=1"),
        (lambda mb, le: step_normalisers([mb], le[:3], normaliser="draws", pool_rows=3, num_steps=1), "pool_rows=3"),
        (lambda mb, le: step_normalisers("ab", le, normaliser="draws", pool_rows=7, num_steps=1), "minibatches"),
        (lambda mb, le: global_tokens([1.0]), "StepNormaliser"),
        (
            lambda mb, le: row_factors("token_mean", torch.ones(2), torch.ones(3), num_ranks=1, draws=1, tokens=1),
            "fed_lengths",
        ),
    ],
    ids=[
        "more-steps-than-num_steps",
        "rows-outside-the-pool",
        "string-minibatches",
        "global-tokens-of-floats",
        "fed-lengths-shape",
    ],
)
def test_bad_arguments_raise_naming_the_argument(call, match):
    mb = _minibatch(FIXED, (5, 6))
    with pytest.raises((ValueError, TypeError), match=match):
        call(mb, torch.from_numpy(FIXED.lengths.astype(np.float64)))
