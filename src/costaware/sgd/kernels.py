"""The runner's numba kernel: trials in parallel, draws and steps in one compiled loop.

Threads take blocks of _BLOCK trials; inside a block the trials advance one step each in turn, so that
one trial's dependent chain (dot → coefficient → update → next dot) overlaps with the next trial's work.
The loss enters as a small integer (numba branches on it); ``KERNEL_CODE`` is the one place that maps
the public :class:`~costaware.sgd.problems.Loss` to it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from costaware.alias import alias_draw_single
from costaware.sgd.problems import Loss
from costaware.sgd.rng import next_uniform, trial_state

_LEAST_SQUARES = 0
_LOGISTIC = 1
KERNEL_CODE = {Loss.LEAST_SQUARES: _LEAST_SQUARES, Loss.LOGISTIC: _LOGISTIC}

_BLOCK = 16  # measured: 8 → ~38, 16 → ~57, 32 → ~53 M trial-steps/s (float32, bench defaults, 2 cores)
_AHEAD = 64  # steps drawn ahead per pass; float32 running sums go into float64 after each pass


@njit(parallel=True, fastmath=True, cache=True)
def trials_kernel(
    A,  # (n, dp) float32/float64, columns d..dp zero padding
    b,  # (n,) LS targets or logistic labels
    kind,  # KERNEL_CODE[problem.loss]
    w,  # (n,) importance weights
    row_sq,  # (n,) ‖a_i‖²
    costs,
    prob,
    alias,
    eta,  # (T,) step sizes
    omega,  # (T,) averaging weights
    radius,
    checkpoints,  # (K,) increasing steps
    seed,
    first_trial,
    out_sum,  # (trials, K, d) Σ ω x at each checkpoint
    out_last,  # (trials, K, d)
    out_cost,  # (trials, K)
):  # pragma: no cover - compiled
    trials, n_ck, d = out_sum.shape
    dp = A.shape[1]
    zero = A.dtype.type(0.0)
    r2 = radius * radius
    n_blocks = (trials + _BLOCK - 1) // _BLOCK
    steps = checkpoints[n_ck - 1]
    for blk in prange(n_blocks):
        lo = blk * _BLOCK
        kk = min(_BLOCK, trials - lo)
        X = np.zeros((_BLOCK, dp), dtype=A.dtype)
        XS = np.zeros((_BLOCK, dp), dtype=A.dtype)  # short running sums, flushed into XS64
        XS64 = np.zeros((_BLOCK, dp))
        state = np.empty(_BLOCK, dtype=np.uint64)
        sq = np.zeros(_BLOCK)  # ‖x‖², updated in O(1) per step, recomputed when it nears r²
        cost = np.zeros(_BLOCK)
        draws = np.empty((_BLOCK, _AHEAD), dtype=np.int64)
        cum = np.empty((_BLOCK, _AHEAD))
        for k in range(kk):
            state[k] = trial_state(np.uint64(seed), np.uint64(first_trial + lo + k))
        c = 0
        for t0 in range(0, steps, _AHEAD):
            m = min(_AHEAD, steps - t0)
            # Draw the next m indices of every trial first (trials interleaved: 16 independent RNG
            # chains in flight). This has no dependence on x, so the SGD loop below never waits on
            # a table lookup or a mispredicted coin flip.
            for q in range(m):
                for k in range(kk):
                    s, u = next_uniform(state[k])
                    state[k] = s
                    i = alias_draw_single(prob, alias, u)
                    draws[k, q] = i
                    cost[k] += costs[i]
                    cum[k, q] = cost[k]
            for q in range(m):
                t = t0 + q
                et = eta[t]
                om = A.dtype.type(omega[t])
                for k in range(kk):
                    i = draws[k, q]
                    dot = zero
                    for j in range(dp):
                        dot += A[i, j] * X[k, j]
                    z = float(dot)
                    if kind == _LEAST_SQUARES:
                        g = z - b[i]
                    else:
                        mz = b[i] * z  # −y σ(−y z), with exp of a non-positive argument only
                        if mz <= 0.0:
                            g = -b[i] / (1.0 + np.exp(mz))
                        else:
                            g = -b[i] * np.exp(-mz) / (1.0 + np.exp(-mz))
                    coef = et * w[i] * g
                    cf = A.dtype.type(coef)
                    for j in range(dp):
                        XS[k, j] += om * X[k, j]
                        X[k, j] -= cf * A[i, j]
                    nsq = sq[k] - 2.0 * coef * z + coef * coef * row_sq[i]
                    if nsq > r2 * (1.0 - 1e-9):  # near or past the sphere: exact norm, then project
                        nsq = 0.0
                        for j in range(dp):
                            nsq += float(X[k, j]) * float(X[k, j])
                        if nsq > r2:
                            scale = A.dtype.type(np.sqrt(r2 / nsq))
                            for j in range(dp):
                                X[k, j] *= scale
                            nsq = r2
                    sq[k] = nsq
                if c < n_ck and t + 1 == checkpoints[c]:
                    for k in range(kk):
                        nsq = 0.0
                        for j in range(dp):
                            XS64[k, j] += XS[k, j]
                            XS[k, j] = zero
                            nsq += float(X[k, j]) * float(X[k, j])
                        for j in range(d):
                            out_sum[lo + k, c, j] = XS64[k, j]
                            out_last[lo + k, c, j] = X[k, j]
                        sq[k] = nsq  # re-sync the running norm against rounding drift
                        out_cost[lo + k, c] = cum[k, q]
                    c += 1
            for k in range(kk):  # flush the short float32 sums (exact for float64)
                for j in range(dp):
                    XS64[k, j] += XS[k, j]
                    XS[k, j] = zero
