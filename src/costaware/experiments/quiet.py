"""What a `costaware reproduce` job prints: each warning condition once, no per-load progress bars, and
no semaphore left behind by a worker that was stopped.

- Each worker records the warnings of its run (:func:`run_recording`) instead of printing them, and
  the parent gathers them in a :class:`WarningLog`: one line per condition (the place that warned),
  with how many runs raised it. Printed as they came, a quick job showed ~30 warnings, three per arm,
  each followed by the echo of a library source line.
- :func:`quiet_libraries` turns off transformers' per-load and per-save progress bars and gives tqdm a
  thread lock. tqdm otherwise creates a multiprocessing lock, a named semaphore registered with the
  resource tracker, in the first process that draws a bar; a worker stopped on Ctrl-C never
  unregisters it, and the tracker then warned of a "leaked semaphore" at exit.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Caught", "WarningLog", "run_recording", "quiet_libraries"]

T = TypeVar("T")


@dataclass(frozen=True)
class Caught:
    """One warning, as it crosses from a worker to the parent (plain fields: it is pickled)."""

    category: str
    filename: str
    lineno: int
    message: str

    @property
    def condition(self) -> tuple[str, str, int]:
        # The place that warned: a run-specific message ("p_star seed 0: stopped at the round cap with
        # 96 of 500 PO tokens") is the same condition in every run.
        return self.category, self.filename, self.lineno


def run_recording(fn: Callable[..., T], *args: Any) -> tuple[T, tuple[Caught, ...]]:
    """``fn(*args)`` with every warning it raises recorded, not printed; the filters in force still
    decide which are raised (a library's DeprecationWarning stays ignored)."""
    with warnings.catch_warnings(record=True) as caught:
        out = fn(*args)
    return out, tuple(Caught(w.category.__name__, w.filename, w.lineno, str(w.message)) for w in caught)


class WarningLog:
    """The warnings of a job's runs, by condition, in the order they were first seen."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str, int], Caught] = {}
        self.runs: dict[tuple[str, str, int], list[str]] = {}

    def add(self, run: str, caught: tuple[Caught, ...] | list[Caught]) -> None:
        for c in caught:
            self.first.setdefault(c.condition, c)
            seen = self.runs.setdefault(c.condition, [])
            if run not in seen:  # a condition counts once per run, however often the run raised it
                seen.append(run)

    def lines(self, finished: int | None = None) -> list[str]:
        """One line per condition: its first message, and the runs that raised it."""
        if not self.first:
            return []
        of = "" if finished is None else f" of {finished}"
        out = [
            f"[costaware] warnings from the runs, each condition once ({len(self.first)} condition"
            f"{'s' if len(self.first) != 1 else ''}):"
        ]
        for cond, c in self.first.items():
            runs = self.runs[cond]
            names = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
            out.append(f"  {c.category}: {c.message} [in {len(runs)}{of} run{'s' if len(runs) != 1 else ''}: {names}]")
        return out


def quiet_libraries() -> None:
    """No per-load progress bars, and tqdm without a multiprocessing lock (see the module's doc)."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())  # the bars of one process need no cross-process lock
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # the 'trl' extra is not installed: nothing loads weights
        return
    hf_logging.disable_progress_bar()
