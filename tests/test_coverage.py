"""How often an n-seed job's CI holds the settled record's estimate: the subsampling on hand-made runs, the
command's errors, and the recorded table the evidence page quotes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import make_runs

from costaware.report import coverage, settled

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "evidence" / "settle" / "coverage.json"


def _job(noise: float, seeds=range(8)):
    runs = []
    for method, po in (("none", 5000.0), ("nonzero", 3500.0), ("p_star", 3000.0)):
        runs += make_runs(method, po_per_round=po, task="sort", seeds=seeds, noise=noise)
    return runs


def test_seeds_that_agree_give_points_that_always_hold_the_record():
    rows = coverage.coverage_rows(_job(noise=0.0), sizes=(3, 8), draws=5, n_boot=50)
    assert {r.claim for r in rows} == {c for c, _, _ in coverage.COVERAGE_CLAIMS}
    assert all(r.coverage == 1.0 and r.median_half_width == pytest.approx(0.0, abs=1e-12) for r in rows)


def test_the_whole_record_as_one_job_and_a_smaller_job_with_noise():
    """At every seed the CI is the record's own (it holds its estimate); a 3-seed job is wider."""
    rows = coverage.coverage_rows(_job(noise=0.02), sizes=(3, 8), draws=20, n_boot=200)
    by = {(r.claim, r.seeds): r for r in rows}
    for claim, _, _ in coverage.COVERAGE_CLAIMS:
        assert by[(claim, 8)].coverage == 1.0
        assert by[(claim, 3)].median_half_width > by[(claim, 8)].median_half_width


def test_a_size_above_the_records_seeds_is_refused_in_one_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    for r in _job(noise=0.0, seeds=range(3)):
        r.save(runs / f"{r.id.arm.key}-s{r.id.seed}.json")
    assert coverage.main([str(runs), "--sizes", "5", "--draws", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sizes must lie in 2..3 (the record's seeds), got 5" in err
    assert coverage.main([str(tmp_path / "nope")]) == 2


def test_the_evidence_page_quotes_the_recorded_coverage():
    block = settled.replace_block  # the same block writer as the settled tables
    page = (ROOT / "docs" / "evidence.md").read_text()
    i = page.index(coverage.BLOCK_START) + len(coverage.BLOCK_START)
    assert page[i : page.index(coverage.BLOCK_END)].strip() == coverage.quoted_block(json.loads(RECORDED.read_text()))
    assert block(page, "x", coverage.BLOCK_START, coverage.BLOCK_END) != page


def test_the_recorded_coverage_is_what_the_archive_gives():
    """The recorded rows are the command's output on the archived runs (about a minute on 2 cores)."""
    rows = coverage.coverage_rows(settled.load_runs(RECORDED.parent / "runs"))
    assert [vars(r) for r in rows] == json.loads(RECORDED.read_text())


def test_expanded_level_brings_the_bootstrap_of_five_normal_samples_close_to_its_coverage():
    """Monte-Carlo: 1000 samples of 5 from N(0, 1), each with a 2000-resample bootstrap of the mean. The plain 95%
    percentile interval holds 0 in about 86% of them; the expanded one in about 92% (Hesterberg's tables give
    about as much at n = 5: the resampled means' discrete tails cap it below 95%)."""
    from costaware.report.curves import expanded_level

    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 5))
    idx = rng.integers(0, 5, size=(1000, 2000, 5), dtype=np.int32)
    boots = np.take_along_axis(np.broadcast_to(x[:, None, :], idx.shape), idx, axis=2).mean(axis=2)
    held = {}
    for name, level in (("plain", 0.95), ("expanded", expanded_level(5))):
        lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2], axis=1)
        held[name] = float(np.mean((lo <= 0) & (0 <= hi)))
    assert held["plain"] < 0.89
    assert 0.90 < held["expanded"] < 0.96 and held["expanded"] - held["plain"] > 0.04
    with pytest.raises(ValueError, match="n must be at least 2, got 1"):
        expanded_level(1)
