"""Argument checks shared by every public function.

Each check names the argument and shows the offending value, so that a bad input fails at the
call site with a message a user can act on, never as a silent NaN further down.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _show(x: Any) -> str:
    s = np.array2string(np.asarray(x), threshold=8, edgeitems=3) if np.ndim(x) else repr(x)
    return s if len(s) < 200 else s[:200] + "..."


def as_vector(x: Any, name: str, *, allow_empty: bool = False) -> np.ndarray:
    """`x` as a finite 1-D float64 array (torch tensors and lists accepted)."""
    if hasattr(x, "detach"):  # torch.Tensor without importing torch
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {_show(x)}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite, got {arr[i]} at index {i}")
    return arr


def positive_vector(x: Any, name: str) -> np.ndarray:
    arr = as_vector(x, name)
    bad = arr <= 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be > 0, got {arr[i]} at index {i}")
    return arr


def nonnegative_vector(x: Any, name: str, *, not_all_zero: bool = False) -> np.ndarray:
    arr = as_vector(x, name)
    bad = arr < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be >= 0, got {arr[i]} at index {i}")
    if not_all_zero and not (arr > 0).any():
        raise ValueError(f"{name} must have at least one entry > 0, got all zeros (length {arr.size})")
    return arr


def probability_vector(p: Any, name: str = "p", *, atol: float = 1e-8) -> np.ndarray:
    arr = nonnegative_vector(p, name, not_all_zero=True)
    total = arr.sum()
    if abs(total - 1.0) > atol * max(1, arr.size):
        raise ValueError(f"{name} must sum to 1, got sum {total!r}")
    return arr


def same_length(**arrays: np.ndarray) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError("mismatched lengths: " + ", ".join(f"{k}={n}" for k, n in lengths.items()))
    return next(iter(lengths.values()))


def in_unit_interval(x: float, name: str) -> float:
    x = float(x)
    if not (np.isfinite(x) and 0.0 <= x <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got {x!r}")
    return x


def positive_scalar(x: float, name: str, *, allow_zero: bool = False) -> float:
    x = float(x)
    ok = np.isfinite(x) and (x >= 0 if allow_zero else x > 0)
    if not ok:
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {x!r}")
    return x
