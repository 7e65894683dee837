"""What a `costaware reproduce` job prints: each warning condition once, with the runs that raised it,
and no progress bar or cross-process lock in the workers (``experiments.quiet``)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from costaware.experiments.quiet import Caught, WarningLog, run_recording

ROOT = Path(__file__).resolve().parents[1]


def _run(arm: str, seed: int) -> str:
    for _ in range(2):  # one place, raised twice in a run: counted once for the run
        warnings.warn(f"{arm} seed {seed}: stopped at the round cap", RuntimeWarning, stacklevel=1)
    if arm == "p_star":
        warnings.warn("every pool skipped", UserWarning, stacklevel=1)
    return f"{arm}-s{seed}"


def test_each_condition_once_with_the_runs_that_raised_it(capsys):
    log = WarningLog()
    for arm, seed in [("none", 0), ("p_star", 0), ("p_star", 1)]:
        name, caught = run_recording(_run, arm, seed)
        assert name == f"{arm}-s{seed}" and all(isinstance(c, Caught) for c in caught)
        log.add(name, caught)
    assert capsys.readouterr().err == ""  # recorded, not printed
    lines = log.lines(finished=4)
    assert lines[0].endswith("(2 conditions):") and len(lines) == 3  # not 8: one per place that warned
    assert (
        lines[1]
        == "  RuntimeWarning: none seed 0: stopped at the round cap [in 3 of 4 runs: none-s0, p_star-s0, p_star-s1]"
    )
    assert lines[2] == "  UserWarning: every pool skipped [in 2 of 4 runs: p_star-s0, p_star-s1]"
    assert WarningLog().lines() == []


def test_workers_draw_no_bar_and_create_no_cross_process_lock():
    """tqdm's default lock is a named semaphore; a worker stopped by Ctrl-C leaves it to the resource
    tracker, which then warns of a leak at exit. After quiet_libraries a bar creates none."""
    pytest.importorskip("transformers")
    code = (
        "import sys; from tqdm import tqdm; from tqdm.std import TqdmDefaultWriteLock as L\n"
        "if sys.argv[1] == 'quiet':\n"
        "    from costaware.experiments.quiet import quiet_libraries; quiet_libraries()\n"
        "list(tqdm(range(3), disable=False, file=sys.stdout))\n"
        "from transformers.utils import logging as hf\n"
        "print('mp_lock', getattr(L, 'mp_lock', None) is not None, 'hf_bars', hf.is_progress_bar_enabled())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = {
        mode: subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, env=env, check=True
        ).stdout
        for mode in ("quiet", "stock")
    }
    assert "mp_lock False hf_bars False" in out["quiet"]
    assert "mp_lock True hf_bars True" in out["stock"]  # the control: what the workers did before
