"""Finite-sum problems f(x) = (1/n) Σ f_i(x) on a ball, as Cost-Aware SGD sees them."""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from costaware._checks import as_array, positive_scalar, positive_vector

__all__ = ["FiniteSum", "LeastSquares", "Loss", "LogisticRegression"]


class Loss(str, Enum):
    """The per-component loss of a built-in problem (what the fast runner's kernel evaluates)."""

    LEAST_SQUARES = "least_squares"
    LOGISTIC = "logistic"


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
    arr = as_array(A, name)  # None, strings and dicts: TypeError; complex, bool, ragged: ValueError
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got a non-finite entry")
    return np.ascontiguousarray(arr)


def _target(b: Any, n: int, name: str) -> np.ndarray:
    arr = as_array(b, name)
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

    loss = Loss.LEAST_SQUARES

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
            raise ValueError(f"radius must contain the least-squares solution (‖x*‖ = {norm_star:.6g}), got {radius!r}")
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

    loss = Loss.LOGISTIC

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
