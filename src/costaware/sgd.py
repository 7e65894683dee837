"""Cost-Aware SGD (paper Algorithm 1) on finite sums, and a fast multi-trial runner.

Each step draws i ~ p, pays c_i, and moves along the importance-weighted gradient
g = w_i ∇f_i(x) with w_i = 1/(n p_i) (``weights="raw"``: E_p[g] = ∇f), then projects onto the ball
‖x‖ ≤ R. It starts at x_1 = 0 and returns the average of the points where it queried gradients,
x̄_T = Σ_t ω_t x_t / Σ_t ω_t (t = 1..T), as the theorems do; the last iterate x_{T+1} is reported too (§F.3).
``weights="centred"`` uses w_i = 1/(n_supp p_i) (E_p[w] = 1, §G.2); the theory step sizes below divide
by the factor n/n_supp, so both give the same trajectory.

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

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> A = rng.normal(size=(200, 5)); b = A @ np.ones(5) + 0.1 * rng.normal(size=200)
>>> prob = LeastSquares(A, b)
>>> res = cost_aware_sgd(prob, np.full(200, 1 / 200), steps=20_000, step_size=0.01, rng=0)
>>> bool(prob.error(res.x_avg) < 1e-2 * prob.error(np.zeros(5)))
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numba import njit, prange

from costaware import distributions as dist
from costaware._checks import positive_scalar, positive_vector, probability_vector
from costaware.alias import alias_draw_single, build_alias, draw
from costaware.theory import S

__all__ = [
    "FiniteSum",
    "LeastSquares",
    "LogisticRegression",
    "SGDResult",
    "TrialCurves",
    "StepRule",
    "step_schedule",
    "cost_aware_sgd",
    "log_checkpoints",
    "run_trials",
    "runner_indices",
]

StepSize = Literal["convex", "strongly_convex"] | float | Callable[[np.ndarray], Any]


@runtime_checkable
class FiniteSum(Protocol):
    """f(x) = (1/n) Σ f_i(x) over the ball ‖x‖ ≤ radius, as Cost-Aware SGD sees it.

    ``grad(indices, x)`` returns the rows ∇f_{indices[k]}(x_k), shape (k, d), for x of shape (d,)
    (one point) or (k, d) (one point per index). ``G`` bounds ‖∇f_i‖ on the ball, ``c`` holds the
    costs. Optional: ``f(x)`` (batched over leading axes), ``x_star``, and ``error(x) = f(x) − f*``,
    without which the recorded errors are None.
    """

    n: int
    d: int
    G: np.ndarray
    c: np.ndarray
    radius: float

    def grad(self, indices: np.ndarray, x: np.ndarray) -> np.ndarray: ...


def _matrix(A: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(A, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric 2-D array, got {type(A).__name__}") from exc
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


def _costs(c: Any, n: int) -> np.ndarray:
    if c is None:
        return np.ones(n)
    c = positive_vector(c, "c")
    if c.size != n:
        raise ValueError(f"c must have {n} entries (one per component), got {c.size}")
    return c


def _points(x: Any, d: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.shape[-1:] != (d,):
        raise ValueError(f"x must have last dimension d = {d}, got shape {x.shape}")
    return x


class LeastSquares:
    """f_i(x) = ½(a_iᵀx − b_i)² on the ball ‖x‖ ≤ R.

    G_i = ‖a_i‖(‖a_i‖R + |b_i|): ∇f_i(x) = a_i(a_iᵀx − b_i) and |a_iᵀx| ≤ ‖a_i‖R on the ball
    (Cauchy–Schwarz), so this bounds ‖∇f_i‖ wherever SGD goes. The default radius is 2‖x*‖
    (x* the least-squares solution); a given radius must contain x*, so x* is also the constrained
    minimiser and f(x) − f* = ½(x − x*)ᵀH(x − x*) exactly, H = AᵀA/n (no cancellation against f*).

    >>> prob = LeastSquares(np.eye(3), np.ones(3))
    >>> prob.radius, round(float(prob.error(np.zeros(3))), 6)
    (3.4641016151377544, 0.5)
    """

    kind = 0  # the runner's kernel code for this loss

    def __init__(self, A: Any, b: Any, c: Any | None = None, radius: float | None = None) -> None:
        self.A = _matrix(A, "A")
        self.n, self.d = self.A.shape
        self.b = _target(b, self.n, "b")
        self.c = _costs(c, self.n)
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
        self.f_star = float(self.f(self.x_star))

    def f(self, x: Any) -> np.ndarray | float:
        x = _points(x, self.d)
        r = x @ self.A.T - self.b
        return 0.5 * np.mean(r * r, axis=-1)

    def grad(self, indices: Any, x: Any) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64)
        a = self.A[idx]
        resid = np.einsum("...j,...j->...", a, _points(x, self.d)) - self.b[idx]
        return a * resid[..., None]

    def error(self, x: Any) -> np.ndarray | float:
        """f(x) − f* through the quadratic form, batched over leading axes of x."""
        e = _points(x, self.d) - self.x_star
        return 0.5 * np.sum((e @ self.H) * e, axis=-1)


class LogisticRegression:
    """f_i(x) = log(1 + exp(−y_i a_iᵀx)), labels y_i ∈ {−1, +1}, on the ball ‖x‖ ≤ R (default 10).

    G_i = ‖a_i‖: ∇f_i(x) = −y_i σ(−y_i a_iᵀx) a_i and 0 < σ < 1. x* is the minimiser over the ball
    (it exists even for separable data): Newton's method on f + (λ/2)‖x‖², with λ = 0 if that
    minimiser lies inside the ball, else λ > 0 found by bisection so that ‖x(λ)‖ = R (KKT).

    >>> prob = LogisticRegression(np.eye(2), [1, -1])
    >>> round(float(prob.f(np.zeros(2))), 6), bool(np.linalg.norm(prob.x_star) <= 10 + 1e-9)
    (0.693147, True)
    """

    kind = 1

    def __init__(self, A: Any, y: Any, c: Any | None = None, radius: float = 10.0) -> None:
        self.A = _matrix(A, "A")
        self.n, self.d = self.A.shape
        self.y = _target(y, self.n, "y")
        bad = ~np.isin(self.y, (-1.0, 1.0))
        if bad.any():
            raise ValueError(f"y must hold labels -1 or +1, got {self.y[bad][0]!r}")
        self.b = self.y  # the kernel's per-row scalar
        self.c = _costs(c, self.n)
        self.radius = positive_scalar(radius, "radius")
        self.row_norms = np.linalg.norm(self.A, axis=1)
        self.G = self.row_norms.copy()
        self.x_star = self._ball_minimiser()
        self.f_star = float(self.f(self.x_star))

    def f(self, x: Any) -> np.ndarray | float:
        m = _points(x, self.d) @ self.A.T * self.y
        return np.mean(np.logaddexp(0.0, -m), axis=-1)

    def grad(self, indices: Any, x: Any) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64)
        a = self.A[idx]
        m = self.y[idx] * np.einsum("...j,...j->...", a, _points(x, self.d))
        return a * (-self.y[idx] * 0.5 * (1.0 - np.tanh(0.5 * m)))[..., None]  # σ(−m), overflow-free

    def error(self, x: Any) -> np.ndarray | float:
        """f(x) − f*, batched over leading axes (chunked: each point costs one pass over A)."""
        x = _points(x, self.d)
        flat = x.reshape(-1, self.d)
        out = np.concatenate([self.f(flat[k : k + 2048]) for k in range(0, len(flat), 2048)])
        return (out - self.f_star).reshape(x.shape[:-1]) if x.ndim > 1 else float(out[0] - self.f_star)

    def _newton(self, lam: float, x: np.ndarray) -> np.ndarray:
        for _ in range(100):
            m = self.y * (self.A @ x)
            s = 0.5 * (1.0 - np.tanh(0.5 * m))  # σ(−m)
            g = -(self.A.T @ (self.y * s)) / self.n + lam * x
            h = (self.A.T * (s * (1 - s))) @ self.A / self.n + (lam + 1e-12) * np.eye(self.d)
            step = np.linalg.solve(h, g)
            x = x - step
            if np.linalg.norm(step) < 1e-13 * (1 + np.linalg.norm(x)):
                break
        return x

    def _ball_minimiser(self) -> np.ndarray:
        x = self._newton(0.0, np.zeros(self.d))
        if np.all(np.isfinite(x)) and np.linalg.norm(x) <= self.radius:
            return x
        lo, hi = 0.0, 1.0
        while np.linalg.norm(self._newton(hi, np.zeros(self.d))) > self.radius:
            hi *= 4.0
        x = np.zeros(self.d)
        for _ in range(100):  # ‖x(λ)‖ decreases in λ
            mid = 0.5 * (lo + hi)
            x = self._newton(mid, x)
            lo, hi = (mid, hi) if np.linalg.norm(x) > self.radius else (lo, mid)
            if hi - lo < 1e-15 * hi:
                break
        x = self._newton(hi, x)
        return x * min(1.0, self.radius / np.linalg.norm(x))


# ---------------------------------------------------------------------------------------------------
# Step sizes and checks shared by the reference loop and the runner.


@dataclass(frozen=True)
class StepRule:
    """The resolved schedule: step sizes η_t and averaging weights ω_t for t = 1..T."""

    eta: np.ndarray
    omega: np.ndarray
    rule: str


def _weight_scale(p: np.ndarray, weights: str) -> float:
    """Factor that ``weights`` applies on top of the raw 1/(n p_i)."""
    if weights == "raw":
        return 1.0
    if weights == "centred":
        return p.size / dist.support_size(p)
    raise ValueError(f"weights must be 'raw' or 'centred', got {weights!r}")


def _positive_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


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

    >>> prob = LeastSquares(np.eye(2), [1.0, 1.0])
    >>> r = step_schedule(prob, [0.5, 0.5], 4, "strongly_convex", mu=0.5)
    >>> r.eta.tolist(), r.omega.tolist()
    ([2.0, 1.3333333333333333, 1.0, 0.8], [1.0, 2.0, 3.0, 4.0])
    """
    p = probability_vector(p, "p")
    steps = _positive_int(steps, "steps")
    scale = _weight_scale(p, weights)
    t = np.arange(1, steps + 1)
    if isinstance(step_size, str):
        if step_size == "convex":
            D = problem.radius if D is None else positive_scalar(D, "D")
            eta = np.full(steps, D / np.sqrt(S(p, problem.G) * steps) / scale)
            default_avg = "uniform"
        elif step_size == "strongly_convex":
            if mu is None:
                raise ValueError(
                    "mu must be given (the strong-convexity constant) for step_size='strongly_convex'"
                )
            eta = 2.0 / (positive_scalar(mu, "mu") * (t + 1.0)) / scale
            default_avg = "linear"
        else:
            raise ValueError(
                f"step_size must be 'convex', 'strongly_convex', a positive float or a callable, got {step_size!r}"
            )
        rule = step_size
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


def _checked_p(problem: Any, p: Any) -> np.ndarray:
    p = probability_vector(p, "p")
    if p.size != problem.n:
        raise ValueError(f"p must have one entry per component (n = {problem.n}), got {p.size}")
    if ((p == 0) & (problem.G > 0)).any():
        i = int(np.flatnonzero((p == 0) & (problem.G > 0))[0])
        raise ValueError(
            f"p must be > 0 wherever G > 0 (else the weighted gradient is biased), got p[{i}] = 0"
        )
    return p


def _recorded(record: Any, steps: int, name: str) -> np.ndarray:
    if record is None:
        return np.array([steps], dtype=np.int64)
    if np.ndim(record) == 0:
        return log_checkpoints(steps, _positive_int(record, name))
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
    steps, count = _positive_int(steps, "steps"), _positive_int(count, "count")
    grid = np.unique(np.round(np.geomspace(1, steps, count)).astype(np.int64))
    grid[-1] = steps
    return grid


# ---------------------------------------------------------------------------------------------------
# Reference: Algorithm 1, one step at a time, for any FiniteSum.


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
    p = _checked_p(problem, p)
    steps = _positive_int(steps, "steps")
    R = problem.radius if radius is None else positive_scalar(radius, "radius")
    sched = step_schedule(problem, p, steps, step_size, D=D, mu=mu, weights=weights, averaging=averaging)
    rec = _recorded(record, steps, "record")
    n = problem.n
    if indices is None:
        idx = draw(*build_alias(p), steps, rng)
    else:
        idx = np.asarray(indices)
        if (
            idx.shape != (steps,)
            or not np.issubdtype(idx.dtype, np.integer)
            or idx.min() < 0
            or idx.max() >= n
        ):
            raise ValueError(f"indices must be {steps} integers in [0, {n}), got shape {idx.shape}")
        idx = idx.astype(np.int64)
    w = _weight_scale(p, weights) / (n * p[idx])
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


# ---------------------------------------------------------------------------------------------------
# Multi-trial runner: numba, trials in parallel, draws and steps in one compiled loop.
#
# Each trial has its own xorshift64* stream seeded by splitmix64(seed, trial), so a trial's path does
# not depend on the thread count, on chunking, or on which other trials run. Threads take blocks of
# _BLOCK trials; inside a block the trials advance one step each in turn, so that one trial's
# dependent chain (dot → coefficient → update → next dot) overlaps with the next trial's work.

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL = np.uint64(2685821657736338717)
_BLOCK = 16  # measured: 8 → ~38, 16 → ~57, 32 → ~53 M trial-steps/s (float32, bench defaults, 2 cores)
_AHEAD = 64  # steps drawn ahead per pass; float32 running sums go into float64 after each pass


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


@njit(cache=True)
def _indices_kernel(prob, alias, steps, seed, trial):  # pragma: no cover - compiled
    s = _trial_state(np.uint64(seed), np.uint64(trial))
    out = np.empty(steps, dtype=np.int64)
    for t in range(steps):
        s, u = _next_uniform(s)
        out[t] = alias_draw_single(prob, alias, u)
    return out


def runner_indices(p: Any, steps: int, seed: int, trial: int) -> np.ndarray:
    """The exact draw sequence :func:`run_trials` uses for ``trial`` (replay it with ``cost_aware_sgd``)."""
    prob, alias = build_alias(p)
    return _indices_kernel(prob, alias, _positive_int(steps, "steps"), np.uint64(seed), np.uint64(trial))


@njit(parallel=True, fastmath=True, cache=True)
def _trials_kernel(
    A,  # (n, dp) float32/float64, columns d..dp zero padding
    b,  # (n,) LS targets or logistic labels
    kind,  # 0 least squares, 1 logistic
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
            state[k] = _trial_state(np.uint64(seed), np.uint64(first_trial + lo + k))
        c = 0
        for t0 in range(0, steps, _AHEAD):
            m = min(_AHEAD, steps - t0)
            # Draw the next m indices of every trial first (trials interleaved: 16 independent RNG
            # chains in flight). This has no dependence on x, so the SGD loop below never waits on
            # a table lookup or a mispredicted coin flip.
            for q in range(m):
                for k in range(kk):
                    s, u = _next_uniform(state[k])
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
                    if kind == 0:
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


@dataclass(frozen=True)
class TrialCurves:
    """Per-trial curves at the checkpoints: arrays of shape (trials, len(checkpoints))."""

    checkpoints: np.ndarray
    err_avg: np.ndarray  # f(x̄_t) − f*
    err_last: np.ndarray  # f(x_{t+1}) − f*
    cost: np.ndarray  # cumulative cost Σ_{s≤t} c_{i_s}
    schedule: StepRule
    x_avg: np.ndarray | None = None  # (trials, K, d) if keep_iterates
    x_last: np.ndarray | None = None


def run_trials(
    problem: LeastSquares | LogisticRegression,
    p: Any,
    steps: int,
    trials: int,
    *,
    step_size: StepSize = "convex",
    D: float | None = None,
    mu: float | None = None,
    weights: str = "raw",
    averaging: str | None = None,
    seed: int = 0,
    checkpoints: int | Any = 60,
    dtype: str = "float32",
    keep_iterates: bool = False,
    chunks: int = 1,
    progress: Callable[[int], Any] | None = None,
) -> TrialCurves:
    """``trials`` independent Cost-Aware SGD runs (least squares or logistic), in parallel.

    Same algorithm and step rules as :func:`cost_aware_sgd`; trial k's draws are
    ``runner_indices(p, steps, seed, k)``. ``dtype="float64"`` reproduces the reference loop to
    rounding; ``"float32"`` (the default, about 1.4× faster) keeps the averaged sums in float64 and
    moves the curves by ~1e-5 relative, far below their Monte-Carlo spread. Errors are f − f* at the
    checkpoints (least squares: the exact quadratic form). ``chunks`` splits the trials into that many
    kernel calls and calls ``progress(trials_done)`` after each (results do not depend on it).

    >>> rng = np.random.default_rng(0)
    >>> prob = LeastSquares(rng.normal(size=(100, 4)), rng.normal(size=100))
    >>> out = run_trials(prob, np.full(100, 0.01), steps=1000, trials=8, checkpoints=5)
    >>> out.err_avg.shape, out.checkpoints.tolist()
    ((8, 5), [1, 6, 32, 178, 1000])
    """
    kind = getattr(problem, "kind", None)
    if not isinstance(problem, (LeastSquares, LogisticRegression)) or kind not in (0, 1):
        raise ValueError(
            f"run_trials supports LeastSquares and LogisticRegression, got {type(problem).__name__} "
            "(use cost_aware_sgd for any other FiniteSum)"
        )
    p = _checked_p(problem, p)
    steps = _positive_int(steps, "steps")
    trials = _positive_int(trials, "trials")
    chunks = _positive_int(chunks, "chunks")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    ck = _recorded(checkpoints, steps, "checkpoints")
    sched = step_schedule(problem, p, steps, step_size, D=D, mu=mu, weights=weights, averaging=averaging)
    n, d = problem.n, problem.d
    lanes = 16 if dtype == "float32" else 8  # pad d to whole SIMD registers: no remainder loops
    A = np.zeros((n, -(-d // lanes) * lanes), dtype=dtype)
    A[:, :d] = problem.A
    prob, alias = build_alias(p)
    w = _weight_scale(p, weights) / (n * np.where(p > 0, p, 1.0))
    row_sq = np.einsum("ij,ij->i", A, A, dtype=np.float64)
    eta = sched.eta[: ck[-1]].copy()
    omega = sched.omega[: ck[-1]].copy()
    x_sum = np.empty((trials, ck.size, d))
    x_last = np.empty((trials, ck.size, d))
    cost = np.empty((trials, ck.size))
    bounds = np.linspace(0, trials, min(chunks, trials) + 1).astype(np.int64)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        _trials_kernel(
            A, problem.b, kind, w, row_sq, problem.c, prob, alias, eta, omega, problem.radius, ck,
            np.uint64(seed), np.int64(lo), x_sum[lo:hi], x_last[lo:hi], cost[lo:hi],
        )  # fmt: skip
        if progress is not None:
            progress(int(hi))
    x_avg = x_sum / np.cumsum(omega)[ck - 1][None, :, None]
    return TrialCurves(
        ck,
        np.asarray(problem.error(x_avg)),
        np.asarray(problem.error(x_last)),
        cost,
        sched,
        x_avg if keep_iterates else None,
        x_last if keep_iterates else None,
    )
