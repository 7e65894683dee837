"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never half of one.

The text goes to a temporary file in the target's folder (``os.replace`` is atomic only within one file
system), is flushed and fsynced, then replaces the target. A failed write removes its temporary file and
leaves any previous target as it was. Temporary names are ``.<name>.<pid>.tmp``: hidden, and one per process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["write_bytes_atomic", "write_json_atomic", "write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
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
