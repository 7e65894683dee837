"""Multi-trial Cost-Aware SGD on least squares: numba runner vs a plain per-trial numpy loop.

    python benchmarks/bench_sgd_runner.py [--n 3000] [--d 50] [--steps 20000] [--trials 256] [--repeats 3]

Prints trial-steps/s of ``costaware.sgd.run_trials`` (numba prange over trials, all threads numba
has) and of a numpy loop that runs the same algorithm trial by trial, step by step (medians over the
repeats, same process, same problem), and their ratio. It also prints the arithmetic limit: a step
costs about 5d flops (dot 2d, axpy 2d, running sum d), set against the same process's numpy matmul
GFLOP/s (float64, all BLAS threads) as the machine's measured peak.
"""

from __future__ import annotations

import argparse

import numba
import numpy as np
from _timing import median_seconds

from costaware import distributions as dist
from costaware.experiments.synthetic import make_problem
from costaware.sgd import run_trials


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
            x -= (eta * w[i] * (a @ x - b[i])) * a
            nrm = np.sqrt(x @ x)
            if nrm > R:
                x *= R / nrm
            x_sum += x
        finals[k] = problem.error(x_sum / steps)
    return finals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--baseline-trials", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    problem, c = make_problem(args.n, args.d, 10.0, 1.0, 1000.0, seed=0)
    p = dist.optimal(problem.G, c)
    run_trials(problem, p, 10, 2, costs=c)  # compile (cached) before timing
    eta = run_trials(problem, p, args.steps, 1, costs=c).step_size

    t_fast = median_seconds(lambda: run_trials(problem, p, args.steps, args.trials, eta, costs=c), args.repeats)
    t_slow = median_seconds(
        lambda: numpy_loop(problem, p, args.steps, args.baseline_trials, eta, 0), args.repeats
    )
    fast = args.steps * args.trials / t_fast
    slow = args.steps * args.baseline_trials / t_slow

    m = 1024
    X = np.random.default_rng(0).normal(size=(m, m))
    X @ X
    t_mm = median_seconds(lambda: X @ X, 5)
    peak = 2 * m**3 / t_mm
    flops = 5 * args.d

    print(f"n={args.n} d={args.d} steps={args.steps} numba threads={numba.get_num_threads()}")
    print(
        f"numba runner : {fast / 1e6:8.2f} M trial-steps/s  ({args.trials} trials, median of {args.repeats})"
    )
    print(f"numpy loop   : {slow / 1e6:8.4f} M trial-steps/s  ({args.baseline_trials} trials)")
    print(f"ratio        : {fast / slow:8.1f}x")
    print(
        f"arithmetic   : {flops} flops/trial-step -> {fast * flops / 1e9:.2f} GFLOP/s; numpy matmul peak "
        f"{peak / 1e9:.2f} GFLOP/s -> {fast * flops / peak:.1%} of the arithmetic limit"
    )


if __name__ == "__main__":
    main()
