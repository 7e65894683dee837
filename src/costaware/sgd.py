"""Cost-Aware SGD (paper Algorithm 1) on finite sums, plus a fast multi-trial runner.

Each step draws i ~ p, pays c_i, and moves along the importance-weighted gradient
g = ∇f_i(x)/(n p_i) (unbiased for ∇f), then projects onto the ball ‖x‖ ≤ R. The algorithm returns
the averaged iterate x̄_T = (1/T) Σ_{t=1..T} x_t; the last iterate x_T is reported too (§F.3).

Step size. ``"theory"`` is the convex constant step η = D/√(S(p)·T) with D = R (the iterates start at
x_0 = 0 inside the ball ‖x‖ ≤ R, so ‖x_0 − x*‖ ≤ R) and S(p) = (1/n²) Σ G_i²/p_i. It minimises the
bound D²/(2ηT) + ηS(p)/2 for the given p, so every strategy runs with its own theory step and the
comparison is the one the paper's K(ε, p) ∝ S(p)·C(p) speaks about. A float is used as is.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> A = rng.normal(size=(200, 5)); b = A @ np.ones(5) + 0.1 * rng.normal(size=200)
>>> prob = LeastSquares(A, b)
>>> p = np.full(200, 1 / 200)
>>> res = cost_aware_sgd(prob, p, steps=20_000, step_size=0.01, rng=0)
>>> bool(prob.error(res.x_avg) < 1e-2 * prob.error(np.zeros(5)))
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit, prange

from costaware._checks import positive_scalar, positive_vector, probability_vector
from costaware.alias import build_alias, draw
from costaware.theory import S

__all__ = [
    "LeastSquares",
    "LogisticRegression",
    "SGDResult",
    "TrialCurves",
    "cost_aware_sgd",
    "theory_step_size",
    "log_checkpoints",
    "run_trials",
    "runner_indices",
]


def _matrix(A: Any, name: str) -> np.ndarray:
    arr = np.asarray(A, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got a non-finite entry")
    return np.ascontiguousarray(arr)


def _target(b: Any, n: int, name: str) -> np.ndarray:
    arr = np.asarray(b, dtype=np.float64)
    if arr.ndim != 1 or arr.size != n:
        raise ValueError(f"{name} must be 1-D with {n} entries (one per row), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got a non-finite entry")
    return np.ascontiguousarray(arr)


class LeastSquares:
    """f(x) = (1/n) Σ f_i(x), f_i(x) = ½(a_iᵀx − b_i)², on the ball ‖x‖ ≤ R.

    G_i = ‖a_i‖(‖a_i‖R + |b_i|) bounds ‖∇f_i(x)‖ = ‖a_i‖·|a_iᵀx − b_i| on the ball (|a_iᵀx| ≤ ‖a_i‖R).
    The default radius is 2‖x*‖ (x* the least-squares solution), and a given radius must contain x*,
    so x* is the constrained minimiser too and f(x) − f* = ½(x − x*)ᵀH(x − x*) with H = AᵀA/n.

    >>> prob = LeastSquares(np.eye(3), np.ones(3))
    >>> prob.radius, round(prob.error(np.zeros(3)), 6)
    (3.4641016151377544, 0.5)
    """

    def __init__(self, A: Any, b: Any, radius: float | None = None) -> None:
        self.A = _matrix(A, "A")
        self.n, self.d = self.A.shape
        self.b = _target(b, self.n, "b")
        self.H = self.A.T @ self.A / self.n
        self.x_star = np.linalg.lstsq(self.A, self.b, rcond=None)[0]
        norm_star = float(np.linalg.norm(self.x_star))
        if radius is None:
            radius = 2.0 * norm_star if norm_star > 0 else 1.0
        self.radius = positive_scalar(radius, "radius")
        if norm_star > self.radius * (1 + 1e-12):
            raise ValueError(
                f"radius must contain the least-squares solution (‖x*‖ = {norm_star:.6g}), got {radius!r}"
            )
        self.row_norms = np.linalg.norm(self.A, axis=1)
        self.G = self.row_norms * (self.row_norms * self.radius + np.abs(self.b))
        self.f_star = self.loss(self.x_star)

    def loss(self, x: np.ndarray) -> float:
        r = self.A @ x - self.b
        return float(0.5 * np.mean(r * r))

    def grad_i(self, i: int, x: np.ndarray) -> np.ndarray:
        return self.A[i] * (self.A[i] @ x - self.b[i])

    def error(self, x: np.ndarray) -> float:
        """f(x) − f* through the quadratic form (no cancellation against f*)."""
        e = np.asarray(x, dtype=np.float64) - self.x_star
        return float(0.5 * e @ self.H @ e)


class LogisticRegression:
    """f_i(x) = log(1 + exp(−y_i a_iᵀx)) with labels y_i ∈ {−1, +1}; G_i = ‖a_i‖ (|σ| ≤ 1 everywhere).

    The reference :func:`cost_aware_sgd` runs on it; :func:`run_trials` is least squares only.

    >>> prob = LogisticRegression(np.eye(2), [1, -1])
    >>> round(prob.loss(np.zeros(2)), 6)
    0.693147
    """

    def __init__(self, A: Any, y: Any, radius: float = 10.0) -> None:
        self.A = _matrix(A, "A")
        self.n, self.d = self.A.shape
        self.y = _target(y, self.n, "y")
        if not np.isin(self.y, (-1.0, 1.0)).all():
            bad = self.y[~np.isin(self.y, (-1.0, 1.0))][0]
            raise ValueError(f"y must hold labels -1 or +1, got {bad!r}")
        self.radius = positive_scalar(radius, "radius")
        self.row_norms = np.linalg.norm(self.A, axis=1)
        self.G = self.row_norms.copy()

    def loss(self, x: np.ndarray) -> float:
        return float(np.mean(np.logaddexp(0.0, -self.y * (self.A @ x))))

    def grad_i(self, i: int, x: np.ndarray) -> np.ndarray:
        m = self.y[i] * (self.A[i] @ x)
        return -self.y[i] * self.A[i] * (0.5 * (1.0 - np.tanh(0.5 * m)))  # σ(−m), overflow-free


def theory_step_size(problem: Any, p: Any, steps: int) -> float:
    """η = D/√(S(p)·T) with D = problem.radius (see the module docstring)."""
    return problem.radius / np.sqrt(S(p, problem.G) * steps)


def _step(problem: Any, p: np.ndarray, steps: int, step_size: float | str) -> float:
    if isinstance(step_size, str):
        if step_size != "theory":
            raise ValueError(f"step_size must be 'theory' or a positive float, got {step_size!r}")
        return theory_step_size(problem, p, steps)
    return positive_scalar(step_size, "step_size")


def _checked(problem: Any, p: Any, steps: int) -> tuple[np.ndarray, int]:
    p = probability_vector(p, "p")
    if p.size != problem.n:
        raise ValueError(f"p must have one entry per component (n = {problem.n}), got {p.size}")
    if ((p == 0) & (problem.G > 0)).any():
        raise ValueError("p must be > 0 wherever G > 0, or the importance-weighted gradient is biased")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    return p, int(steps)


@dataclass(frozen=True)
class SGDResult:
    x_avg: np.ndarray  # (1/T) Σ x_t, what Algorithm 1 returns
    x_last: np.ndarray
    indices: np.ndarray  # (T,) the components drawn
    cumulative_cost: np.ndarray  # (T,) Σ_{s≤t} c_{i_s}
    step_size: float


def cost_aware_sgd(
    problem: Any,
    p: Any,
    steps: int,
    step_size: float | str = "theory",
    radius: float | None = None,
    rng: np.random.Generator | int | None = None,
    *,
    costs: Any | None = None,
    indices: Any | None = None,
) -> SGDResult:
    """Reference Cost-Aware SGD (a plain loop over steps; :func:`run_trials` is the fast path).

    ``radius`` overrides the projection radius (default ``problem.radius``), ``costs`` (default all 1)
    gives c_i, and ``indices`` replays a given draw sequence instead of drawing from ``rng``.
    """
    p, steps = _checked(problem, p, steps)
    n = problem.n
    c = np.ones(n) if costs is None else positive_vector(costs, "costs")
    if c.size != n:
        raise ValueError(f"costs must have {n} entries, got {c.size}")
    R = problem.radius if radius is None else positive_scalar(radius, "radius")
    eta = _step(problem, p, steps, step_size)
    if indices is None:
        idx = draw(*build_alias(p), steps, rng)
    else:
        idx = np.asarray(indices, dtype=np.int64)
        if idx.shape != (steps,) or idx.min() < 0 or idx.max() >= n:
            raise ValueError(f"indices must be {steps} integers in [0, {n}), got shape {idx.shape}")
    weights = 1.0 / (n * p)
    x = np.zeros(problem.d)
    x_sum = np.zeros(problem.d)
    for i in idx:
        x = x - eta * weights[i] * problem.grad_i(int(i), x)
        norm = np.linalg.norm(x)
        if norm > R:
            x *= R / norm
        x_sum += x
    return SGDResult(x_sum / steps, x, idx, np.cumsum(c[idx]), eta)


# ---------------------------------------------------------------------------------------------------
# Vectorised multi-trial runner (least squares).

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL = np.uint64(2685821657736338717)


@njit(inline="always")
def _splitmix64(z: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(inline="always")
def _trial_state(seed: np.uint64, trial: np.uint64) -> np.uint64:  # pragma: no cover
    s = _splitmix64(_splitmix64(seed) ^ (trial * _GOLDEN))
    if s == np.uint64(0):  # xorshift's fixed point
        s = _GOLDEN
    return s


@njit(inline="always")
def _next_uniform(s: np.uint64) -> tuple[np.uint64, float]:  # pragma: no cover
    """xorshift64* step; returns (new state, uniform in [0, 1) from the top 53 bits)."""
    s ^= s >> np.uint64(12)
    s ^= s << np.uint64(25)
    s ^= s >> np.uint64(27)
    return s, float((s * _MUL) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(inline="always")
def _alias_branchless(prob, alias, u):  # pragma: no cover - compiled
    """Same draw as ``costaware.alias.alias_draw_single`` (column ⌊u·n⌋, coin u·n − column), without a branch to mispredict."""
    n = prob.size
    x = u * n
    j = min(int(x), n - 1)
    keep = x - j < prob[j]
    return j * keep + alias[j] * (1 - keep)


@njit(cache=True)
def _indices_kernel(prob, alias, steps, seed, trial):  # pragma: no cover
    s = _trial_state(np.uint64(seed), np.uint64(trial))
    out = np.empty(steps, dtype=np.int64)
    for t in range(steps):
        s, u = _next_uniform(s)
        out[t] = _alias_branchless(prob, alias, u)
    return out


def runner_indices(p: Any, steps: int, seed: int, trial: int) -> np.ndarray:
    """The exact draw sequence :func:`run_trials` uses for ``trial`` (for replay and tests)."""
    prob, alias = build_alias(p)
    return _indices_kernel(prob, alias, int(steps), np.uint64(seed), np.uint64(trial))


@njit(parallel=True, fastmath=True, cache=True)
def _ls_kernel(
    A,
    b,
    weights,
    row_sq,
    costs,
    prob,
    alias,
    x_star,
    H,
    eta,
    radius,
    steps,
    checkpoints,
    seed,
    err_avg,
    err_last,
    cum_cost,
):  # pragma: no cover - compiled
    trials = err_avg.shape[0]
    n_ck = checkpoints.size
    d = A.shape[1]
    r2 = radius * radius
    useed = np.uint64(seed)
    for tr in prange(trials):
        s = _trial_state(useed, np.uint64(tr))
        x = np.zeros(d)
        x_sum = np.zeros(d)
        e = np.empty(d)
        sq = 0.0  # ‖x‖², updated in O(1) per step and re-synced on projection
        cost = 0.0
        k = 0
        for t in range(1, steps + 1):
            s, u = _next_uniform(s)
            i = _alias_branchless(prob, alias, u)
            dot = 0.0
            for j in range(d):
                dot += A[i, j] * x[j]
            coef = eta * weights[i] * (dot - b[i])
            sq = sq - 2.0 * coef * dot + coef * coef * row_sq[i]
            if sq > r2:  # rare when R is generous: project exactly
                sq = 0.0
                for j in range(d):
                    x[j] -= coef * A[i, j]
                    sq += x[j] * x[j]
                scale = np.sqrt(r2 / sq) if sq > r2 else 1.0
                sq = 0.0
                for j in range(d):
                    x[j] *= scale
                    x_sum[j] += x[j]
                    sq += x[j] * x[j]
            else:
                for j in range(d):
                    x[j] -= coef * A[i, j]
                    x_sum[j] += x[j]
            cost += costs[i]
            if t == checkpoints[k]:
                for which in range(2):
                    for j in range(d):
                        e[j] = (x_sum[j] / t if which == 0 else x[j]) - x_star[j]
                    q = 0.0
                    for j in range(d):
                        hj = 0.0
                        for m in range(d):
                            hj += H[j, m] * e[m]
                        q += e[j] * hj
                    if which == 0:
                        err_avg[tr, k] = 0.5 * q
                    else:
                        err_last[tr, k] = 0.5 * q
                cum_cost[tr, k] = cost
                sq = 0.0  # re-sync the running norm against rounding drift
                for j in range(d):
                    sq += x[j] * x[j]
                k += 1
                if k == n_ck:
                    break


def log_checkpoints(steps: int, count: int = 60) -> np.ndarray:
    """About ``count`` log-spaced distinct step numbers in [1, steps], always ending at ``steps``."""
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if int(count) != count or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
    grid = np.unique(np.round(np.geomspace(1, steps, int(count))).astype(np.int64))
    grid[-1] = steps
    return grid


@dataclass(frozen=True)
class TrialCurves:
    """Per-trial curves at the checkpoints: arrays of shape (trials, len(checkpoints))."""

    checkpoints: np.ndarray
    err_avg: np.ndarray  # f(x̄_t) − f*
    err_last: np.ndarray  # f(x_t) − f*
    cost: np.ndarray  # cumulative cost Σ_{s≤t} c_{i_s}
    step_size: float


def run_trials(
    problem: LeastSquares,
    p: Any,
    steps: int,
    trials: int,
    step_size: float | str = "theory",
    seed: int = 0,
    checkpoints: int | Any = 60,
    *,
    costs: Any | None = None,
) -> TrialCurves:
    """``trials`` independent Cost-Aware SGD runs on least squares, in parallel (numba prange).

    Trial k draws from its own xorshift64* stream seeded from (seed, k), so the curves do not depend
    on the thread count; :func:`runner_indices` replays any trial's draws. ``checkpoints`` is a count
    (log-spaced, see :func:`log_checkpoints`) or an increasing array of step numbers in [1, steps].

    >>> rng = np.random.default_rng(0)
    >>> prob = LeastSquares(rng.normal(size=(100, 4)), rng.normal(size=100))
    >>> out = run_trials(prob, np.full(100, 0.01), steps=1000, trials=8, checkpoints=5)
    >>> out.err_avg.shape, out.checkpoints.tolist()
    ((8, 5), [1, 6, 32, 178, 1000])
    """
    if not isinstance(problem, LeastSquares):
        raise ValueError(f"run_trials supports LeastSquares problems, got {type(problem).__name__}")
    p, steps = _checked(problem, p, steps)
    if int(trials) != trials or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if np.ndim(checkpoints) == 0:
        ck = log_checkpoints(steps, int(checkpoints))
    else:
        ck = np.asarray(checkpoints, dtype=np.int64)
        if ck.ndim != 1 or ck.size == 0 or ck[0] < 1 or ck[-1] > steps or (np.diff(ck) <= 0).any():
            raise ValueError(f"checkpoints must be increasing step numbers in [1, {steps}], got {ck}")
    c = np.ones(problem.n) if costs is None else positive_vector(costs, "costs")
    if c.size != problem.n:
        raise ValueError(f"costs must have {problem.n} entries, got {c.size}")
    eta = _step(problem, p, steps, step_size)
    prob, alias = build_alias(p)
    shape = (int(trials), ck.size)
    err_avg, err_last, cum = np.empty(shape), np.empty(shape), np.empty(shape)
    _ls_kernel(
        problem.A,
        problem.b,
        1.0 / (problem.n * p),
        problem.row_norms**2,
        c,
        prob,
        alias,
        problem.x_star,
        problem.H,
        eta,
        problem.radius,
        steps,
        ck,
        int(seed),
        err_avg,
        err_last,
        cum,
    )
    return TrialCurves(ck, err_avg, err_last, cum, eta)
