"""The paper's Figure 2 (§4.4): uniform vs variance vs optimal sampling, its instance and its curves.

Computed here, on top of Cost-Aware SGD (:mod:`costaware.sgd`); drawn, tabled and run as `costaware synthetic`
by :mod:`costaware.report.synthetic`.

Instance. Least squares, N = 3000 points in d = 50. Rows a_i = L·u_i·dir_i with dir_i uniform on
the sphere and u_i ~ U(0.1, 1), so ‖a_i‖ ∈ [1, 10] = [L/10, L] varies across points;
b = A x_true + N(0, 1) with x_true ~ N(0, I/d). Costs c_i ~ U[1, 1000]. Projection ball
‖x‖ ≤ R = 2‖x*‖, x_1 = 0, and G_i = ‖a_i‖(‖a_i‖R + |b_i|) bounds ‖∇f_i‖ on it.

Strategies: uniform, variance (p ∝ G), optimal (p ∝ G/√c). Step size: one rule for all, the convex
theory step η_p = D/√(S(p)·T) with D = R (costaware.sgd): each strategy gets the step its own bound
prescribes, which is the comparison K(ε, p) = D²S(p)C(p)/ε² speaks about. Averaged iterate x̄_t
(what Algorithm 1 returns), last iterate dotted. 1000 trials, ±1 std bands.

Expected outcome: optimal reaches a given error at the lowest cost; variance is fastest per iteration.

"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from costaware import distributions as dist
from costaware import theory
from costaware.sgd import LeastSquares, run_trials

__all__ = ["PAPER", "QUICK", "STRATEGIES", "make_problem", "run"]

PAPER = dict(n=3000, d=50, L=10.0, cost_low=1.0, cost_high=1000.0, trials=1000, steps=100_000)
QUICK = dict(n=500, d=10, L=10.0, cost_low=1.0, cost_high=1000.0, trials=64, steps=20_000)
STRATEGIES = ("uniform", "variance", "optimal")


def make_problem(n: int, d: int, L: float, cost_low: float, cost_high: float, seed: int) -> LeastSquares:
    """The §4.4 instance (see the module docstring), costs included as ``problem.c``.

    >>> prob = make_problem(100, 5, 10.0, 1.0, 1000.0, seed=0)
    >>> bool(np.linalg.norm(prob.A, axis=1).max() <= 10.0), prob.c.shape
    (True, (100,))
    """
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(n, d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    A = L * rng.uniform(0.1, 1.0, n)[:, None] * directions
    x_true = rng.normal(size=d) / np.sqrt(d)
    b = A @ x_true + rng.normal(size=n)
    return LeastSquares(A, b, c=rng.uniform(cost_low, cost_high, n))


def run(
    n: int,
    d: int,
    L: float,
    cost_low: float,
    cost_high: float,
    trials: int,
    steps: int,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Every strategy's curves (mean and std over trials) and the instance's closed-form J ratios."""
    problem = make_problem(n, d, L, cost_low, cost_high, seed)
    G, c = problem.G, problem.c
    probs = {"uniform": dist.uniform(n), "variance": dist.variance(G), "optimal": dist.optimal(G, c)}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(STRATEGIES) * trials, unit="trial", desc="synthetic")
    curves: dict[str, Any] = {}
    for k, name in enumerate(STRATEGIES):
        start = time.perf_counter()
        done = [0]

        def tick(n_done: int, done: list[int] = done) -> None:
            if bar is not None:
                bar.update(n_done - done[0])
            done[0] = n_done

        res = run_trials(
            problem, probs[name], steps, trials, step_size="convex", seed=seed * 1000 + k,
            chunks=10 if progress else 1, progress=tick,
        )  # fmt: skip
        curves[name] = {
            "step_size": float(res.schedule.eta[0]),
            "S": theory.S(probs[name], G),
            "C": theory.C(probs[name], c),
            "J": theory.J(probs[name], G, c),
            "seconds": time.perf_counter() - start,
            "steps": res.checkpoints.tolist(),
            "cost_mean": res.cost.mean(0).tolist(),
            "cost_std": res.cost.std(0).tolist(),
            "error_avg_mean": res.err_avg.mean(0).tolist(),
            "error_avg_std": res.err_avg.std(0).tolist(),
            "error_last_mean": res.err_last.mean(0).tolist(),
            "error_last_std": res.err_last.std(0).tolist(),
        }
    if bar is not None:
        bar.close()
    ratios = {
        "optimal/uniform": theory.ratio_optimal_to_uniform(G, c),
        "optimal/variance": theory.ratio_optimal_to_variance(G, c),
        "variance/uniform": theory.ratio_variance_to_uniform(G, c),
    }
    # While the bias term dominates (the theory step is small because G is a worst-case bound), the
    # mean path E[x_{t+1} − x*] = (I − η_p H)(x_t − x*) differs between strategies only through
    # η_p ∝ 1/√S(p): steps to reach ε scale with √S(p), cost with √S(p)·C(p), not J = S(p)·C(p).
    sqrt_sc = {k: np.sqrt(curves[k]["S"]) * curves[k]["C"] for k in STRATEGIES}
    bias_ratios = {
        "optimal/uniform": sqrt_sc["optimal"] / sqrt_sc["uniform"],
        "optimal/variance": sqrt_sc["optimal"] / sqrt_sc["variance"],
    }
    config = dict(
        n=n, d=d, L=L, cost_low=cost_low, cost_high=cost_high, trials=trials, steps=steps, seed=seed,
        radius=problem.radius, step_rule="convex theory: D/sqrt(S(p) T), D = R, uniform averaging",
        dtype="float32",
    )  # fmt: skip
    return {
        "config": config,
        "closed_form_J_ratios": ratios,
        "bias_limited_sqrtS_C_ratios": bias_ratios,
        "curves": curves,
    }
