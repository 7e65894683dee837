"""Multi-trial Cost-Aware SGD on least squares: the numba runner vs a plain per-trial numpy loop.

    python benchmarks/bench_sgd_runner.py [--n 3000] [--d 50] [--steps 50000] [--trials 256] [--repeats 5]

Prints trial-steps/s (alias draws included) of ``costaware.sgd.run_trials`` in float32 and float64
(numba prange over trials, all numba threads) and of a numpy loop that runs the same algorithm
trial by trial, step by step (medians over the repeats, same process, same problem), and the ratios.

Arithmetic limit. One trial-step does a dot product (d FMAs), the update x −= c·a (d FMAs) and the
running average s += ω·x (d FMAs): 3 d FMAs = 6 d flops on the padded width (d → 64 in float32,
56 in float64). Peak is measured in the same run: a 2048² numpy matmul in float32 and in float64 (all BLAS
threads, AVX-512 on this machine).
Memory: each step streams one random row of A (from L2: A is 0.77 MB in float32) plus x and s
(L1); the L2 read bandwidth is measured with a numba random-row sum.
"""

from __future__ import annotations

import argparse

import numba
import numpy as np
from _timing import median_seconds
from numba import njit, prange

from costaware import distributions as dist
from costaware.sgd import run_trials, step_schedule
from costaware.sgd.figure import make_problem


def numpy_loop(problem, p, steps: int, trials: int, eta: float, seed: int) -> np.ndarray:
    """The baseline: the same projected SGD, one trial after another, numpy per step."""
    rng = np.random.default_rng(seed)
    w = 1.0 / (problem.n * p)
    A, b, R = problem.A, problem.b, problem.radius
    finals = np.empty(trials)
    for k in range(trials):
        idx = rng.choice(problem.n, size=steps, p=p)
        x, x_sum = np.zeros(problem.d), np.zeros(problem.d)
        for i in idx:
            a = A[i]
            x_sum += x
            x -= (eta * w[i] * (a @ x - b[i])) * a
            nrm = np.sqrt(x @ x)
            if nrm > R:
                x *= R / nrm
        finals[k] = problem.error(x_sum / steps)
    return finals


@njit(parallel=True, fastmath=True)
def _row_stream(A, idx, out):  # sum of random rows: the kernel's row traffic without the arithmetic
    for t in prange(out.shape[0]):
        s = np.zeros(A.shape[1], dtype=A.dtype)
        for i in idx[t]:
            for j in range(A.shape[1]):
                s[j] += A[i, j]
        out[t] = s.sum()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--baseline-steps", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    problem = make_problem(args.n, args.d, 10.0, 1.0, 1000.0, seed=0)
    p = dist.optimal(problem.G, problem.c)
    eta = float(step_schedule(problem, p, args.steps).eta[0])
    threads = numba.get_num_threads()
    rate = {}
    for dt in ("float32", "float64"):
        t = median_seconds(lambda dt=dt: run_trials(problem, p, args.steps, args.trials, step_size=eta, dtype=dt),
                           args.repeats)  # fmt: skip
        rate[dt] = args.steps * args.trials / t
    t_slow = median_seconds(lambda: numpy_loop(problem, p, args.baseline_steps, 1, eta, 0), args.repeats)
    slow = args.baseline_steps / t_slow

    m = 2048
    peak = {}
    for dt in ("float32", "float64"):  # BLAS sgemm/dgemm on all its threads: the measured FLOP/s peak
        X = np.random.default_rng(0).normal(size=(m, m)).astype(dt)
        peak[dt] = 2 * m**3 / median_seconds(lambda X=X: X @ X, args.repeats)
    A32 = np.zeros((args.n, 64), np.float32)
    A32[:, : args.d] = problem.A
    idx = np.random.default_rng(1).integers(0, args.n, size=(threads * 4, 200_000))
    t_bw = median_seconds(lambda: _row_stream(A32, idx, np.empty(idx.shape[0], np.float32)), 3)
    bw = idx.size * 64 * 4 / t_bw

    print(f"n={args.n} d={args.d} steps={args.steps} trials={args.trials} numba threads={threads}")
    for dt, width in (("float32", 64), ("float64", 56)):
        flops = 6 * width
        print(
            f"runner {dt}: {rate[dt] / 1e6:7.1f} M trial-steps/s  ({flops} flops/step on the padded width "
            f"-> {rate[dt] * flops / 1e9:6.1f} GFLOP/s = {rate[dt] * flops / peak[dt]:.1%} of the "
            f"{peak[dt] / 1e9:.0f} GFLOP/s {dt} matmul peak)"
        )
    print(f"numpy loop    : {slow / 1e6:9.4f} M trial-steps/s  (1 trial, {args.baseline_steps} steps)")
    print(f"ratio float32 runner / numpy loop: {rate['float32'] / slow:8.0f}x")
    print(f"ratio float64 runner / numpy loop: {rate['float64'] / slow:8.0f}x")
    print(
        f"random-row stream (float32, 256 B/row): {bw / 1e9:.1f} GB/s = {bw / 256 / 1e6:.0f} M rows/s; "
        f"the float32 runner reads {rate['float32'] * 256 / 1e9:.1f} GB/s of rows "
        f"({rate['float32'] * 256 / bw:.0%} of it)"
    )


if __name__ == "__main__":
    main()
