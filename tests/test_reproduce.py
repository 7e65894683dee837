"""The main job: report metrics against hand-computed values, and `costaware reproduce --quick` end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from costaware.report.grpo import area_under_curve, bootstrap_ci, tokens_to_reach


def test_tokens_to_reach_interpolates_the_first_crossing():
    assert tokens_to_reach([0, 100, 200, 300], [0.1, 0.3, 0.5, 0.4], 0.4) == pytest.approx(150.0)
    assert tokens_to_reach([0, 100], [0.6, 0.7], 0.5) == 0.0
    assert math.isinf(tokens_to_reach([0, 100], [0.1, 0.2], 0.5))
    with pytest.raises(ValueError, match="shape"):
        tokens_to_reach([0, 1], [0.1], 0.5)


def test_area_under_curve_is_the_mean_accuracy_over_the_token_range():
    assert area_under_curve([0, 100], [0.2, 0.2], 100) == pytest.approx(0.2)
    assert area_under_curve([0, 100], [0.0, 1.0], 100) == pytest.approx(0.5, abs=1e-9)
    assert area_under_curve([0, 50], [0.0, 1.0], 100) == pytest.approx(0.75, abs=1e-2)  # flat past the end
    with pytest.raises(ValueError, match="upto"):
        area_under_curve([0, 1], [0, 1], 0)


def test_bootstrap_ci_brackets_the_mean_and_shrinks_with_more_seeds():
    rng = np.random.default_rng(0)
    few, many = rng.normal(1.0, 1.0, 5), rng.normal(1.0, 1.0, 200)
    lo, hi = bootstrap_ci(few)
    assert lo < few.mean() < hi
    lo2, hi2 = bootstrap_ci(many)
    assert (hi2 - lo2) < (hi - lo)
    assert bootstrap_ci([3.0]) == (3.0, 3.0)


def test_arith_lengths_vary_at_least_five_fold():
    from costaware.experiments import arith

    tasks = arith.make_tasks(2000, min_terms=2, max_terms=12, rng=np.random.default_rng(0))
    demos = arith.demonstrations(tasks)
    lengths = arith.sequence_lengths(tasks, demos)
    assert lengths.max() / lengths.min() >= 5
    assert arith.is_correct(demos, tasks.answers).all()  # clean chains end in the right answer
    noisy = arith.demonstrations(tasks, mistake_prob=0.15, rng=np.random.default_rng(1))
    assert all(arith.parse_answer(d) is not None for d in noisy)
    assert 0.1 < 1 - arith.is_correct(noisy, tasks.answers).mean() < 0.9


def test_reproduce_quick_end_to_end_and_resume(tmp_path, capsys):
    pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    pytest.importorskip("matplotlib", reason="the 'plot' extra is not installed")
    from costaware.cli import main

    out = tmp_path / "rq"
    assert main(["reproduce", "--quick", "--out", str(out), "--jobs", "1"]) == 0
    md = (out / "report.md").read_text()
    for series in ("GRPO", "p*", "nonzero", "pods", "p*_smooth(0.01)", "SFT continuation", "inv_sqrt_cost",
                   "p* (tokens/step matched)"):
        assert f"| {series} |" in md, series
    for setting in ("## GRPO+ZVF", "## CISPO", "## Best checkpoint accuracy"):
        assert setting in md
    assert (out / "accuracy_vs_tokens.png").stat().st_size > 10_000
    assert "## Runs" in md and "own / plain" in md
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<table>" in html
    finished = [json.loads(f.read_text()) for f in (out / "runs").glob("*.json")]
    if any(r.get("diagnostics") for r in finished):  # the tiny quick policy may leave every pool all-zero
        assert "## Proxy fidelity" in md
    if any(r.get("diagnostics") for r in finished if r["spec"]["group"] == "headline"):
        assert (out / "proxy_fidelity.png").stat().st_size > 10_000
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert set(summary) == {"GRPO", "GRPO+ZVF", "CISPO"}
    runs = sorted((out / "runs").glob("*.json"))
    first = {f.name: f.stat().st_mtime_ns for f in runs}
    one = json.loads(runs[0].read_text())
    assert one["evals"][0]["tokens"] == 0 and one["evals"][-1]["tokens"] > 0
    capsys.readouterr()
    assert main(["reproduce", "--quick", "--out", str(out), "--jobs", "1"]) == 0
    assert "already finished" in capsys.readouterr().out
    assert {f.name: f.stat().st_mtime_ns for f in sorted((out / "runs").glob("*.json"))} == first  # nothing re-run


def test_fidelity_summary_means_over_training_and_skips_nonfinite():
    from costaware.report.grpo import fidelity_summary

    def run(label, vals):
        return {"setting": "GRPO", "label": label,
                "diagnostics": [{"step": i, "tokens": 10 * i, **v} for i, v in enumerate(vals)]}

    out = fidelity_summary([
        run("GRPO", [{"pearson": 0.8, "chi2": 0.2}, {"pearson": 0.6, "chi2": float("inf")}]),
        run("GRPO", [{"pearson": 0.7, "chi2": 0.4, "j_vs_uniform": 0.5}]),
        {"setting": "GRPO", "label": "SFT continuation", "evals": []},
    ])
    assert set(out["GRPO"]) == {"GRPO"}
    g = out["GRPO"]["GRPO"]
    assert g["pearson"]["mean"] == pytest.approx(0.7) and g["pearson"]["n"] == 3
    assert g["chi2"]["mean"] == pytest.approx(0.3) and g["chi2"]["max"] == pytest.approx(0.4)  # inf left out
    assert g["j_vs_uniform"]["n"] == 1


def test_eval_schedule_by_tokens_and_by_rounds():
    import dataclasses

    from costaware.experiments.reproduce import PROFILES, _EvalSchedule

    prof = dataclasses.replace(PROFILES["quick"], token_budget=100, eval_points=4)
    due = _EvalSchedule(prof)
    assert [due(r, t) for r, t in enumerate([10, 30, 40, 55, 90])] == [False, True, False, True, True]
    assert not due.done(99) and due.done(100)
    assert due(9, 200)  # past the budget: always the final evaluation
    by_rounds = _EvalSchedule(dataclasses.replace(prof, token_budget=0, eval_every=3))
    assert [by_rounds(r, 10**9) for r in range(1, 7)] == [False, False, True, False, False, True]
    assert by_rounds(7, 0, last=True)


def test_bootstrap_curve_stats_reads_the_seed_mean_curve():
    from costaware.report.grpo import bootstrap_curve_stats, mean_curve

    def run(acc, tokens=(0, 100, 200, 300)):
        return {"evals": [{"tokens": t, "accuracy": a} for t, a in zip(tokens, acc, strict=False)]}

    a, b = run([0.2, 0.4, 0.5, 0.6]), run([0.2, 0.6, 0.5, 0.4])
    x, y = mean_curve([a, b, run([0.2, 0.5])])  # the short run truncates the curve to 2 points
    assert x.tolist() == [0, 100] and y.tolist() == pytest.approx([0.2, 0.5])
    out = bootstrap_curve_stats([a, b], {"hi": 0.5, "never": 0.9}, n_boot=500)
    assert out["peak"] == pytest.approx(0.5)  # seed-mean curve: 0.2, 0.5, 0.5, 0.5 (not the mean of peaks, 0.6)
    assert out["tokens_to_hi"] == pytest.approx(100.0)
    lo, hi = out["peak_ci"]
    assert lo <= 0.5 <= hi and hi == pytest.approx(0.6)  # resampling b twice gives its peak 0.6
    assert out["tokens_to_never"] == float("inf") and out["tokens_to_never_ci"] == (float("inf"), float("inf"))
    # resamples {b,b}: 0.5 reached at 75 tokens; {a,b}: at 100; {a,a}: at 200
    assert out["tokens_to_hi_ci"] == pytest.approx((75.0, 200.0))
