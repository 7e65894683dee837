"""The ``costaware`` command: one subcommand per job.

Each job lives in its own module, which defines ``register(subparsers)`` (adds its parser and sets
``func``). Modules are imported only when their job runs, so ``costaware --help`` stays fast and a
job whose optional extra is missing does not break the others.

Errors. A bad argument, or a ``ValueError`` (or a missing file) raised while a job runs, prints one line
``costaware <job>: error: <message>`` on stderr and exits with status 2, without a traceback;
``--debug`` (anywhere on the command line) lets the exception through with its traceback. Ctrl-C
prints ``costaware <job>: interrupted`` and exits with status 130.

>>> main(["synthetic", "--quick", "--trials", "-1"])  # doctest: +SKIP
costaware synthetic: error: --trials must be a positive integer, got -1
2
"""

from __future__ import annotations

import argparse
import importlib
import sys

from costaware._command import OneLineParser, run_command, split_debug

# subcommand -> (module, one-line help)
JOBS: dict[str, tuple[str, str]] = {
    "synthetic": (
        "costaware.report.synthetic",
        "Reproduce the paper's Figure 2: uniform vs variance vs optimal sampling on least squares.",
    ),
    "reproduce": (
        "costaware.jobs",
        "The main job: Cost-Aware GRPO against GRPO on a small local policy, on the CPU, with a report.",
    ),
    "rollouts": (
        "costaware.rollouts.cli",
        "Prompt-stage analysis on per-prompt logs: which prompts are worth generating.",
    ),
    "eval": (
        "costaware.evaluation.cli",
        "mean@k accuracy of a checkpoint on AIME, AMC, MATH500 or GSM8K with a real answer verifier.",
    ),
}

# Per job, "module:Class" of its own user-facing errors (imported only when that job runs).
JOB_ERRORS: dict[str, tuple[str, ...]] = {
    "eval": ("costaware.evaluation.data:DatasetUnavailableError",),  # no --data and no network
}


def _job_errors(job: str) -> tuple[type[BaseException], ...]:
    extra = []
    for ref in JOB_ERRORS.get(job, ()):
        module, name = ref.split(":")
        extra.append(getattr(importlib.import_module(module), name))
    return tuple(extra)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="costaware",
        description="Cost-aware learning: sample p_i ∝ G_i/√c_i, correct with importance weights, "
        "and reach the same accuracy at a lower total cost.",
        epilog="--debug (anywhere): show the traceback of an error instead of one line.",
    )
    sub = parser.add_subparsers(dest="job", metavar="JOB", parser_class=OneLineParser)
    sub.required = True
    wanted = None
    if argv:
        wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_) in JOBS.items():
        if name == wanted:
            importlib.import_module(module).register(sub)
        else:  # placeholder so that --help lists every job without importing it
            sub.add_parser(name, help=help_, description=help_, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv, debug = split_debug(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.error(f"unknown job {args.job!r}")
    return run_command(f"costaware {args.job}", lambda: args.func(args), debug=debug, errors=_job_errors(args.job))


if __name__ == "__main__":
    sys.exit(main())
