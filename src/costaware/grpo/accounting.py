"""Token and row accounting shared by every engine: one set of counter names, one state file.

An engine adapter turns each pool's plan into a :class:`StepCounts` (already summed over ranks and
multiplied by the PPO epochs that re-run the plan), adds it to its :class:`Counters`, and logs
:meth:`Counters.metrics`. Cumulative values are logged under ``cost_aware/total/*`` and per-pool
values under ``cost_aware/step/*``. An engine that averages metrics over a window (verl's
``MetricsAggregator``, TRL's per-log mean) must log the totals as a single value per window, never
average them: see each adapter.

>>> c = Counters()
>>> c.add(StepCounts(tokens=300, tokens_plain=500, tokens_nonzero=400, rows_drawn=4, rows_fed=3,
...                  rows_unique=3))
>>> c.add(StepCounts(tokens_plain=200, tokens_nonzero=0, skipped=1))
>>> c.tokens, c.generations, c.skipped
(300.0, 2.0, 1.0)
>>> Counters.from_dict(c.to_dict()) == c
True
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from costaware._checks import positive_scalar, real_scalar
from costaware._io import write_json_atomic

__all__ = ["STATE_FILE", "METRIC_PREFIX", "StepCounts", "Counters", "save_counters", "load_counters"]

STATE_FILE = "cost_aware_state.json"
METRIC_PREFIX = "cost_aware"


@dataclass(frozen=True)
class StepCounts:
    """What one pool (generation batch) cost in policy optimisation, summed over every rank.

    Attributes:
        tokens: prompt + completion tokens fed to forward/backward (the paper's x-axis), counted once
            per PPO epoch that re-runs them.
        tokens_plain: what plain GRPO would have fed on the same rollouts (same epochs).
        tokens_nonzero: what dropping the zero-advantage rows would have fed (same epochs).
        rows_drawn: draws from p (a merged row counts its multiplicity).
        rows_fed: rows run through forward/backward (padding rows excluded).
        rows_unique: distinct pool rows used by the plan.
        rows_padding: zero-factor rows fed only so that every rank runs the same shapes.
        tokens_padding: prompt + completion tokens of those padding rows (compute spent on shapes,
            not counted in ``tokens``).
        skipped: 1 when the pool's update was skipped (every advantage zero), else 0.
        po_seconds: wall time of forward, backward and optimiser steps for this pool.
    """

    tokens: float = 0.0
    tokens_plain: float = 0.0
    tokens_nonzero: float = 0.0
    rows_drawn: float = 0.0
    rows_fed: float = 0.0
    rows_unique: float = 0.0
    rows_padding: float = 0.0
    skipped: float = 0.0
    po_seconds: float = 0.0
    tokens_padding: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            positive_scalar(getattr(self, f.name), f"StepCounts.{f.name}", allow_zero=True, strict=True)


@dataclass
class Counters:
    """Cumulative counters of a training run; saved beside every checkpoint (``STATE_FILE``)."""

    tokens: float = 0.0
    tokens_plain: float = 0.0
    tokens_nonzero: float = 0.0
    rows_drawn: float = 0.0
    rows_fed: float = 0.0
    rows_unique: float = 0.0
    rows_padding: float = 0.0
    skipped: float = 0.0
    po_seconds: float = 0.0
    tokens_padding: float = 0.0
    generations: float = 0.0  # pools seen (skipped ones included)
    consecutive_skipped: float = 0.0  # pools skipped in a row, for the trainer's warning
    zvf_refills: float = 0.0  # refill batches ZVF drew (to fast-forward its prompt stream on resume)

    def add(self, step: StepCounts) -> None:
        """Add one pool's counts."""
        for f in fields(step):
            setattr(self, f.name, getattr(self, f.name) + float(getattr(step, f.name)))
        self.generations += 1
        self.consecutive_skipped = self.consecutive_skipped + 1 if step.skipped else 0.0

    def metrics(self, step: StepCounts | None = None) -> dict[str, float]:
        """``cost_aware/total/<name>`` for every counter, plus ``cost_aware/step/<name>`` for ``step``."""
        out = {f"{METRIC_PREFIX}/total/{k}": float(v) for k, v in self.to_dict().items()}
        if step is not None:
            out.update({f"{METRIC_PREFIX}/step/{k}": float(v) for k, v in asdict(step).items()})
        return out

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Counters:
        """Counters from a saved dict; unknown keys (an older or newer state file) are ignored."""
        known = {f.name for f in fields(cls)}
        out = cls()
        for k, v in values.items():
            if k in known:
                setattr(out, k, real_scalar(v, f"counter {k!r} in a saved state", strict=True))
        return out


def save_counters(counters: Counters, folder: str | os.PathLike[str]) -> str:
    """Write ``folder/STATE_FILE`` atomically (a crash never leaves half a file); returns the path."""
    path = os.path.join(os.fspath(folder), STATE_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, counters.to_dict())
    return path


def load_counters(folder: str | os.PathLike[str]) -> Counters | None:
    """The counters saved in ``folder``, or None when it holds no state file."""
    path = os.path.join(os.fspath(folder), STATE_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        try:
            values = json.load(handle)
        except json.JSONDecodeError as exc:
            raise ValueError(f"state file {path!r} is not valid JSON: {exc}") from None
    if not isinstance(values, dict):
        raise ValueError(f"state file {path!r} must hold a JSON object, got {type(values).__name__}")
    try:
        return Counters.from_dict(values)
    except ValueError as exc:
        raise ValueError(f"state file {path!r}: {exc}") from None
