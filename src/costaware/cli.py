"""The ``costaware`` command: one subcommand per job.

Each job lives in its own module, which defines ``register(subparsers)`` (adds its parser and sets
``func``). Modules are imported only when their job runs, so ``costaware --help`` stays fast and a
job whose optional extra is missing does not break the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
JOBS: dict[str, tuple[str, str]] = {
    "synthetic": (
        "costaware.experiments.synthetic",
        "Reproduce the paper's Figure 2: uniform vs variance vs optimal sampling on least squares.",
    ),
    "reproduce": (
        "costaware.experiments.reproduce",
        "The main job: Cost-Aware GRPO against GRPO on a small local policy, on the CPU, with a report.",
    ),
    "eval": (
        "costaware.evaluation.cli",
        "mean@k accuracy of a checkpoint on AIME, AMC, MATH500 or GSM8K with a real answer verifier.",
    ),
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="costaware",
        description="Cost-aware learning: sample p_i ∝ G_i/√c_i, correct with importance weights, "
        "and reach the same accuracy at a lower total cost.",
    )
    sub = parser.add_subparsers(dest="job", metavar="JOB")
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
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.error(f"unknown job {args.job!r}")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
