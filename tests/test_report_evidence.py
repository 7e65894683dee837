"""Verdicts, plateau check, decomposition and tuned baseline on synthetic curves with known effects."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_fixtures import LR, headline, make_runs

from costaware.experiments.arms import Arm
from costaware.experiments.records import EvalPoint, RunId, RunResult
from costaware.report import curves, evidence, evidence_text, labels
from costaware.report.curves import Estimate, first_crossing, first_crossings, saving, seed_curves
from costaware.report.evidence import evaluate_section, plateau, sections

N_BOOT = 400  # enough for the CI sides these tests check; keeps each test well under a second


def _evidence(runs, **kw):
    (sec,) = sections(runs, "none")
    return evaluate_section(sec, "none", n_boot=N_BOOT, **kw)


def _claim(ev, start):
    return next(c for c in ev.claims if c[0].startswith(start))


def _verdict(ev, start):
    claim, comp, why = _claim(ev, start)
    return evidence_text.verdict_line(claim, comp, why, target=ev.target)


@pytest.mark.parametrize("mod", [curves, evidence, evidence_text, labels])
def test_docstring_examples_run(mod):
    assert doctest.testmod(mod).failed == 0


def _brute_crossing(x, y, t):
    for j in range(len(x)):
        if y[j] >= t:
            return x[0] if j == 0 else x[j - 1] + (t - y[j - 1]) / (y[j] - y[j - 1]) * (x[j] - x[j - 1])
    return np.inf


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 10), st.floats(0, 1)), min_size=1, max_size=12), st.floats(0, 1))
def test_first_crossing_matches_brute_force(pts, t):
    x = np.cumsum([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    assert first_crossing(x, y, t) == pytest.approx(_brute_crossing(x, y, t))
    rows = np.stack([y, y[::-1]])  # the vectorised form agrees row by row
    assert first_crossings(x, rows, t)[1] == pytest.approx(_brute_crossing(x, y[::-1], t))


def test_first_crossing_and_axis_values_reject_bad_input():
    with pytest.raises(ValueError, match="x and y"):
        first_crossing([0, 1], [0.5], 0.3)
    with pytest.raises(ValueError, match="axis"):
        curves.axis_values(make_runs("none", seeds=[0])[0], "seconds")
    with pytest.raises(ValueError, match="generation_cost"):
        curves.axis_values(make_runs("none", seeds=[0])[0], "total_cost", generation_cost=-1)


def test_axes_read_the_records():
    run = make_runs("none", seeds=[0], po_per_round=5000, gen_per_round=4000)[0]
    e = run.evals[-1]
    assert curves.axis_values(run, "po_tokens")[-1] == e.po_tokens
    assert curves.axis_values(run, "rounds")[-1] == e.rounds
    assert curves.axis_values(run, "total_cost", generation_cost=0.5)[-1] == e.po_tokens + 0.5 * e.generated_tokens


def test_saving_recovers_a_known_token_rate():
    """Same curve per round, 0.6 of the tokens per round: 40% fewer PO tokens, none per round."""
    a = make_runs("none", noise=0.0, n_evals=121)
    b = make_runs("p_star", po_per_round=3000, noise=0.0, n_evals=121)
    target = 0.5
    s_tok = saving(seed_curves(a, "po_tokens"), seed_curves(b, "po_tokens"), target, n_boot=N_BOOT)
    s_rnd = saving(seed_curves(a, "rounds"), seed_curves(b, "rounds"), target, n_boot=N_BOOT)
    # Rounds are floors of tokens / tokens-per-round at equal token spacing: a round's worth of slack.
    assert s_tok.value == pytest.approx(0.4, abs=0.03)
    assert abs(s_rnd.value) < 0.02


def test_gap_at_equal_rounds():
    """Same per-round curve: no gap at equal rounds; a slower per-round curve: a gap below zero."""
    a = seed_curves(make_runs("none"), "rounds")
    same = seed_curves(make_runs("p_star", po_per_round=3000), "rounds")
    slow = seed_curves(make_runs("p_star", po_per_round=3000, scale=30.0), "rounds")
    at, g = curves.gap_at(a, same, n_boot=N_BOOT)
    assert at == a.grid[-1] == 60 and abs(g.value) < 0.01  # noise only (sd of a 5-seed mean difference ~0.0025)
    _, g = curves.gap_at(a, slow, 20.0, n_boot=N_BOOT)
    assert g.hi < 0 and g.value == pytest.approx(np.interp(20, slow.grid, slow.mean) - np.interp(20, a.grid, a.mean))


def test_saving_handles_never_reached():
    a, b = make_runs("none", noise=0.0), make_runs("p_star", peak=0.4, noise=0.0)
    s = saving(seed_curves(a, "po_tokens"), seed_curves(b, "po_tokens"), 0.5, n_boot=50)
    assert s.value == -np.inf and s.hi == -np.inf and s.excludes_zero
    s = saving(seed_curves(b, "po_tokens"), seed_curves(a, "po_tokens"), 0.5, n_boot=50)
    assert s.value == 1.0


def test_pstar_clearly_wins():
    ev = _evidence(headline())
    assert "**yes**" in _verdict(ev, "p* beats GRPO") and "At equal rounds (round 60)" in _verdict(ev, "p* beats GRPO")
    assert "**yes**" in _verdict(ev, "p* beats PODS")
    s = _claim(ev, "p* beats GRPO")[1].savings
    # 0.6 of GRPO's PO tokens and as many generated tokens a round: total cost (5000 + 4000/3 → 3000 + 4000/3) −32%
    assert s["total_cost"].value == pytest.approx(1 - (3000 + 4000 / 3) / (5000 + 4000 / 3), abs=0.03)
    assert s["total_cost"].lo > 0.2 and s["po_tokens"].lo > 0.3 and not s["rounds"].excludes_zero


def test_pstar_clearly_loses():
    ev = _evidence(headline(pstar_scale=30.0))
    line = _verdict(ev, "p* beats GRPO")
    assert "**no, it is worse**" in line and line.index("higher total cost") < line.index("more PO tokens")
    assert _claim(ev, "p* beats GRPO")[1].savings["total_cost"].hi < 0


def test_verdict_is_decided_by_the_ci_not_the_point():
    """A positive point estimate whose total-cost CI straddles zero is 'not shown': a verdict on the sign
    alone fails here."""
    ev = _evidence(headline(pstar_scale=11.0, noise=0.01, seeds=range(3)))
    claim, comp, why = _claim(ev, "p* beats GRPO")
    s = comp.savings["total_cost"]
    assert s.value > 0 and s.lo < 0 < s.hi  # the fixture really is the ambiguous case
    assert "**not shown**" in evidence_text.verdict_line(claim, comp, why, target=ev.target)


def test_plateau_detected_when_flat():
    p = plateau(make_runs("none", scale=5.0), n_boot=N_BOOT)
    assert p.plateaued and "has flattened" in p.text("GRPO")


def test_plateau_flags_a_baseline_still_rising():
    p = plateau(make_runs("none", linear=True, scale=60.0), n_boot=N_BOOT)
    assert p.peak_late and p.rise.lo > 0 and not p.plateaued
    assert "NOT flattened" in p.text("GRPO")
    ev = _evidence(headline(base_linear=True, base_scale=60.0, pstar_scale=60.0))
    assert not ev.plateau.plateaued


def test_plateau_peak_at_the_end_within_noise_is_flat():
    """A flat curve whose seed-mean peaks at its last evaluation by a hair, with a last-quarter rise whose CI
    straddles zero, has flattened: a check on the peak's position alone, or on the slope's sign, fails here."""
    runs = []
    for r in make_runs("none", scale=3.0):
        *head, e = r.evals
        runs.append(
            r.__class__(r.id, (*head, e.__class__(**{**e.__dict__, "heldout_accuracy": e.heldout_accuracy + 0.005})))
        )
    p = plateau(runs, n_boot=N_BOOT)
    assert p.peak_late and p.rise.value > 0 > p.rise.lo  # the fixture is the case it claims to be
    assert p.plateaued


def test_plateau_peak_early_is_enough():
    """A curve that peaks early and declines has flattened, even though its last quarter's slope is not zero."""
    runs = make_runs("none", scale=3.0)
    decline = [
        r.__class__(
            r.id,
            tuple(
                e.__class__(**{**e.__dict__, "heldout_accuracy": e.heldout_accuracy - 0.05 * e.po_tokens / 3e5})
                for e in r.evals
            ),
        )
        for r in runs
    ]
    p = plateau(decline, n_boot=N_BOOT)
    assert not p.peak_late and p.plateaued


def test_plateau_says_not_learning_for_a_curve_flat_at_its_start():
    """A curve stuck at 0.000 is flat because nothing is learnt: "has flattened" would read as a plateau."""
    stuck = make_runs("none", start=0.0, peak=0.0, noise=0.0)
    p = plateau(stuck, n_boot=N_BOOT)
    assert not p.learning and (p.start, p.peak) == (0.0, 0.0)
    text = p.text("GRPO")
    assert "**GRPO is not learning**" in text and "starts at 0.000" in text and "flattened" not in text
    ev = _evidence(headline(start=0.0, peak=0.0, noise=0.0))
    assert "The GRPO baseline **is not learning**" in evidence_text.answer_paragraph(ev, "none")
    # a curve that rose, then flattened, is learning: the plateau line stays
    rose = plateau(make_runs("none", scale=5.0), n_boot=N_BOOT)
    assert rose.learning and "has flattened" in rose.text("GRPO") and "not learning" not in rose.text("GRPO")
    # the line is drawn at min_gain: a rise of 0.02 is learning at 0.01, not at 0.05
    small = make_runs("none", start=0.30, peak=0.32, noise=0.0, scale=2.0)
    assert plateau(small, n_boot=N_BOOT).learning and not plateau(small, n_boot=N_BOOT, min_gain=0.05).learning
    with pytest.raises(ValueError, match="min_gain"):
        plateau(stuck, min_gain=float("nan"))


def test_plateau_rejects_a_late_fraction_above_one():
    with pytest.raises(ValueError, match="late"):
        plateau(make_runs("none", seeds=[0]), late=1.5)


def test_decomposition_isolates_each_effect():
    """nonzero gets GRPO's per-round effect at 0.75 of its tokens, p* at 0.6: 25%, then 20%, and GRPO → raw 40%."""
    ev = _evidence(headline(noise=0.002))
    by = {c.name: c.savings["po_tokens"] for c in ev.decomposition}
    assert by["renormalisation"].value == pytest.approx(0.25, abs=0.05)
    assert by["cost-aware sampling at a matched step"].value == pytest.approx(0.2, abs=0.05)
    assert by["cost-aware sampling at GRPO's step"].value == pytest.approx(0.4, abs=0.05)
    assert all(s.excludes_zero for s in by.values())


def test_tuned_baseline_is_chosen_on_validation_not_held_out():
    """lr ×2 is best on validation, lr ×4 on held-out: a tuner that peeks at held-out picks ×4 and fails."""
    runs = headline() + make_runs("none", lr=2 * LR, scale=8.0, val_shift=0.05)
    runs += make_runs("none", lr=4 * LR, scale=6.0, peak=0.65, val_shift=-0.1)
    ev = _evidence(runs)
    assert ev.tuned == (Arm("none"), 2 * LR)
    assert any(c.effect is evidence.Effect.TUNED_BASELINE and c.a == (Arm("none"), 2 * LR) for c in ev.decomposition)
    assert _claim(ev, "p* beats GRPO, learning rate tuned on validation")[1] is not None
    assert ev.tuned_plateau is not None and ev.tuned_plateau.plateaued


def test_no_tuned_baseline_without_validation_or_sweep():
    ev = _evidence(headline())
    assert ev.tuned is None and "no learning-rate sweep" in ev.tuned_note
    assert "**cannot say**" in _verdict(ev, "p* beats GRPO, learning rate tuned on validation")
    runs = headline() + [
        r.__class__(r.id, tuple(e.__class__(**{**e.__dict__, "validation_accuracy": None}) for e in r.evals))
        for r in make_runs("none", lr=2 * LR)
    ]
    ev = _evidence(runs)
    assert ev.tuned is None and "never used to tune" in ev.tuned_note


def test_default_lr_is_the_methods_lr():
    runs = headline() + make_runs("none", lr=2 * LR) + make_runs("none", lr=4 * LR)
    (sec,) = sections(runs, "none")
    assert sec.default_lr == LR


def test_missing_arms_are_said_not_guessed():
    runs = make_runs("none") + make_runs("p_star", po_per_round=3000)
    ev = _evidence(runs)
    assert [c.name for c in ev.decomposition] == []
    assert "**cannot say**" in _verdict(ev, "p* beats nonzero") and "not run" in _verdict(ev, "p* beats nonzero")


def test_evaluate_section_rejects_unknown_baseline_and_zero_target():
    (sec,) = sections(headline(seeds=[0]), "none")
    with pytest.raises(ValueError, match="baseline 'pods_x'"):
        evaluate_section(sec, "pods_x")
    with pytest.raises(ValueError, match="target_fraction"):
        evaluate_section(sec, "none", target_fraction=0.0)
    with pytest.raises(ValueError, match=r"generation_cost must be .* <= 1e\+06 .*, got 1e\+308"):
        evaluate_section(sec, "none", generation_cost=1e308)


def test_estimate_excludes_zero_only_when_its_interval_does():
    assert Estimate(0.1, 0.01, 0.2).excludes_zero and Estimate(-0.1, -0.2, -0.01).excludes_zero
    assert not Estimate(0.1, -0.01, 0.2).excludes_zero


def test_seed_mean_curve_not_mean_of_peaks():
    """The peak and crossing are read off the seed-mean curve; the CI resamples seeds (paired per seed)."""

    def run(acc, seed):
        rid = RunId(task="t", method="none", seed=seed, learning_rate=LR, loss_type="grpo")
        return RunResult(rid, tuple(EvalPoint(i, 100 * i, 0, a) for i, a in enumerate(acc)))

    a, b = run([0.2, 0.4, 0.5, 0.6], 0), run([0.2, 0.6, 0.5, 0.4], 1)
    c = seed_curves([a, b], "po_tokens", points=4)
    assert c.mean.max() == pytest.approx(0.5)  # 0.2, 0.5, 0.5, 0.5: not the mean of the peaks, 0.6
    assert first_crossing(c.grid, c.mean, 0.5) == pytest.approx(100.0)
    picks = np.array([[0, 0], [0, 1], [1, 1]])  # the three distinct resamples {a,a}, {a,b}, {b,b}
    assert first_crossings(c.grid, c.boot_means(picks), 0.5) == pytest.approx([200.0, 100.0, 75.0])
    assert c.boot_means(picks).max(1) == pytest.approx([0.6, 0.5, 0.6])
    assert first_crossing(c.grid, c.mean, 0.9) == np.inf


@settings(max_examples=25, deadline=None)
@given(st.floats(3.0, 30.0), st.floats(3.0, 30.0), st.floats(1000, 8000), st.integers(0, 100))
def test_saving_against_itself_is_zero_and_swapped_savings_invert(scale_a, scale_b, po_b, salt):
    """saving(A, A) = 0 with a [0, 0] CI (paired), and (1 − s_AB)(1 − s_BA) = 1 whenever both reach the target."""
    a = seed_curves(make_runs("none", scale=scale_a, seeds=range(3), salt=salt), "po_tokens")
    b = seed_curves(make_runs("p_star", scale=scale_b, po_per_round=po_b, seeds=range(3), salt=salt), "po_tokens")
    same = saving(a, a, 0.5, n_boot=50)
    assert (same.value, same.lo, same.hi) == (0.0, 0.0, 0.0)
    ab, ba = saving(a, b, 0.5, n_boot=50), saving(b, a, 0.5, n_boot=50)
    if np.isfinite(ab.value) and np.isfinite(ba.value) and ab.value < 1 and ba.value < 1:
        assert (1 - ab.value) * (1 - ba.value) == pytest.approx(1.0)


def test_common_target_is_reached_by_every_compared_arm():
    """PODS plateaus lower than GRPO: the target is 95% of the LOWEST peak, so every saving is a finite number."""
    runs = [r for r in headline() if r.id.method != "pods"] + make_runs("pods", peak=0.5, po_per_round=3100)
    ev = _evidence(runs)
    assert ev.target == pytest.approx(0.95 * min(ev.peaks.values())) and ev.target < 0.5
    comps = ev.decomposition + [c for _, c, _ in ev.claims if c is not None]
    assert all(np.isfinite(s.value) for c in comps for s in c.savings.values())


def test_no_improvement_is_said_not_scored():
    """Flat curves at the start (the quick profile's tiny policy): no saving is computed, the answer says why."""
    runs = headline(pstar_scale=1e9, base_scale=1e9, noise=0.0)
    ev = _evidence(runs)
    assert not ev.informative and ev.decomposition == []
    assert all(c is None and "not above the starting accuracy" in why for _, c, why in ev.claims)
    assert "Nothing to compare" in evidence_text.answer_paragraph(ev, "none")
    assert "**cannot say**" in _verdict(ev, "p* beats GRPO")


# -- the proxy's own claims -----------------------------------------------------------------


def _token_sum(calibrated_scale: float, paper_scale: float, seeds=range(3)):
    kw = dict(setting="dapo", group="dapo", seeds=seeds)
    return (
        make_runs("none", **kw)
        + make_runs("nonzero", po_per_round=3750, **kw)
        + make_runs("p_star", po_per_round=3000, scale=calibrated_scale, **kw)
        + make_runs("p_star", po_per_round=3000, scale=paper_scale, proxy="advantage", **kw)
    )


def test_calibrated_proxy_claim_in_a_token_sum_setting():
    """p* ('auto' = calibrated) against p* with the paper's proxy, in both directions."""
    win = _evidence(_token_sum(calibrated_scale=10.0, paper_scale=20.0))
    assert "**yes**" in _verdict(win, "p* beats p* (paper's proxy |A|)")
    lose = _evidence(_token_sum(calibrated_scale=20.0, paper_scale=10.0))
    assert "**no, it is worse**" in _verdict(lose, "p* beats p* (paper's proxy |A|)")
    assert lose.section.setting == "dapo" and not any("calibrated proxy" in c for c, _, _ in lose.claims)
    # the paper's p* against the same controls: it wins against GRPO here (it feeds fewer tokens per round)
    assert "**yes**" in _verdict(lose, "p* (paper's proxy |A|) beats GRPO")
    assert _claim(lose, "p* (paper's proxy |A|) beats nonzero")[1].b == (Arm("p_star", proxy="advantage"), LR)


def test_calibrated_proxy_claim_under_the_headline_loss_compares_it_to_the_papers():
    runs = headline() + make_runs("p_star", po_per_round=3000, proxy="calibrated", seeds=range(3), group="proxy")
    claim, comp, _ = _claim(_evidence(runs), "p* (calibrated proxy) beats p*")
    assert comp is not None and comp.a == (Arm("p_star"), LR) and comp.b == (Arm("p_star", proxy="calibrated"), LR)
    assert "**no, it is worse**" not in _verdict(_evidence(runs), "p* (calibrated proxy) beats p*")  # the same curve
    worse = headline() + make_runs("p_star", po_per_round=3000, scale=25.0, proxy="calibrated", seeds=range(3))
    assert "**no, it is worse**" in _verdict(_evidence(worse), "p* (calibrated proxy) beats p*")
