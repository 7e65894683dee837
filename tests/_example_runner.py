"""Run an example script as ``python EXAMPLE ARGS`` would, and exit non-zero if the library warned.

    python tests/_example_runner.py [--flat-reward NAME] EXAMPLE [ARGS...]

Every ``warnings.warn`` called from a ``costaware`` module, and every record of WARNING or above on the
``costaware`` loggers, is printed as a ``costaware warned:`` line; the run then exits with status 3. The
caller's frame decides (not the warning's ``stacklevel``), so a warning that points at the user's line
still counts. ``--flat-reward NAME`` replaces the example's reward function ``NAME`` by one that gives
every completion 0, a run with no learning signal. Works under ``torchrun`` too (every process runs it).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

FIRED: list[str] = []
_WARN = warnings.warn


def _warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kw: Any) -> None:
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller.startswith("costaware"):
        FIRED.append(f"{caller}: {message}")
    _WARN(message, category, stacklevel + 1, source, **kw)


class _Record(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        FIRED.append(f"{record.name}: {record.getMessage()}")


def flat_reward(completions: list[Any], **_: Any) -> list[float]:
    """0 for every completion: every group's rewards are equal, every advantage is 0."""
    return [0.0] * len(completions)


def main() -> int:
    argv = sys.argv[1:]
    flat = None
    if argv[:1] == ["--flat-reward"]:
        flat, argv = argv[1], argv[2:]
    path = Path(argv[0]).resolve()
    sys.argv = [str(path), *argv[1:]]
    sys.path.insert(0, str(path.parent))
    warnings.warn = _warn  # type: ignore[assignment]
    logging.getLogger("costaware").addHandler(_Record(logging.WARNING))
    spec = importlib.util.spec_from_file_location("example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if flat is not None:
        assert callable(getattr(module, flat, None)), f"{path.name} has no reward function {flat!r}"
        setattr(module, flat, flat_reward)
    try:
        module.main()
    finally:
        for line in FIRED:
            print(f"costaware warned: {line}", file=sys.stderr)
    return 3 if FIRED else 0


if __name__ == "__main__":
    sys.exit(main())
