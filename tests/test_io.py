"""The one atomic writer (costaware._io): a file or a folder is there whole, or as it was before."""

from __future__ import annotations

import doctest
import os

import pytest

from costaware import _io
from costaware._io import atomic_dir, write_json_atomic, write_text_atomic


def test_a_folder_appears_whole_and_leaves_no_temporary(tmp_path):
    with atomic_dir(tmp_path / "model") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".model.") and tmp.name.endswith(".tmp")
        (tmp / "a.bin").write_bytes(b"1")
        (tmp / "config.json").write_text("{}")
        assert not (tmp_path / "model").exists()  # nothing under the final name while it is written
    assert sorted(os.listdir(tmp_path / "model")) == ["a.bin", "config.json"]
    assert os.listdir(tmp_path) == ["model"]


def test_a_folder_write_that_fails_leaves_nothing_and_the_old_folder_untouched(tmp_path):
    with pytest.raises(RuntimeError, match="interrupted"), atomic_dir(tmp_path / "model") as tmp:
        (tmp / "a.bin").write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "kept").write_text("x")
    with pytest.raises(OSError), atomic_dir(tmp_path / "old") as tmp:  # a non-empty folder is never replaced
        (tmp / "new").write_text("y")
    assert os.listdir(tmp_path / "old") == ["kept"] and os.listdir(tmp_path) == ["old"]


def test_a_leftover_of_a_killed_write_is_cleared_first(tmp_path):
    stale = tmp_path / f".model.{os.getpid()}.tmp"
    stale.mkdir()
    (stale / "stale.bin").write_bytes(b"0")
    with atomic_dir(tmp_path / "model") as tmp:
        assert tmp == stale and os.listdir(tmp) == []
    assert os.listdir(tmp_path) == ["model"]


def test_a_file_write_that_fails_keeps_the_previous_file(tmp_path, monkeypatch):
    path = write_json_atomic(tmp_path / "state.json", {"a": 1})

    def crash(fd):
        raise OSError("disk full")

    monkeypatch.setattr(_io.os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(path, "{")
    assert path.read_text() == '{"a": 1}' and os.listdir(tmp_path) == ["state.json"]


def test_the_module_doctests_pass():
    assert doctest.testmod(_io).failed == 0
