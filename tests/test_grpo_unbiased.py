"""Exact expectations of the sharded, factored estimator, by enumerating every draw sequence.

A pool of N rows with zero-advantage rows and unequal completion lengths; per-row "gradients" G_i
(vectors). One optimiser step draws m rows i.i.d. from p; every sequence of draws is enumerated with
its probability under the reference p (:func:`costaware.distributions.optimal`, computed here, not by
the plan). Each sequence goes through the public path: :func:`plan_minibatches` builds the
mini-batch from it (its p, n_supp, importance weights and merging are the plan's own; only its random
source is replaced by the enumerated sequence), then it is sharded over P simulated ranks
(:func:`shard_minibatches`), factored (:func:`row_factors`) and run through the engine's own
reductions (a rank divides by its fed rows, its fed tokens, or the fixed global token count; data
parallelism averages the P ranks). So a plan that self-normalises its weights, uses a wrong n_supp or
a wrong p fails here. The exact expectation must equal the target of the weight mode:

* raw weights 1/(N p_i): the pool-level quantity stock GRPO computes (Σ_supp G_i over N rows, or
  over the pool's tokens);
* centred weights 1/(n_supp p_i): the same × N/n_supp (n_supp global).

The negative controls at the end show the same comparison rejects the known wrong implementations:
self-normalised weights within a mini-batch, a per-rank n_supp (one plan per rank), and factors
that use the unpadded row/token count.
"""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
import torch

from costaware import distributions as dist
from costaware.grpo import SamplingConfig, plan_minibatches
from costaware.grpo.factors import global_tokens, row_factors, step_normalisers
from costaware.grpo.plan import MiniBatch
from costaware.grpo.shard import rank_offsets, shard_minibatches

FAMILIES = ("row_mean", "token_mean", "global_tokens")
# zero-advantage rows 2, 4, 5: on ranks (3, 3) rank 1 holds one informative row, on (4, 2) none
ADV = np.array([1.0, -0.5, 0.0, 2.0, 0.0, 0.0])
LENGTHS = torch.tensor([3.0, 7.0, 2.0, 5.0, 1.0, 4.0])
COSTS = np.array([10.0, 40.0, 12.0, 25.0, 6.0, 30.0])
G = torch.tensor(np.random.default_rng(0).normal(size=(6, 3)))
M = 3  # draws per step


def _probs(method: str) -> np.ndarray:
    if method == "p_star":
        return dist.optimal(np.abs(ADV), COSTS)
    return dist.smoothed(dist.optimal(np.abs(ADV), COSTS), ALPHA)


def _minibatch(seq: tuple[int, ...], w: np.ndarray) -> MiniBatch:
    rows, counts = np.unique(np.asarray(seq), return_counts=True)
    rows_t, counts_t = torch.from_numpy(rows), torch.from_numpy(counts)
    return MiniBatch(
        indices=rows_t,
        weights=torch.from_numpy(w[rows] * counts),
        counts=counts_t,
        num_draws=int(counts.sum()),
        tokens=int(COSTS[rows].sum()),
    )


ALPHA = 0.3  # p_smooth's mixing weight


def _planned(seq: tuple[int, ...], method: str, mode: str) -> list[MiniBatch]:
    """The mini-batch :func:`plan_minibatches` builds when its M draws are ``seq``.

    The plan's one random step (``draw`` from its alias table) is replaced by the enumerated sequence;
    everything else (p from the advantages and costs, n_supp, the weights, merging) is the plan's."""
    drawn = np.asarray(seq, dtype=np.int64)
    with mock.patch("costaware.grpo.plan.draw", lambda *args, **kwargs: drawn.copy()):
        plan = plan_minibatches(
            torch.tensor(ADV),
            torch.tensor(COSTS),
            num_minibatches=1,
            minibatch_size=M,
            config=SamplingConfig(method, alpha=ALPHA, weights=mode),
            generator=torch.Generator().manual_seed(0),
        )
    assert plan.rows_drawn == M and plan.minibatches[0].num_draws == M
    return list(plan.minibatches)


def _engine_gradient(family, mbs, rank_sizes, *, unpadded=False):
    """What P data-parallel ranks compute for the plan ``mbs`` (normaliser 'pool')."""
    num_ranks = len(rank_sizes)
    offsets = rank_offsets(rank_sizes)
    norms = step_normalisers(mbs, LENGTHS, normaliser="pool", pool_rows=len(ADV), num_steps=len(mbs))
    total_tokens = global_tokens(norms)
    out = torch.zeros(G.shape[1], dtype=torch.float64)
    for r, steps in enumerate(shard_minibatches(mbs, rank_sizes, len(mbs))):
        for step, norm in zip(steps, norms, strict=True):
            rows = step.rows + int(offsets[r])
            fed = LENGTHS[rows]
            if unpadded:  # the wrong factor: counts only the real rows, not the padding the rank feeds
                real = ~step.padding
                f = torch.zeros(rows.numel(), dtype=torch.float64)
                if real.any():
                    f[real] = row_factors(
                        family, step.weights[real], fed[real], num_ranks=num_ranks, draws=norm.draws, tokens=norm.tokens
                    )
            else:
                f = row_factors(family, step.weights, fed, num_ranks=num_ranks, draws=norm.draws, tokens=norm.tokens)
            weighted = (f[:, None] * G[rows]).sum(0)
            if family == "row_mean":  # the rank's mean over the rows it feeds
                loss = weighted / rows.numel()
            elif family == "token_mean":  # the rank's fed completion tokens
                loss = weighted / max(float(fed.sum()), 1.0)
            else:  # a normaliser shared by every rank: T / P (TRL divides num_items_in_batch by P)
                loss = weighted * num_ranks / total_tokens
            out += loss / num_ranks  # data parallelism averages the ranks' gradients
    return out


def _expectation(family, method, mode, rank_sizes, *, build=None, unpadded=False):
    p = _probs(method)
    support = np.flatnonzero(p > 0)
    build = build or (lambda seq: _planned(seq, method, mode))
    total = torch.zeros(G.shape[1], dtype=torch.float64)
    for seq in itertools.product(support.tolist(), repeat=M):
        prob = float(np.prod(p[list(seq)]))
        total += prob * _engine_gradient(family, build(seq), rank_sizes, unpadded=unpadded)
    return total


def _target(family, method, mode):
    p = _probs(method)
    support = torch.from_numpy(np.flatnonzero(p > 0))
    n = len(ADV)
    scale = n / support.numel() if mode == "centred" else 1.0
    summed = G[support].sum(0) * scale
    return summed / n if family == "row_mean" else summed / float(LENGTHS.sum())


CASES = [
    (family, method, mode, sizes)
    for family in FAMILIES
    for method in ("p_star", "p_smooth")
    for mode in ("centred", "raw")
    for sizes in ((6,), (3, 3), (4, 2))
]


@pytest.mark.parametrize("family,method,mode,rank_sizes", CASES)
def test_sharded_factored_estimator_is_exactly_unbiased(family, method, mode, rank_sizes):
    got = _expectation(family, method, mode, rank_sizes)
    # the plan's weights are float32 (what the engines feed), so "exact" is to float32 rounding
    torch.testing.assert_close(got, _target(family, method, mode), rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("method", ["p_star", "p_smooth"])
@pytest.mark.parametrize("mode", ["centred", "raw"])
def test_plan_weights_are_the_reference_importance_weights(method, mode):
    """Every enumerated plan's weights are 1/(n_supp p_i) or 1/(N p_i) times the draw count, from the
    reference p and the global n_supp: what the exact expectation above relies on."""
    w = dist.importance_weights(_probs(method), None, mode)
    for seq in itertools.product(np.flatnonzero(_probs(method) > 0).tolist(), repeat=M):
        (mb,) = _planned(seq, method, mode)
        want = _minibatch(seq, w)
        assert torch.equal(mb.indices, want.indices) and torch.equal(mb.counts, want.counts)
        torch.testing.assert_close(mb.weights.double(), want.weights, rtol=1e-7, atol=0)


def test_sharding_feeds_equal_shapes_and_pads_the_all_zero_rank():
    p = _probs("p_star")
    for seq in itertools.product(np.flatnonzero(p > 0).tolist(), repeat=M):
        steps = shard_minibatches(_planned(seq, "p_star", "centred"), (3, 3), 2)
        for j in range(2):
            assert steps[0][j].rows.numel() == steps[1][j].rows.numel() >= 1
        # the second step is past the plan: one padding row per rank, factor 0
        assert all(bool(s[1].padding.all()) and float(s[1].weights.abs().sum()) == 0 for s in steps)


# -- negative controls: the comparison above rejects the known wrong implementations ----------------------
def _differs(got, family, method, mode):
    return not torch.allclose(got, _target(family, method, mode), rtol=2e-6, atol=1e-9)  # the main test's


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["centred", "raw"])
def test_self_normalised_weights_are_caught(family, mode):
    p = _probs("p_star")
    w = dist.importance_weights(p, None, mode)

    def self_normalised(seq):  # weights divided by their mean over the mini-batch's draws
        return [_minibatch(seq, w / w[list(seq)].mean())]

    assert _differs(_expectation(family, "p_star", mode, (3, 3), build=self_normalised), family, "p_star", mode)


@pytest.mark.parametrize("family", FAMILIES)
def test_per_rank_n_supp_is_caught(family):
    """One plan per rank from its own rows (local p, local n_supp): rank 0 holds two informative rows,
    rank 1 one, so centred weights up-weight rank 1's row against the global plan."""
    sizes = (3, 3)
    offsets = rank_offsets(sizes)
    n_local = sizes[0]
    local = []
    for r in range(2):
        rows = np.arange(offsets[r], offsets[r + 1])
        pr = dist.optimal(np.abs(ADV[rows]), COSTS[rows])
        local.append((rows, pr, dist.importance_weights(pr, None, "centred")))
    pool_tokens = float(LENGTHS.sum())
    total = torch.zeros(G.shape[1], dtype=torch.float64)
    per_rank = [list(itertools.product(np.flatnonzero(pr > 0).tolist(), repeat=M)) for _, pr, _ in local]
    for s0, s1 in itertools.product(*per_rank):
        prob = float(np.prod(local[0][1][list(s0)]) * np.prod(local[1][1][list(s1)]))
        for (rows, _, w), seq in zip(local, (s0, s1), strict=True):
            weighted = (torch.from_numpy(w[list(seq)])[:, None] * G[rows[list(seq)]]).sum(0)
            if family == "row_mean":
                grad = weighted / M
            elif family == "token_mean":  # the rank's own pool tokens
                grad = weighted / (float(LENGTHS[rows].sum()) * M / n_local)
            else:  # the global normaliser, as TRL's num_items_in_batch
                grad = weighted * 2 / (pool_tokens * 2 * M / len(ADV))
            total += prob * grad / 2
    assert _differs(total, family, "p_star", "centred")


@pytest.mark.parametrize("family", ["row_mean", "token_mean"])
def test_unpadded_row_count_is_caught(family):
    got = _expectation(family, "p_star", "centred", (3, 3), unpadded=True)
    assert _differs(got, family, "p_star", "centred")
