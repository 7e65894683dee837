"""Counter-based per-trial random streams for the runner: splitmix64 seeding, xorshift64* draws.

Each trial has its own xorshift64* stream seeded by splitmix64(seed, trial), so a trial's path does
not depend on the thread count, on chunking, or on which other trials run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from costaware._checks import integer
from costaware.alias import alias_draw_single, build_alias
from costaware.sgd.schedules import MAX_STEPS

__all__ = ["runner_indices", "trial_state", "next_uniform"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL = np.uint64(2685821657736338717)


@njit(inline="always")
def _splitmix64(z: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(inline="always")
def trial_state(seed: np.uint64, trial: np.uint64) -> np.uint64:  # pragma: no cover
    s = _splitmix64(_splitmix64(seed) ^ (trial * _GOLDEN))
    if s == np.uint64(0):  # xorshift's fixed point
        s = _GOLDEN
    return s


@njit(inline="always")
def next_uniform(s: np.uint64) -> tuple[np.uint64, float]:  # pragma: no cover
    """xorshift64* step; returns (new state, uniform in [0, 1) from the top 53 bits)."""
    s ^= s >> np.uint64(12)
    s ^= s << np.uint64(25)
    s ^= s >> np.uint64(27)
    return s, float((s * _MUL) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def _indices_kernel(prob, alias, steps, seed, trial):  # pragma: no cover - compiled
    s = trial_state(np.uint64(seed), np.uint64(trial))
    out = np.empty(steps, dtype=np.int64)
    for t in range(steps):
        s, u = next_uniform(s)
        out[t] = alias_draw_single(prob, alias, u)
    return out


def runner_indices(p: Any, steps: int, seed: int, trial: int) -> np.ndarray:
    """The exact draw sequence :func:`run_trials` uses for ``trial`` (replay it with ``cost_aware_sgd``)."""
    prob, alias = build_alias(p)
    steps = integer(steps, "steps", minimum=1, maximum=MAX_STEPS)
    seed, trial = integer(seed, "seed", minimum=0), integer(trial, "trial", minimum=0)
    return _indices_kernel(prob, alias, steps, np.uint64(seed), np.uint64(trial))
