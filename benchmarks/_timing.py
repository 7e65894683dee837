"""The one timing helper every benchmark uses: the median of repeated wall-clock runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int = 31, *, warmup: bool = True) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs (after one warm-up run: compiles, caches)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
