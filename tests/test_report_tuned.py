"""report.tuned: each swept arm at its own LR, chosen on validation accuracy (never on the held-out set), the
comparisons of the tuned arms, the section's methods' LR unmoved by the sweeps, and the report's section; and
report.step_errors' table of the runs' step errors."""

from __future__ import annotations

import dataclasses
import json

import pytest
from report_fixtures import LR, headline, make_runs

from costaware.experiments.arms import Arm
from costaware.experiments.records import StepErrorPoint
from costaware.report import evidence as E
from costaware.report import step_errors as SE
from costaware.report import tuned as T


def swept(method, best, *, heldout_best=None, **kw):
    """``method`` at LR ×0.5 and ×2 (group lr_sweep) beside its ×1 headline: the LR ``best`` has the highest
    validation curve; ``heldout_best`` (default ``best``) the highest held-out one."""
    heldout_best = best if heldout_best is None else heldout_best
    out = []
    for x in (0.5, 1.0, 2.0):
        lr = LR * x
        peak = 0.6 + (0.05 if lr == heldout_best else 0.0)
        val_shift = (0.08 if lr == best else 0.0) - (0.05 if lr == heldout_best else 0.0)
        group = "headline" if x == 1.0 else "lr_sweep"
        out += make_runs(method, lr=lr, peak=peak, val_shift=val_shift, group=group, salt=int(10 * x), **kw)
    return out


def test_pick_lr_takes_the_highest_validation_peak_ties_to_the_smaller():
    assert T.pick_lr({1e-4: 0.5, 2e-4: 0.7, 4e-4: 0.6}) == 2e-4
    assert T.pick_lr({1e-4: 0.7, 2e-4: 0.7}) == 1e-4
    with pytest.raises(ValueError, match="validation must map"):
        T.pick_lr({})


def test_sweeps_of_other_arms_leave_the_methods_lr_where_it_was():
    runs = make_runs("none") + swept("nonzero", 2 * LR, po_per_round=3750) + swept("p_star", LR / 2, po_per_round=3000)
    (sec,) = E.sections(runs, "none")
    assert sec.default_lr == LR  # the headline's: without the lr_sweep group left out, a tie picked LR / 2
    ev = E.evaluate_section(sec, "none", n_boot=200)
    matched = next(c for c in ev.decomposition if c.effect is E.Effect.MATCHED_STEP)
    assert matched.a == (Arm("nonzero"), LR) and matched.b == (Arm("p_star"), LR)


def test_each_arm_gets_its_validation_best_lr_never_the_held_out_best():
    runs = (
        make_runs("none")
        + swept("nonzero", 2 * LR, heldout_best=LR / 2, po_per_round=3750)
        + swept("p_star", LR / 2, heldout_best=2 * LR, po_per_round=3000)
    )
    (sec,) = E.sections(runs, "none")
    tuned = {t.arm: t for t in T.tuned_arms(sec)}
    assert set(tuned) == {Arm("nonzero"), Arm("p_star")}  # GRPO ran at one LR: not tuned
    assert tuned[Arm("nonzero")].learning_rate == 2 * LR and tuned[Arm("p_star")].learning_rate == LR / 2
    assert tuned[Arm("nonzero")].at_edge and sorted(tuned[Arm("p_star")].validation) == [LR / 2, LR, 2 * LR]
    (tev,) = T.evaluate([E.evaluate_section(sec, "none", n_boot=200)], n_boot=200)
    (comp,) = tev.comparisons
    assert comp.a == (Arm("nonzero"), 2 * LR) and comp.b == (Arm("p_star"), LR / 2)
    peaks = [E._peak(sec.arms[k], "heldout") for k in (comp.a, comp.b)]
    assert tev.target == pytest.approx(0.95 * min(peaks))
    # the comparison is the one the verdicts make, at this target
    again = E.compare(sec, "x", E.Effect.CLAIM, comp.a, comp.b, tev.target, E.DEFAULT_GENERATION_COST, 200, 0)
    assert again.savings == comp.savings
    text = "\n".join(T.lines([tev]))
    assert "## Each arm at its own learning rate" in text and "at the edge of the sweep" in text
    assert "| nonzero → p\\* |" in text and "| p\\* |" in text and "\\\\" not in text  # escaped once
    (row,) = T.summary([tev])
    assert [c["to"] for c in row["comparisons"]] == [["p_star", LR / 2]] and row["tuned"][0]["arm"] == "nonzero"


def test_grpo_swept_too_is_compared_with_every_tuned_arm():
    runs = swept("none", LR) + swept("nonzero", 2 * LR, po_per_round=3750) + swept("p_star", LR, po_per_round=3000)
    (sec,) = E.sections(runs, "none")
    (tev,) = T.evaluate([E.evaluate_section(sec, "none", n_boot=200)], n_boot=200)
    names = [(c.a[0].key, c.b[0].key) for c in tev.comparisons]
    assert names == [("nonzero", "p_star"), ("none", "nonzero"), ("none", "p_star")]


def test_no_sweep_beside_grpos_adds_nothing_to_the_report(tmp_path):
    from costaware.report.grpo import write_report

    plain = headline() + make_runs("none", lr=2 * LR, group="lr_sweep")
    paths = write_report(plain, tmp_path / "a", command="x")
    summary = json.loads(paths["summary"].read_text())
    assert "tuned_lr" not in summary and "step_errors" not in summary
    assert "own learning rate" not in paths["markdown"].read_text()
    runs = make_runs("none") + swept("nonzero", 2 * LR, po_per_round=3750) + swept("p_star", LR / 2, po_per_round=3000)
    paths = write_report(runs, tmp_path / "b", command="x")
    summary = json.loads(paths["summary"].read_text())
    assert [c["name"] for c in summary["tuned_lr"][0]["comparisons"]] == ["nonzero → p*"]
    assert "## Each arm at its own learning rate" in paths["markdown"].read_text()


def test_step_errors_table_averages_rounds_and_seeds_and_prices_by_tokens_per_step():
    def with_errors(runs, measured, predicted):
        return [dataclasses.replace(r, step_errors=(StepErrorPoint(step=2, po_tokens=10, measured=measured,
                                                                   predicted=predicted, grad_sq=0.1),
                                                    StepErrorPoint(step=4, po_tokens=20, measured=3 * measured,
                                                                   predicted=predicted)))
                for r in runs]  # fmt: skip

    runs = with_errors(make_runs("nonzero", po_per_round=3750), 1.0, 2.0)
    runs += with_errors(make_runs("p_star", po_per_round=3000), 0.5, 0.5) + make_runs("none")
    rows = {a.arm.key: a for a in SE.arm_step_errors(runs)}
    assert set(rows) == {"nonzero", "p_star"} and rows["nonzero"].points == 10 and rows["nonzero"].seeds == 5
    assert rows["nonzero"].measured == pytest.approx(2.0) and rows["nonzero"].predicted == pytest.approx(2.0)
    # tokens per step from the runs' own ends: p* feeds 3000 a round of 2 steps, nonzero 3750
    assert rows["nonzero"].tokens_per_step == pytest.approx(1875, rel=0.02)
    (p,) = [s for s in SE.summary(runs) if s["arm"] == "p_star"]
    assert p["cost_vs_nonzero_measured"] == pytest.approx(1.0 * 1500 / (2.0 * 1875), rel=0.03)
    assert p["cost_vs_nonzero_predicted"] == pytest.approx(0.5 * 1500 / (2.0 * 1875), rel=0.03)
    text = "\n".join(SE.lines(runs))
    assert "measured / closed form" in text and "| p\\* |" in text and "\\\\" not in text
    assert SE.lines(make_runs("none")) == []
