"""Reference Cost-Aware SGD (paper Algorithm 1): a plain loop over steps, for any FiniteSum."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware._checks import integer, positive_scalar
from costaware.alias import build_alias, draw
from costaware.sgd.problems import FiniteSum
from costaware.sgd.schedules import (
    MAX_STEPS,
    StepRule,
    StepSize,
    checked_p,
    recorded_schedule,
    step_schedule,
    weight_scale,
)

__all__ = ["SGDResult", "cost_aware_sgd"]


@dataclass(frozen=True)
class SGDResult:
    x_avg: np.ndarray  # Σ ω_t x_t / Σ ω_t over the T query points: what Algorithm 1 returns
    x_last: np.ndarray  # x_{T+1}
    indices: np.ndarray  # (T,) components drawn
    cumulative_cost: np.ndarray  # (T,) Σ_{s≤t} c_{i_s}
    schedule: StepRule
    record_steps: np.ndarray  # steps t at which the iterates below were recorded
    x_avg_at: np.ndarray  # (len(record_steps), d)
    x_last_at: np.ndarray
    error_avg: np.ndarray | None  # f − f* at the recorded steps, if the problem has error()
    error_last: np.ndarray | None


def cost_aware_sgd(
    problem: FiniteSum,
    p: Any,
    steps: int,
    *,
    step_size: StepSize = "convex",
    D: float | None = None,
    mu: float | None = None,
    radius: float | None = None,
    weights: str = "raw",
    averaging: str | None = None,
    rng: np.random.Generator | int | None = None,
    indices: Any | None = None,
    record: int | Any | None = None,
) -> SGDResult:
    """Reference Cost-Aware SGD: a plain loop over steps (:func:`run_trials` is the fast path).

    ``radius`` overrides ``problem.radius``; ``indices`` replays a given draw sequence instead of
    drawing from ``rng`` (alias table, :func:`costaware.alias.draw`); ``record`` is a count of
    log-spaced steps or an increasing array of steps at which to keep x̄_t and x_{t+1}.
    """
    p = checked_p(problem, p)
    steps = integer(steps, "steps", minimum=1, maximum=MAX_STEPS)
    R = problem.radius if radius is None else positive_scalar(radius, "radius")
    sched = step_schedule(problem, p, steps, step_size, D=D, mu=mu, weights=weights, averaging=averaging)
    rec = recorded_schedule(record, steps, "record")
    n = problem.n
    if indices is None:
        idx = draw(*build_alias(p), steps, rng)
    else:
        idx = np.asarray(indices)
        if idx.shape != (steps,) or not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= n:
            raise ValueError(f"indices must be {steps} integers in [0, {n}), got shape {idx.shape}")
        idx = idx.astype(np.int64)
    w = weight_scale(p, weights) / (n * p[idx])
    x = np.zeros(problem.d)
    x_sum = np.zeros(problem.d)
    omega_sum = 0.0
    x_avg_at, x_last_at = np.empty((rec.size, problem.d)), np.empty((rec.size, problem.d))
    k = 0
    for t in range(steps):
        x_sum += sched.omega[t] * x  # x is the query point of step t + 1
        omega_sum += sched.omega[t]
        x = x - sched.eta[t] * w[t] * problem.grad(idx[t : t + 1], x)[0]
        norm = np.linalg.norm(x)
        if norm > R:
            x *= R / norm
        if k < rec.size and t + 1 == rec[k]:  # no early exit: x_avg, x_last are at step T
            x_avg_at[k], x_last_at[k] = x_sum / omega_sum, x
            k += 1
    err = getattr(problem, "error", None)
    e_avg = None if err is None else np.asarray(err(x_avg_at), dtype=np.float64)
    e_last = None if err is None else np.asarray(err(x_last_at), dtype=np.float64)
    return SGDResult(
        x_sum / omega_sum, x, idx, np.cumsum(problem.c[idx]), sched, rec, x_avg_at, x_last_at, e_avg, e_last
    )
