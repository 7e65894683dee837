"""The settled comparisons: the band estimator against brute force, its noise against the crossing's, and the rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from report_fixtures import make_runs

from costaware.report import settled
from costaware.report.curves import SeedCurves, band_levels, band_saving, saving


def _curves(xscale: float, noise: float = 0.0, seeds: int = 6, rng=None, points: int = 9) -> SeedCurves:
    x = np.linspace(0, 300_000, points)
    ys = [0.5 + 0.3 * (1 - np.exp(-x / (xscale * 80_000))) for _ in range(seeds)]
    if noise:
        ys = [y + rng.normal(0, noise, y.size) for y in ys]
    return SeedCurves(x, np.stack(ys), tuple(range(seeds)))


def test_band_saving_of_a_curve_stretched_along_x_is_the_stretch():
    a, b = _curves(1.0, points=2001), _curves(0.7, points=2001)  # b: a with x scaled by 0.7, 30% less to any level
    est = band_saving(a, b, band_levels(0.75, 0.5))
    assert est.value == pytest.approx(0.3, abs=0.01)
    assert est.lo == pytest.approx(0.3, abs=0.01) and est.hi == pytest.approx(0.3, abs=0.01)


def test_band_saving_at_one_level_is_the_crossing_saving_with_the_same_bootstrap():
    rng = np.random.default_rng(0)
    a, b = _curves(1.0, 0.01, rng=rng), _curves(0.8, 0.01, rng=rng)
    one, cross = band_saving(a, b, [0.72], n_boot=300), saving(a, b, 0.72, n_boot=300)
    assert (one.value, one.lo, one.hi) == pytest.approx((cross.value, cross.lo, cross.hi), rel=1e-9)


def test_band_saving_says_never_reached_and_undefined_as_the_crossing_does():
    a, flat = _curves(1.0), SeedCurves(np.linspace(0, 300_000, 9), np.full((6, 9), 0.5), tuple(range(6)))
    assert band_saving(a, flat, [0.7, 0.75], n_boot=50).value == -math.inf  # B never reaches
    assert band_saving(flat, a, [0.7, 0.75], n_boot=50).value == 1.0  # only A never reaches
    assert math.isnan(band_saving(flat, flat, [0.7], n_boot=50).value)  # neither


def test_band_estimator_is_less_noisy_than_one_crossing_and_centred_on_the_truth():
    """Monte-Carlo over replications of a 6-seed job with evaluation noise: why the verdict reads the band."""
    rng = np.random.default_rng(1)
    band, cross = [], []
    for _ in range(300):
        a, b = _curves(1.0, 0.012, rng=rng), _curves(0.8, 0.012, rng=rng)
        band.append(band_saving(a, b, band_levels(0.76, 0.5), n_boot=1).value)
        cross.append(saving(a, b, 0.76, n_boot=1).value)
    band_a, cross_a = np.array(band), np.array(cross)
    assert abs(np.median(band_a) - 0.2) < 0.03
    assert band_a.std() < 0.8 * cross_a.std()


def test_band_levels_refuse_a_target_below_the_start():
    with pytest.raises(ValueError, match="target > start"):
        band_levels(0.5, 0.6)


def _job():
    runs = []
    for method, po in (("none", 5000.0), ("nonzero", 3500.0), ("p_star", 3000.0), ("pods", 4000.0)):
        runs += make_runs(method, po_per_round=po, task="sort")
    return runs


def test_settled_rows_cover_every_claim_price_and_estimator_with_the_expected_signs():
    rows = settled.settled_rows(_job(), n_boot=200)
    claims = {r.claim for r in rows}
    assert claims == {"nonzero beats GRPO", "p* beats GRPO", "p* beats nonzero", "p* beats PODS", "PODS beats GRPO",
                      "PODS beats nonzero"}  # fmt: skip
    assert len(rows) == len(claims) * 3 * 2  # three prices, two estimators
    by = {(r.claim, r.generation_cost, r.estimator): r for r in rows}
    # 40% fewer PO tokens a round and the same generation: 1 - (3000 + 4000) / (5000 + 4000) = 22% at g = 1
    assert 0.12 < by[("p* beats GRPO", 1.0, "band")].estimate.value < 0.3
    assert by[("p* beats nonzero", 1.0, "band")].as_dict()["verdict"] in ("yes", "not shown")
    assert all(r.estimate.seeds == 5 for r in rows)


def test_settled_summary_is_json_and_pairs_only_common_seeds(tmp_path):
    runs = _job() + make_runs("p_smooth", po_per_round=3000.0, task="sort", seeds=range(3))
    out = settled.summary(runs, n_boot=100)
    json.dumps(out)
    smooth = [r for r in out["rows"] if r["method"] == "p_smooth"]
    assert smooth and all(r["seeds"] == 3 for r in out["rows"])  # every arm at the three seeds all ran
    assert out["time_shares"] == {} or out["time_shares"]["runs"] == len(runs)


def test_cli_is_one_line_on_a_missing_folder(tmp_path, capsys):
    assert settled.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs must be a folder" in err


@pytest.mark.parametrize(
    "name",
    [
        "costaware.report.curves",
        "costaware.experiments.profile",
        "costaware.experiments.specs",
        "costaware.experiments.runner",
    ],
)
def test_docstring_examples_run(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted and not result.failed


def test_cli_seeds_keeps_only_those_runs_and_says_so_when_none(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    for r in _job():
        r.save(runs / f"{r.id.arm.key}-s{r.id.seed}.json")
    assert settled.main([str(runs), "--json", str(tmp_path / "out.json"), "--seeds", "0", "1", "2"]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["runs"] == 12 and all(r["seeds"] == 3 for r in out["rows"])
    assert settled.main([str(runs), "--seeds", "99"]) == 2
    assert "no run record in" in capsys.readouterr().err.splitlines()[-1]
