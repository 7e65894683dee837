"""Cost-Aware SGD (paper Algorithm 1) on finite sums, and a fast multi-trial runner.

Each step draws i ~ p, pays c_i, and moves along the importance-weighted gradient
g = w_i ∇f_i(x) with w_i = 1/(n p_i) (``weights="raw"``: E_p[g] = ∇f), then projects onto the ball
‖x‖ ≤ R. It starts at x_1 = 0 and returns the average of the points where it queried gradients,
x̄_T = Σ_t ω_t x_t / Σ_t ω_t (t = 1..T), as the theorems do; the last iterate x_{T+1} is reported too (§F.3).
``weights="centred"`` uses w_i = 1/(n_supp p_i) (E_p[w] = 1, §G.2); the theory step sizes
(:mod:`~costaware.sgd.schedules`) divide by the factor n/n_supp, so both give the same trajectory.

The package: :mod:`~costaware.sgd.problems` (the finite sums), :mod:`~costaware.sgd.schedules` (step
sizes η_t and averaging weights ω_t, every rule documented there), :mod:`~costaware.sgd.reference` (the
plain loop), and the fast path :mod:`~costaware.sgd.runner` with its numba kernel
(:mod:`~costaware.sgd.kernels`) and per-trial random streams (:mod:`~costaware.sgd.rng`).
:mod:`~costaware.sgd.figure` computes the paper's Figure 2 (its instance and curves); the report draws it
(``report.synthetic``, `costaware synthetic`), and nothing here imports the report.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> A = rng.normal(size=(200, 5)); b = A @ np.ones(5) + 0.1 * rng.normal(size=200)
>>> prob = LeastSquares(A, b)
>>> res = cost_aware_sgd(prob, np.full(200, 1 / 200), steps=20_000, step_size=0.01, rng=0)
>>> bool(prob.error(res.x_avg) < 1e-2 * prob.error(np.zeros(5)))
True
"""

from __future__ import annotations

from costaware.sgd.problems import FiniteSum, LeastSquares, LogisticRegression, Loss
from costaware.sgd.reference import SGDResult, cost_aware_sgd
from costaware.sgd.rng import runner_indices
from costaware.sgd.runner import TrialCurves, run_trials
from costaware.sgd.schedules import StepRule, StepSize, log_checkpoints, step_schedule

__all__ = [
    "FiniteSum",
    "LeastSquares",
    "LogisticRegression",
    "Loss",
    "SGDResult",
    "StepRule",
    "StepSize",
    "TrialCurves",
    "cost_aware_sgd",
    "log_checkpoints",
    "run_trials",
    "runner_indices",
    "step_schedule",
]
