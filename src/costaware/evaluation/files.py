"""Rows of the local files a benchmark ships in: JSON Lines, JSON, parquet and csv, or a folder of them.

Each row keeps where it came from (``file:LINE`` or ``file: row N``), so that a loader's error about a
bad row names the line to fix.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import Any

__all__ = ["SUPPORTED_SUFFIXES", "read_jsonl_objects", "read_located_rows", "read_rows"]

SUPPORTED_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet", ".csv")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a jsonl/json/parquet/csv file, or of every such file in a folder (sorted by name)."""
    return [row for row, _ in read_located_rows(path)]


def read_jsonl_objects(path: str | PathLike[str], limit: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSON Lines file with their 1-based line numbers (blank lines skipped; at most
    ``limit`` objects, the rest of the file unread). A bad line is a ValueError naming ``path:line``."""
    out: list[tuple[int, dict[str, Any]]] = []
    lineno = 0
    with Path(path).open(encoding="utf-8") as fh, _utf8(path, lambda: lineno + 1):
        for lineno, line in enumerate(fh, 1):
            if limit is not None and len(out) == limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            out.append((lineno, row))
    return out


@contextmanager
def _utf8(path: str | PathLike[str], line: Callable[[], int] | None = None) -> Iterator[None]:
    """A binary or non-UTF-8 file is a ValueError naming the file (and the line), not a bare codec error."""
    try:
        yield
    except UnicodeDecodeError as err:
        where = f"{path}:{line()}" if line is not None else str(path)
        raise ValueError(f"{where}: not UTF-8 text (byte {err.object[err.start]:#04x}); is it a binary file?") from None


def read_located_rows(path: str | Path) -> list[tuple[dict[str, Any], str]]:
    """:func:`read_rows` with where each row came from, for error messages: ``file:LINE`` (jsonl, csv;
    1-based) or ``file: row N`` (json, parquet; 1-based)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUPPORTED_SUFFIXES)
        if not files:
            raise ValueError(f"path {str(path)!r} is a folder with no {'/'.join(SUPPORTED_SUFFIXES)} file")
        return [located for f in files for located in read_located_rows(f)]
    if not path.exists():
        raise ValueError(f"path {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return [(row, f"{path}:{lineno}") for lineno, row in read_jsonl_objects(path)]
    if suffix == ".json":
        try:
            with _utf8(path):
                data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
        if isinstance(data, dict):  # {"data": [...]} style, one list of rows inside
            lists = [v for v in data.values() if isinstance(v, list)]
            if len(lists) != 1:
                raise ValueError(f"{path}: a JSON object must hold exactly one list of rows, got keys {list(data)}")
            data = lists[0]
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ValueError(f"{path}: expected a JSON list of objects")
        return [(row, f"{path}: row {i}") for i, row in enumerate(data, 1)]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(row, f"{path}: row {i}") for i, row in enumerate(pq.read_table(path).to_pylist(), 1)]
    if suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as fh, _utf8(path):
            reader = csv.DictReader(fh)
            rows, start = [], 2  # line 1 is the header
            for row in reader:
                rows.append((row, f"{path}:{start}"))
                start = reader.line_num + 1  # a quoted field may span lines
            return rows
    raise ValueError(f"path {str(path)!r} must end in one of {SUPPORTED_SUFFIXES}, got {suffix!r}")
