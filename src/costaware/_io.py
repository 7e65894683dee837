"""Atomic writes: a reader (or a resumed run) sees the old file or the new one, never half of one.

The text goes to a temporary file in the target's folder (``os.replace`` is atomic only within one file
system), is flushed and fsynced, then replaces the target. A failed write removes its temporary file and
leaves any previous target as it was. A folder (a saved model) is written the same way by :func:`atomic_dir`.
Temporary names are ``.<name>.<pid>.tmp``: hidden, and one per process.

These few lines are written here rather than taken from a library: the one that did this (``atomicwrites``)
is no longer maintained, and none covers folders.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_dir", "write_bytes_atomic", "write_json_atomic", "write_text_atomic"]


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():  # the write failed: no litter, the previous file untouched
            tmp.unlink()
    return path


def write_json_atomic(path: str | os.PathLike[str], obj: Any, **dump_kwargs: Any) -> Path:
    """Write ``json.dumps(obj, **dump_kwargs)`` to ``path`` atomically; returns the path.

    The object is serialised before any file is opened, so an object JSON cannot hold fails with nothing
    written.
    """
    return write_text_atomic(path, json.dumps(obj, **dump_kwargs))


@contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A folder written whole or not at all: yields an empty temporary folder beside ``path``, which replaces
    ``path`` when the block ends without an exception (``path`` must not be a non-empty folder then); an
    exception removes the temporary folder and leaves ``path`` as it was.

    >>> import tempfile
    >>> with atomic_dir(Path(tempfile.mkdtemp()) / "model") as tmp:
    ...     _ = (tmp / "weights.txt").write_text("1 2 3")
    >>> tmp.exists(), (tmp.parent / "model" / "weights.txt").read_text()
    (False, '1 2 3')
    """
    path = Path(path)
    tmp = _temporary(path)
    shutil.rmtree(tmp, ignore_errors=True)  # a leftover of this process id from a killed run
    tmp.mkdir(parents=True)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
