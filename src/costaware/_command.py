"""One-line errors for the command line: ``costaware`` and every ``python -m costaware...`` entry point.

A bad argument, or a ``ValueError`` (or a missing file) raised while a command runs, prints one line
``<prog>: error: <message>`` on stderr and exits with status 2, without a traceback; ``--debug`` lets the
exception through with its traceback. Ctrl-C prints ``<prog>: interrupted`` and exits with status 130.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "USER_ERRORS", "OneLineParser", "message", "run_command", "split_debug"]

# Errors that describe the user's input (a bad value, a path that is not there): one line, exit 2.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    PermissionError,
)
EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


class OneLineParser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the usage block as well)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def message(exc: BaseException) -> str:
    """``exc`` as one line, with the file an ``OSError`` names when its text does not."""
    text = " ".join(str(exc).split()) or type(exc).__name__  # one line, whatever the exception held
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in text:
        text += f": {exc.filename}"
    return text


def split_debug(argv: Sequence[str] | None) -> tuple[list[str], bool]:
    """(the arguments without ``--debug``, whether it was given), from ``sys.argv[1:]`` when ``argv`` is None."""
    args = list(sys.argv[1:] if argv is None else argv)
    return [a for a in args if a != "--debug"], "--debug" in args


def run_command(
    prog: str, func: Callable[[], int | None], *, debug: bool = False, errors: tuple[type[BaseException], ...] = ()
) -> int:
    """``func()``'s exit status; a user error (``USER_ERRORS`` + ``errors``) is one line on stderr and status 2,
    Ctrl-C is status 130 (``debug``: both raise with their traceback)."""
    try:
        return int(func() or 0)
    except USER_ERRORS + errors as exc:
        if debug:
            raise
        print(f"{prog}: error: {message(exc)}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
