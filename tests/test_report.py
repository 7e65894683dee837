"""The report from synthetic records: the decomposition table, three axes, plateau check, verdicts, no label keys."""

from __future__ import annotations

import json

import pytest
from report_fixtures import LR, headline, make_runs
from report_html import Page

from costaware.experiments.arms import Arm
from costaware.report import grpo, labels


def _records():
    runs = headline(seeds=range(3)) + make_runs("none", lr=2 * LR, scale=8.0, val_shift=0.02, seeds=range(3))
    runs += make_runs("p_smooth", po_per_round=3100, fidelity=True, seeds=range(3))
    runs += make_runs("p_star", group="ablation", proxy_noise=0.1, po_per_round=3000, seeds=[0])
    runs += make_runs("sft", group="control", seeds=[0])
    runs += make_runs("none", setting="cispo", seeds=range(2)) + make_runs("p_star", setting="cispo", seeds=range(2))
    return runs


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    paths = grpo.write_report(
        _records(),
        out,
        command="costaware reproduce --profile test",
        profile={"x": 1},
        sft={"parameters": 1000, "greedy_accuracy": 0.3, "sampled_accuracy": 0.25},
    )
    return out, paths


def test_report_holds_every_part(report):
    out, paths = report
    md = paths["markdown"].read_text()
    text = Page(paths["html"].read_text()).text  # as rendered: labels with '*' are escaped in the Markdown
    advice, first = md.split("\n\n")[1:3]  # the opening: which method to use, the table of claims, sentences
    assert advice.startswith("**Which method to use.** At this job's price, g = 1/3,")
    assert first.startswith("| claim | total-cost saving [95% CI] | verdict |")
    assert "p\\* beats GRPO | +" in first and "arith / cispo: p\\* beats GRPO" in first
    assert "lower total cost" in md and "A user who switches from GRPO to p\\*" in md  # the headline axis
    assert "fewer PO tokens" in md  # PO tokens still reported beside it
    assert (
        "| method | seeds | peak [95% CI] | total cost to target | PO tokens to target | generated tokens to target |"
        in md
    )
    assert "### Decomposition" in md and "Δ accuracy at equal rounds" in md
    for step in (
        "renormalisation",
        "cost-aware sampling at a matched step",
        "cost-aware sampling at GRPO's step",
        "GRPO, learning rate tuned on validation → best cost-aware method",
    ):
        assert f"| {step}:" in md
    tuned = "p* beats GRPO, learning rate tuned on validation:"
    for claim in ("p* beats GRPO:", "p* beats nonzero:", tuned, "p* beats PODS:"):
        assert claim in text
    assert "Plateau check:" in md and "PO wall s (contended)" in md
    assert "Total cost counts one generated token as 0.333" in md and "memory-bound" in md
    for axis in ("total_cost", "po_tokens", "generated_tokens", "rounds"):
        assert paths[axis].stat().st_size > 10_000 and f"]({grpo.FIGURES[axis]})" in md
    assert paths["ablations"].exists() and "### Proxy fidelity" in md and "## What ran" in md
    assert "| arith | p\\* (σ²=0.1) | 1 |" in md  # the ablation table, against the headline target
    assert "## Tokens per run" in md
    html = paths["html"].read_text()
    # the four axes, every arm, cost to target, waterfall, price sweep, ablations
    assert html.count("data:image/png;base64") == 9 and "<table>" in html
    assert md.count("**Verdict rule.**") == 1 and md.count("A claim is **yes** only when") == 1  # stated once


def test_summary_json_has_the_numbers(report):
    _, paths = report
    summary = json.loads(paths["summary"].read_text())
    (grpo_sec,) = [s for s in summary["sections"] if s["setting"] == "grpo"]
    assert grpo_sec["tuned"] == ["none", 2 * LR]
    assert {c["name"] for c in grpo_sec["decomposition"]} >= {
        "renormalisation",
        "cost-aware sampling at a matched step",
    }
    assert set(grpo_sec["plateau"]) >= {"plateaued", "rise", "peak_index"}
    claim = grpo_sec["claims"][0]
    # p* feeds 0.6 of GRPO's PO tokens per round for the same per-round gain, and generates as much
    assert claim["total_cost"]["lo"] > 0 and claim["po_tokens"]["lo"] > 0
    assert claim["po_tokens"]["value"] > claim["total_cost"]["value"] > 0 and "generated_tokens" in claim


def test_controlled_clock_is_labelled_so(tmp_path):
    runs = make_runs("none", seeds=range(2), controlled=True) + make_runs("p_star", seeds=range(2), controlled=True)
    md = grpo.write_report(runs, tmp_path, command="c")["markdown"].read_text()
    assert "PO wall s (controlled)" in md and "contended" not in md


def test_numbers_do_not_depend_on_display_labels(tmp_path, monkeypatch):
    """Renaming every label changes the words, never the numbers: the report keys on typed arms."""
    runs = headline(seeds=range(2))
    a = json.loads(grpo.write_report(runs, tmp_path / "a", command="c")["summary"].read_text())
    monkeypatch.setattr(labels, "LABELS", {k: f"X{v}" for k, v in labels.LABELS.items()})
    paths = grpo.write_report(runs, tmp_path / "b", command="c")
    b = json.loads(paths["summary"].read_text())

    def numbers(s):  # everything but the names, which are words
        return [
            {k: v for k, v in c.items() if k not in ("name", "claim", "absent")}
            for c in s["decomposition"] + s["claims"]
        ]

    for sa, sb in zip(a["sections"], b["sections"], strict=True):
        assert numbers(sa) == numbers(sb) and sa["peaks"] == sb["peaks"] and sa["target"] == sb["target"]
        assert len(sa["decomposition"]) == 3 and len(sa["claims"]) == 7
    assert "Xp* beats XGRPO" in Page(paths["html"].read_text()).text


def test_write_report_rejects_no_runs_non_records_and_a_missing_baseline(tmp_path):
    with pytest.raises(ValueError, match="must not be empty"):
        grpo.write_report([], tmp_path, command="c")
    with pytest.raises(ValueError, match="RunResult"):
        grpo.write_report([{"evals": []}], tmp_path, command="c")
    with pytest.raises(ValueError, match="baseline 'nonzero' has no runs"):
        grpo.write_report(make_runs("none", seeds=[0]), tmp_path, command="c", baseline="nonzero")
    # refused before the folder is made or a figure drawn (total costs of 1e308 per token overflow in the plots)
    with pytest.raises(ValueError, match=r"generation_cost must be a finite number >= 0 and <= 1e\+06"):
        grpo.write_report(make_runs("none", seeds=[0]), tmp_path / "r", command="c", generation_cost=1e308)
    assert not (tmp_path / "r").exists()


def test_fidelity_summary_on_records():
    fid = grpo.fidelity_summary(make_runs("p_star", fidelity=True, seeds=range(2)))
    assert fid["arith/grpo"][Arm("p_star")]["pearson"] == {"mean": 0.6, "min": 0.6, "max": 0.6, "n": 2}


def test_arm_stats_against_hand_computed_values():
    """Two seeds on the same x: the seed-mean curve is the plain mean; its crossing and peak are read off it."""
    from costaware.experiments.records import EvalPoint, RunId, RunResult

    def run(acc, seed):
        rid = RunId(task="t", method="none", seed=seed, learning_rate=LR, loss_type="grpo")
        return RunResult(
            rid, tuple(EvalPoint(2 * i, 100 * i, 300 * i, a, po_seconds=float(i)) for i, a in enumerate(acc))
        )

    runs = [run([0.2, 0.4, 0.5, 0.6], 0), run([0.2, 0.6, 0.5, 0.4], 1)]  # mean 0.2, 0.5, 0.5, 0.5
    st = grpo.arm_stats(runs, 0.35, 300.0, generation_cost=0.5, n_boot=200)
    assert st.peak == pytest.approx(0.5) and st.seeds == 2
    assert st.to_target["po_tokens"] == pytest.approx(50.0, rel=0.02)  # 0.2 → 0.5 over [0, 100]: 0.35 at 50
    assert st.to_target["rounds"] == pytest.approx(1.0, rel=0.02)
    assert st.to_target["total_cost"] == pytest.approx(50.0 + 0.5 * 150.0, rel=0.02)
    assert st.auc == pytest.approx((0.35 * 100 + 0.5 * 200) / 300, rel=0.01)
    assert st.po_seconds == 3.0
