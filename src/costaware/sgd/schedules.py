"""Step sizes η_t, averaging weights ω_t and the argument checks shared by the reference and the runner.

Step sizes (E‖g‖² ≤ S(p) = (1/n²) Σ G_i²/p_i, since ‖∇f_i‖ ≤ G_i on the ball):

* ``"convex"``: the constant η = D/√(S(p)·T) with uniform averaging ω_t = 1. The standard projected
  SGD bound E f(x̄_T) − f* ≤ D²/(2ηT) + ηS(p)/2 (Bubeck 2015, Thm 6.1 with stochastic gradients;
  Nemirovski et al. 2009) is minimised by it and equals D√(S(p)/T), so T = D²S(p)/ε² steps and
  K(ε, p) = T·C(p) = D²S(p)C(p)/ε², the paper's convex cost. D bounds ‖x_1 − x*‖; with x_1 = 0 and
  x* in the ball, D = R is a valid default.
* ``"strongly_convex"``: η_t = 2/(μ(t+1)) with linear averaging ω_t = t. Lacoste-Julien, Schmidt &
  Bach (2012, "A simpler approach to obtaining an O(1/t) rate for projected SGD") prove
  E f(x̂_T) − f* ≤ 2S(p)/(μ(T+1)), i.e. K(ε, p) ≈ 2S(p)C(p)/(με); the paper's 4S(p)C(p)/(με) is the
  same rate with another constant. Either way K ∝ J(p) = S(p)C(p).
* a float: that constant η (applied to g as weighted), uniform averaging.
* a callable ``eta(t)``: called once with t = 1..T (an int array), must return T positive step sizes.

``averaging`` ("uniform" ω_t = 1 or "linear" ω_t = t) overrides the averaging that goes with the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from costaware import distributions as dist
from costaware._checks import integer, positive_scalar, probability_vector
from costaware.theory import S

__all__ = ["StepRule", "StepSize", "log_checkpoints", "step_schedule", "checked_p", "recorded_schedule", "weight_scale"]

StepSize = Literal["convex", "strongly_convex"] | float | Callable[[np.ndarray], Any]


@dataclass(frozen=True)
class StepRule:
    """The resolved schedule: step sizes η_t and averaging weights ω_t for t = 1..T."""

    eta: np.ndarray
    omega: np.ndarray
    rule: str


def weight_scale(p: np.ndarray, weights: str) -> float:
    """Factor that ``weights`` applies on top of the raw 1/(n p_i)."""
    if weights == "raw":
        return 1.0
    if weights == "centred":
        return p.size / dist.support_size(p)
    raise ValueError(f"weights must be 'raw' or 'centred', got {weights!r}")


# The most steps a schedule holds: its η_t and ω_t are float64 arrays of that length (2^32 steps would
# already take 64 GB), so a larger count is an error, not a MemoryError or a machine out of memory.
MAX_STEPS = 1 << 32
MAX_CHECKPOINTS = 1 << 20


def step_schedule(
    problem: Any,
    p: Any,
    steps: int,
    step_size: StepSize = "convex",
    *,
    D: float | None = None,
    mu: float | None = None,
    weights: str = "raw",
    averaging: str | None = None,
) -> StepRule:
    """η_t and ω_t for ``steps`` steps (see the module docstring for every rule).

    >>> from costaware.sgd import LeastSquares
    >>> prob = LeastSquares(np.eye(2), [1.0, 1.0])
    >>> r = step_schedule(prob, [0.5, 0.5], 4, "strongly_convex", mu=0.5)
    >>> r.eta.tolist(), r.omega.tolist()
    ([2.0, 1.3333333333333333, 1.0, 0.8], [1.0, 2.0, 3.0, 4.0])
    """
    p = probability_vector(p, "p")
    steps = integer(steps, "steps", minimum=1, maximum=MAX_STEPS)
    scale = weight_scale(p, weights)
    t = np.arange(1, steps + 1)
    if isinstance(step_size, str):
        if step_size == "convex":
            D = problem.radius if D is None else positive_scalar(D, "D")
            eta = np.full(steps, D / np.sqrt(S(p, problem.G) * steps) / scale)
            default_avg = "uniform"
        elif step_size == "strongly_convex":
            if mu is None:
                raise ValueError("mu must be given (the strong-convexity constant) for step_size='strongly_convex'")
            eta = 2.0 / (positive_scalar(mu, "mu") * (t + 1.0)) / scale
            default_avg = "linear"
        else:
            raise ValueError(
                f"step_size must be 'convex', 'strongly_convex', a positive float or a callable, got {step_size!r}"
            )
        rule: str = step_size
    elif callable(step_size):
        eta = np.asarray(step_size(t), dtype=np.float64)
        if eta.shape != (steps,) or not np.all(np.isfinite(eta)) or np.any(eta <= 0):
            raise ValueError(f"step_size(t) must return {steps} finite positive step sizes, got {eta!r}")
        default_avg, rule = "uniform", "callable"
    else:
        eta = np.full(steps, positive_scalar(step_size, "step_size"))
        default_avg, rule = "uniform", "constant"
    averaging = default_avg if averaging is None else averaging
    if averaging == "uniform":
        omega = np.ones(steps)
    elif averaging == "linear":
        omega = t.astype(np.float64)
    else:
        raise ValueError(f"averaging must be 'uniform' or 'linear', got {averaging!r}")
    return StepRule(eta, omega, f"{rule}, {averaging} averaging")


def checked_p(problem: Any, p: Any) -> np.ndarray:
    p = probability_vector(p, "p")
    if p.size != problem.n:
        raise ValueError(f"p must have one entry per component (n = {problem.n}), got {p.size}")
    if ((p == 0) & (problem.G > 0)).any():
        i = int(np.flatnonzero((p == 0) & (problem.G > 0))[0])
        raise ValueError(f"p must be > 0 wherever G > 0 (else the weighted gradient is biased), got p[{i}] = 0")
    return p


def recorded_schedule(record: Any, steps: int, name: str) -> np.ndarray:
    if record is None:
        return np.array([steps], dtype=np.int64)
    if np.ndim(record) == 0:
        return log_checkpoints(steps, integer(record, name, minimum=1, maximum=MAX_STEPS))
    ck = np.asarray(record)
    if (
        ck.ndim != 1
        or ck.size == 0
        or not np.issubdtype(ck.dtype, np.integer)
        or ck[0] < 1
        or ck[-1] > steps
        or (np.diff(ck) <= 0).any()
    ):
        raise ValueError(f"{name} must be increasing integer step numbers in [1, {steps}], got {ck}")
    return ck.astype(np.int64)


def log_checkpoints(steps: int, count: int = 60) -> np.ndarray:
    """About ``count`` log-spaced distinct step numbers in [1, steps], always ending at ``steps``.

    >>> log_checkpoints(1000, 5).tolist()
    [1, 6, 32, 178, 1000]
    """
    steps, count = (
        integer(steps, "steps", minimum=1, maximum=MAX_STEPS),
        integer(count, "count", minimum=1, maximum=MAX_CHECKPOINTS),
    )
    grid = np.unique(np.round(np.geomspace(1, steps, count)).astype(np.int64))
    grid[-1] = steps
    return grid
