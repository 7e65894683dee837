"""`costaware reproduce --archive`: finished runs and SFT checkpoints survive a new machine, byte for byte."""

from __future__ import annotations

import argparse
import gzip

import pytest

from costaware.experiments import archive


def _job(out):
    runs = out / "runs"
    runs.mkdir(parents=True)
    (runs / "sort-headline-grpo-none-s0-0123456789.json").write_text('{"a": 1}')
    (runs / "sort-headline-grpo-none-s0-0123456789.prompts.jsonl").write_text('{"round": 0}\n')
    sft = out / "sft-sort-abc"
    sft.mkdir()
    (sft / "model.safetensors").write_bytes(b"\x00\x01weights")
    (sft / "sft.json").write_text("{}")
    return runs / "sort-headline-grpo-none-s0-0123456789.json", sft


def test_store_then_restore_gives_the_same_files(tmp_path):
    run, sft = _job(tmp_path / "out")
    keep = tmp_path / "archive"
    archive.store_run(keep, run)
    archive.store_sft(keep, sft)
    stored = {p.name: p.read_bytes() for p in keep.rglob("*") if p.is_file()}
    archive.store_run(keep, run)  # storing twice writes the same bytes (no timestamp in the gzip header)
    assert {p.name: p.read_bytes() for p in keep.rglob("*") if p.is_file()} == stored
    assert gzip.decompress((keep / "runs" / (run.name + ".gz")).read_bytes()) == run.read_bytes()

    fresh = tmp_path / "fresh"
    assert archive.restore(keep, fresh) == (1, 1)
    for src in (run, run.with_suffix(".prompts.jsonl"), sft / "model.safetensors", sft / "sft.json"):
        assert (fresh / src.relative_to(tmp_path / "out")).read_bytes() == src.read_bytes()
    assert archive.restore(keep, fresh) == (0, 0)  # what is there is left alone


def test_restore_from_a_missing_archive_is_nothing_and_from_a_file_an_error(tmp_path):
    assert archive.restore(tmp_path / "none", tmp_path / "out") == (0, 0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="--archive must be a folder"):
        archive.restore(tmp_path / "file", tmp_path / "out")


def test_reproduce_refuses_an_archive_that_is_a_file_before_any_work(tmp_path):
    from costaware.experiments import reproduce
    from costaware.experiments.runner import resolve

    parser = argparse.ArgumentParser()
    reproduce.register(parser.add_subparsers())
    (tmp_path / "file").write_text("x")
    args = parser.parse_args(
        ["reproduce", "--quick", "--out", str(tmp_path / "o"), "--archive", str(tmp_path / "file")]
    )
    with pytest.raises(ValueError, match="--archive must be a folder"):
        resolve(args)
    assert not (tmp_path / "o").exists()
