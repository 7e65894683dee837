"""A job's finished records kept where a new machine finds them: ``costaware reproduce --archive DIR``.

A long profile outlives a machine. Its ``--out`` folder is scratch; the archive holds, compressed, what a
rerun needs to resume rather than retrain: each finished run's record (``runs/<name>.json.gz``) and per-prompt
log (``runs/<name>.prompts.jsonl.gz``), and each task's SFT checkpoint (``sft-*/``, so that a resumed job
trains its remaining runs from the very weights the finished ones started from, whatever the new
processor's numerics would give a fresh warm-up). Commit the folder; a rerun with the same ``--archive``
first restores into ``--out`` what is missing there, then trains only the runs the archive lacks.

Files are gzip-compressed with a zero timestamp, so storing a record twice writes the same bytes.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from costaware._io import write_bytes_atomic

__all__ = ["restore", "store_run", "store_sft"]

_RUN_SUFFIXES = (".json", ".prompts.jsonl")


def _gzip_to(src: Path, dest: Path) -> None:
    data = gzip.compress(src.read_bytes(), compresslevel=9, mtime=0)
    if not (dest.exists() and dest.read_bytes() == data):
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(dest, data)


def store_run(archive: Path, run_file: Path) -> None:
    """Compress a finished run's record, and its per-prompt log when there is one, into ``archive/runs``."""
    for suffix in _RUN_SUFFIXES:
        src = run_file.with_suffix(suffix)
        if src.exists():
            _gzip_to(src, archive / "runs" / (src.name + ".gz"))


def store_sft(archive: Path, sft_dir: Path) -> None:
    """Copy a task's SFT checkpoint (every file of its folder) into ``archive/<folder name>``."""
    dest = archive / sft_dir.name
    for src in sorted(p for p in sft_dir.iterdir() if p.is_file()):
        if not ((dest / src.name).exists() and (dest / src.name).read_bytes() == src.read_bytes()):
            dest.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(dest / src.name, src.read_bytes())


def restore(archive: Path, out: Path) -> tuple[int, int]:
    """Put into ``out`` every archived run and SFT checkpoint that ``out`` lacks; returns (runs, checkpoints).

    A file already in ``out`` is left as it is (a finished run there is the same run).
    """
    if not archive.exists():
        return 0, 0
    if not archive.is_dir():
        raise ValueError(f"--archive must be a folder, got the file {str(archive)!r}")
    runs = 0
    for src in sorted((archive / "runs").glob("*.gz")):
        dest = out / "runs" / src.name[: -len(".gz")]
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(dest, gzip.decompress(src.read_bytes()))
            runs += dest.suffix == ".json" and not dest.name.endswith(".prompts.jsonl")
    checkpoints = 0
    for folder in sorted(p for p in archive.glob("sft-*") if p.is_dir()):
        if not (out / folder.name / "sft.json").exists():
            tmp = out / f".{folder.name}.restore"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(folder, tmp)
            if (out / folder.name).exists():
                shutil.rmtree(out / folder.name)
            tmp.rename(out / folder.name)  # sft.json last in: a folder without it is a partial warm-up
            checkpoints += 1
    return runs, checkpoints
