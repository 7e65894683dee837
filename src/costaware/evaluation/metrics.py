"""Accuracy metrics over k samples per problem: mean@k (the paper's pass@1 / mean@32) and pass@k.

``correct`` is a boolean matrix of shape (problems, samples). mean@k averages, over problems, the
fraction of a problem's k samples that are correct. pass@k uses the unbiased estimator of Chen et
al. (2021), 1 − C(n−c, k)/C(n, k) for n samples of which c are correct, so pass@1 equals mean@k.

>>> import numpy as np
>>> correct = np.array([[1, 0, 0, 0], [1, 1, 1, 1]], dtype=bool)
>>> mean_at_k(correct)
0.625
>>> pass_at_k(np.array([4, 4]), correct.sum(1), 2).round(4).tolist()
[0.5, 1.0]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from scipy.special import gammaln

from costaware._checks import as_array, check_container, integer


def as_correctness(correct: Any) -> np.ndarray:
    """``correct`` as a non-empty 2-D boolean array (problems × samples); 0/1 numbers are accepted."""
    check_container(correct, "correct")
    arr = np.asarray(correct)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"correct must be a non-empty 2-D array (problems x samples), got shape {arr.shape}")
    if arr.dtype == bool:
        return arr
    if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isin(arr, (0, 1))):
        bad = arr[~np.isin(arr, (0, 1))] if np.issubdtype(arr.dtype, np.number) else arr.ravel()
        raise ValueError(f"correct must hold only 0/1 or booleans, got e.g. {bad.ravel()[:3].tolist()}")
    return arr.astype(bool)


def per_problem_accuracy(correct: Any) -> np.ndarray:
    """Fraction of correct samples for each problem (shape: problems)."""
    return as_correctness(correct).mean(axis=1)


def mean_at_k(correct: Any) -> float:
    """mean@k: average over problems of (correct samples / k)."""
    return float(per_problem_accuracy(correct).mean())


def pass_at_k(num_samples: Any, num_correct: Any, k: int) -> np.ndarray:
    """Unbiased pass@k per problem: 1 − C(n−c, k) / C(n, k) (Chen et al. 2021), vectorised.

    The ratio is computed in log space with ``gammaln``; it is exactly 0 (pass@k = 1) when n − c < k.
    """
    check_container(num_samples, "num_samples")
    check_container(num_correct, "num_correct")
    n = np.asarray(num_samples)
    c = np.asarray(num_correct)
    if n.shape != c.shape or n.ndim != 1 or n.size == 0:
        raise ValueError(
            f"num_samples and num_correct must be non-empty 1-D arrays of one shape, got {n.shape} and {c.shape}"
        )
    for name, arr in (("num_samples", n), ("num_correct", c)):
        if not np.issubdtype(arr.dtype, np.integer):
            if (
                not np.issubdtype(arr.dtype, np.floating)  # complex, bool, strings
                or not np.all(np.isfinite(arr))
                or np.any(arr != np.round(arr))
                or np.any(np.abs(arr) > 2.0**53)  # beyond exact float integers (and int64)
            ):
                raise ValueError(f"{name} must hold integers, got {arr[:5].tolist()}")
    n = n.astype(np.int64)
    c = c.astype(np.int64)
    k = integer(k, "k", minimum=1)
    if np.any(c < 0) or np.any(c > n):
        raise ValueError(f"num_correct must lie in [0, num_samples], got {c.tolist()[:10]} for {n.tolist()[:10]}")
    if np.any(n < k):
        raise ValueError(f"k={k} exceeds the number of samples {int(n.min())} of some problem")
    wrong = n - c
    feasible = wrong >= k  # otherwise every k-subset holds a correct sample
    w = np.where(feasible, wrong, k)  # placeholder keeps gammaln's arguments positive
    # grouped so that c = 0 gives exactly 0 (each bracket cancels), not a -1e-15 residue
    log_ratio = (gammaln(w + 1) - gammaln(n + 1)) + (gammaln(n - k + 1) - gammaln(w - k + 1))
    return np.where(feasible, np.clip(1.0 - np.exp(log_ratio), 0.0, 1.0), 1.0)


def standard_error(values: Any) -> float:
    """Standard error of the mean across problems: sample std (ddof=1) / sqrt(count); needs ≥ 2 values."""
    v = as_array(values, "values")
    if v.ndim != 1 or v.size < 2:
        raise ValueError(f"values must be 1-D with at least 2 entries for a standard error, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"values must be finite, got {v[~np.isfinite(v)][:3].tolist()}")
    return float(v.std(ddof=1) / np.sqrt(v.size))


def summarize_correctness(correct: Any, pass_ks: Iterable[int] = (1,)) -> dict[str, Any]:
    """mean@k, its standard error across problems, and pass@k for each k in ``pass_ks`` (≤ samples).

    >>> summarize_correctness([[1, 0], [1, 1]], pass_ks=(1, 2))["pass_at_k"]
    {'1': 0.75, '2': 1.0}
    """
    arr = as_correctness(correct)
    n_problems, k = arr.shape
    acc = arr.mean(axis=1)
    n = np.full(n_problems, k)
    c = arr.sum(axis=1)
    ks = sorted({integer(x, "pass_ks", minimum=1) for x in pass_ks})
    too_big = [x for x in ks if x > k]
    if too_big:
        raise ValueError(f"pass_ks {too_big} exceed the {k} samples per problem")
    return {
        "n_problems": int(n_problems),
        "k": int(k),
        "mean_at_k": float(acc.mean()),
        "mean_at_k_stderr": standard_error(acc) if n_problems >= 2 else None,
        "pass_at_k": {str(x): float(pass_at_k(n, c, x).mean()) for x in ks},
        "solved_any": float((c > 0).mean()),
    }
