"""The drawing kernels of a plan: i.i.d. draws under a token budget, and the merge of duplicate draws.

Internal: every function takes inputs that :func:`costaware.grpo.plan.plan_minibatches` has checked
(a table fresh from the alias kernel, p a probability vector, positive integer costs, counts >= 1) and
checks nothing again.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from costaware.alias import draw


def draw_until_tokens(
    table: tuple[np.ndarray, np.ndarray],
    p: np.ndarray,
    costs: np.ndarray,
    budget: int,
    cap: int,
    rng: np.random.Generator,
    min_draws: int = 1,
) -> tuple[np.ndarray, bool]:
    """i.i.d. draws from p until their summed cost first reaches ``budget`` with at least ``min_draws``
    draws (one per mini-batch, so that none is empty), or ``cap`` draws. Still a stopping time."""
    per_draw = float(p @ costs)
    out: list[np.ndarray] = []
    spent = taken = 0
    while (spent < budget or taken < min_draws) and taken < cap:
        k = min(cap - taken, max(16, int(1.2 * (budget - spent) / per_draw) + 16))
        d = draw(*table, k, rng, validate=False)
        cum = np.cumsum(costs[d]) + spent
        hit = np.flatnonzero((cum >= budget) & (taken + np.arange(1, k + 1) >= min_draws))
        if hit.size:
            d = d[: hit[0] + 1]
        out.append(d)
        spent, taken = int(cum[d.size - 1]), taken + d.size
    return np.concatenate(out), spent < budget


def draw_until_fed_tokens(
    table: tuple[np.ndarray, np.ndarray],
    p: np.ndarray,
    costs: np.ndarray,
    budget: int,
    num_minibatches: int,
    cap: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, list[int], bool]:
    """Per mini-batch, i.i.d. draws from p until its *distinct* rows hold ``budget / num_minibatches``
    tokens, or ``cap`` draws.

    With duplicates merged, a mini-batch feeds each distinct row once, so this matches the tokens
    actually fed (not the drawn ones) to the baseline's. A mini-batch whose support holds fewer
    tokens than its share stops once it has every row of the support. Returns the draws, the
    number of draws of each mini-batch, and whether a mini-batch stopped at the cap.
    """
    c = costs.astype(np.float64)
    share = budget / num_minibatches
    reachable = min(share, float(c[p > 0].sum()))
    per_draw = float(p @ c)
    out: list[np.ndarray] = []
    sizes: list[int] = []
    capped = False
    for _ in range(num_minibatches):
        seen = np.zeros(p.size, dtype=bool)
        spent, taken = 0.0, 0
        while spent < reachable and taken < cap:
            k = min(cap - taken, max(16, int(1.5 * (reachable - spent) / per_draw) + 16))
            d = draw(*table, k, rng, validate=False)
            _, first = np.unique(d, return_index=True)
            first = first[~seen[d[first]]]  # first draws of rows this mini-batch has not fed yet
            gain = np.zeros(k)
            gain[first] = c[d[first]]
            cum = np.cumsum(gain) + spent
            hit = np.flatnonzero(cum >= reachable)
            if hit.size:
                d = d[: hit[0] + 1]
            seen[d] = True
            spent = float(cum[d.size - 1])
            out.append(d)
            taken += d.size
        capped |= spent < reachable
        sizes.append(taken)
    return np.concatenate(out), sizes, capped


@njit(cache=True)
def merge_chunks(draws: np.ndarray, sizes: np.ndarray, n: int):  # pragma: no cover - compiled
    """Merge the duplicate draws within each chunk (a mini-batch): ``(rows, counts, per_chunk)``.

    Chunk j is ``draws[sizes[:j].sum() : sizes[:j+1].sum()]`` (every size >= 1). Each chunk's distinct
    rows come out in increasing order with their draw counts, chunk after chunk; ``per_chunk[j]`` is
    how many distinct rows chunk j holds. The same result as sorting the keys ``chunk·n + row`` and
    run-length encoding them (what this replaced), in O(draws + n) instead of a sort, which was the
    largest single cost of a 65,536-row plan.

    One stable counting pass by row records each draw's chunk (draws of one row then sit in chunk
    order); walking the rows in increasing order, a run of equal chunks is one merged row, appended
    to that chunk's output.
    """
    m = draws.size
    k = sizes.size
    start = np.zeros(n + 1, dtype=np.int64)
    for i in range(m):
        start[draws[i] + 1] += 1
    for r in range(n):
        start[r + 1] += start[r]
    chunk_at = np.empty(m, dtype=np.int32)  # chunk of the t-th draw in row order (k < 2^31)
    c = 0
    end = sizes[0]
    for i in range(m):  # start[r] advances to row r's end, which is row r + 1's start
        while i >= end:  # the draw's chunk
            c += 1
            end += sizes[c]
        d = draws[i]
        chunk_at[start[d]] = c
        start[d] += 1
    # chunk j's merged rows go to slots [base[j], base[j] + per_chunk[j]) of a draws-sized buffer
    base = np.empty(k, dtype=np.int64)
    acc = 0
    for j in range(k):
        base[j] = acc
        acc += sizes[j]
    rows = np.empty(m, dtype=np.int64)
    counts = np.empty(m, dtype=np.int64)
    per_chunk = np.zeros(k, dtype=np.int64)
    t = 0
    for r in range(n):
        stop = start[r]
        while t < stop:
            j = chunk_at[t]
            run = 1
            t += 1
            while t < stop and chunk_at[t] == j:
                run += 1
                t += 1
            slot = base[j] + per_chunk[j]
            rows[slot] = r
            counts[slot] = run
            per_chunk[j] += 1
    u = 0  # close the gaps between chunks (moves left only, so in place)
    for j in range(k):
        b = base[j]
        for q in range(per_chunk[j]):
            rows[u] = rows[b + q]
            counts[u] = counts[b + q]
            u += 1
    return rows[:u], counts[:u], per_chunk


@njit(cache=True)
def gather(
    rows: np.ndarray, counts: np.ndarray, per_chunk: np.ndarray, w: np.ndarray, costs: np.ndarray
):  # pragma: no cover
    """Each merged row's loss weight, w[row]·count in float32, and each chunk's tokens Σ costs[row].

    The same values as ``(w[rows] * counts).astype(np.float32)`` and per-chunk sums of ``costs[rows]``
    (float64 product rounded once to float32; exact integer sums), without draw-sized temporaries.
    """
    weights = np.empty(rows.size, dtype=np.float32)
    tokens = np.zeros(per_chunk.size, dtype=np.int64)
    t = 0
    for j in range(per_chunk.size):
        acc = 0
        for _ in range(per_chunk[j]):
            r = rows[t]
            weights[t] = np.float32(w[r] * counts[t])
            acc += costs[r]
            t += 1
        tokens[j] = acc
    return weights, tokens
