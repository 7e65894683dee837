"""The gap table (``report.gap``): which runs each ablation pairs, the LR each tuned arm gets, J's predicted saving
from the runs' step errors, the measured saving and its paired comparison with the reference."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from report_fixtures import hand_logs, make_runs
from test_report_rollout import _brute_row_level

from costaware.experiments.records import StepErrorPoint
from costaware.report import gap
from costaware.report.curves import band_levels, band_saving, seed_curves

LR = 2e-4


def _with_errors(runs, measured, predicted):
    """``runs`` with one step-error point per run."""
    return [dataclasses.replace(r, step_errors=(StepErrorPoint(step=2, po_tokens=1000, measured=measured,
                                                               predicted=predicted),)) for r in runs]  # fmt: skip


def _headline(method, **kw):
    return make_runs(method, task="sort", lr=LR, seeds=range(6), **kw)


def _gap_profile(p_faster: float = 1.0):
    """`gap`'s runs: nonzero and p* at x1 (headline) and x0.5, x2 (the sweep); p* faster by ``p_faster``."""
    runs = []
    for scale, group in ((1.0, "headline"), (0.5, "lr_sweep"), (2.0, "lr_sweep")):
        # the validation curve is best at x2 for p*, at x1 for nonzero
        runs += make_runs("nonzero", task="sort", lr=LR * scale, seeds=range(6), group=group,
                          val_shift=0.02 if scale == 1.0 else 0.0)  # fmt: skip
        runs += make_runs("p_star", task="sort", lr=LR * scale, seeds=range(6), group=group,
                          po_per_round=5000.0 / p_faster, val_shift=0.02 if scale == 2.0 else 0.0)  # fmt: skip
    return runs


def test_the_reference_pairs_the_headline_runs_and_measures_the_band_saving():
    runs = {"gap": _headline("nonzero") + _headline("p_star", po_per_round=4000.0)}
    (row,) = gap.gap_rows(runs, n_boot=200)
    assert row.ablation.key == gap.REFERENCE and row.seeds == tuple(range(6))
    assert row.nonzero_lr == row.p_star_lr == LR and row.against_reference is None
    # the same number band_saving gives on the same curves (p* at 4000 PO tokens a round: about 20% cheaper)
    a, b = seed_curves(runs["gap"][:6], "po_tokens"), seed_curves(runs["gap"][6:], "po_tokens")
    target = 0.95 * min(a.mean.max(), b.mean.max())
    expected = band_saving(a, b, band_levels(target, max(a.mean[0], b.mean[0])), n_boot=200)
    assert row.measured.value == pytest.approx(expected.value) and 0.1 < row.measured.value < 0.3
    assert row.predicted is None and np.isnan(row.gap)  # no step errors recorded: nothing predicted


def test_predicted_is_js_cost_to_equal_variance_from_the_runs_step_errors():
    """1 − (V·tokens per step of p*)/(V·tokens per step of nonzero), closed form and measured."""
    nz = _with_errors(_headline("nonzero"), measured=4.0, predicted=3.0)
    ps = _with_errors(_headline("p_star", po_per_round=4000.0), measured=1.0, predicted=1.5)
    (row,) = gap.gap_rows({"gap": nz + ps}, n_boot=100)
    tokens = {k: sum(r.evals[-1].po_tokens for r in v) / sum(r.evals[-1].step for r in v)
              for k, v in (("nz", nz), ("ps", ps))}  # fmt: skip
    assert row.predicted == pytest.approx(1 - 1.5 * tokens["ps"] / (3.0 * tokens["nz"]))
    assert row.step_error_measured == pytest.approx(1 - 1.0 * tokens["ps"] / (4.0 * tokens["nz"]))
    assert row.gap == pytest.approx(row.predicted - row.measured.value)


def test_j_from_abs_a_is_the_papers_row_level_ratio_over_nonzeros_logs(tmp_path):
    """1 − the median over `nonzero`'s runs of J(p*)/J(uniform on the non-zero rows), brute force per log;
    the fast ``rollouts.analysis.row_level`` gives ``analyse``'s own figure."""
    from costaware.rollouts.analysis import AnalysisConfig, analyse, row_level
    from costaware.rollouts.logs import read_prompt_rounds

    nz, ps = _headline("nonzero"), _headline("p_star", po_per_round=4000.0)
    logs = hand_logs(nz + ps, tmp_path)
    (row,) = gap.gap_rows({"gap": nz + ps}, logs, n_boot=50)
    brute = [_brute_row_level(logs[r.id]) for r in nz]
    assert row.predicted_abs == pytest.approx(1 - np.median(brute), rel=1e-12) and 0 < row.predicted_abs < 1
    recs = read_prompt_rounds([logs[nz[0].id]])
    assert row_level(recs).overall == analyse(recs, AnalysisConfig(row_method="nonzero")).row_level.overall
    (without,) = gap.gap_rows({"gap": nz + ps}, n_boot=50)
    assert without.predicted_abs is None


def test_a_tuned_ablation_puts_each_arm_at_its_validation_chosen_lr():
    (ref, tuned) = gap.gap_rows({"gap": _gap_profile()}, n_boot=100)
    assert (ref.ablation.key, tuned.ablation.key) == (gap.REFERENCE, "adamw-tuned")
    assert (ref.nonzero_lr, ref.p_star_lr) == (LR, LR)
    assert (tuned.nonzero_lr, tuned.p_star_lr) == (LR, 2 * LR)  # chosen on validation, not the held-out set
    assert set(tuned.validation) == {"nonzero", "p_star"} and set(tuned.validation["p_star"]) == {LR / 2, LR, 2 * LR}
    assert max(tuned.validation["p_star"], key=tuned.validation["p_star"].get) == tuned.p_star_lr
    assert not ref.validation


def test_a_tuned_ablation_without_its_sweep_is_left_out():
    runs = {"gap": _headline("nonzero") + _headline("p_star")}
    assert [r.ablation.key for r in gap.gap_rows(runs, n_boot=50)] == [gap.REFERENCE]


def test_against_the_reference_is_paired_over_the_seeds():
    """An ablation whose runs are the reference's own measures a difference of exactly 0 with a zero-width CI:
    the same resample of seeds for both. Resampled independently, the interval would not be 0 wide."""
    runs = _headline("nonzero") + _headline("p_star", po_per_round=4000.0, noise=0.03)
    oracle = [dataclasses.replace(r, id=dataclasses.replace(r.id, proxy="oracle")) for r in runs
              if r.id.method == "p_star"]  # fmt: skip
    rows = {r.ablation.key: r for r in gap.gap_rows({"gap": runs + oracle}, n_boot=300)}
    d = rows["oracle"].against_reference
    assert d is not None and (d.value, d.lo, d.hi) == (0.0, 0.0, 0.0)
    assert rows["reference"].measured.hi > rows["reference"].measured.lo  # the savings themselves vary


def test_the_quoted_block_reads_back_the_recorded_rows():
    runs = {"gap": _gap_profile(p_faster=1.25)}
    record = json.loads(json.dumps(gap.summary(runs, n_boot=100)))
    block = gap.quoted_block(record)
    assert block == gap.markdown(gap.gap_rows(runs, n_boot=100))  # no step errors: the gap table alone
    assert "(b) AdamW, LR tuned per arm" in block and record["runs"] == {"gap": len(runs["gap"])}
    runs = {"gap": _with_errors(_headline("nonzero"), 4.0, 3.0) + _with_errors(_headline("p_star"), 1.0, 1.5)}
    record = json.loads(json.dumps(gap.summary(runs, n_boot=100)))
    block = gap.quoted_block(record)
    assert block.startswith(gap.markdown(gap.gap_rows(runs, n_boot=100)))
    (nz,) = [line for line in block.splitlines() if line.startswith("| gap | nonzero |")]
    assert nz.split(" | ")[5:7] == ["4", "3"]  # measured, closed form
    assert "| gap | p\\* |" in block


def test_the_cli_names_a_bad_folder_in_one_line(tmp_path, capsys):
    assert gap.main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nowhere" in err
