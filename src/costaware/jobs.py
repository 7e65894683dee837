"""The commands whose parts lie in two layers: ``costaware reproduce`` runs the experiments
(:mod:`costaware.experiments.runner`) and writes their report (:func:`costaware.report.grpo.write_report`).
The experiments import no report, so the command that joins them sits here, above both, beside the CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costaware.experiments import reproduce as reproduce_command
from costaware.experiments import runner

if TYPE_CHECKING:
    from costaware.experiments.records import RunResult

__all__ = ["register", "reproduce", "write_reproduce_report"]


def write_reproduce_report(results: Sequence[RunResult], out: Path, **options: Any) -> dict[str, Path]:
    """:func:`costaware.report.grpo.write_report`, imported when the runs are done: the report imports torch,
    which a refused argument or ``--show-profile`` should not wait for."""
    from costaware.report import grpo

    return grpo.write_report(results, out, **options)


def reproduce(args: argparse.Namespace) -> int:
    """``costaware reproduce``: the runs, then their report; the report shows the command line as typed."""
    command = (
        "costaware reproduce " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["reproduce"] else "costaware reproduce"
    )
    return runner.reproduce(args, command=command, write_report=write_reproduce_report)


def register(subparsers: Any) -> None:
    reproduce_command.register(subparsers).set_defaults(func=reproduce)
