"""The report's opening and verdicts: one set of comparisons behind both, no interval or verdict below three seeds,
the verdicts across prices and targets from the same bootstrap, one fixed style per method, and the page as a
browser lays it out."""

from __future__ import annotations

import json
import re

import matplotlib.axes
import numpy as np
import pytest
from report_fixtures import headline, make_runs, rollout_runs
from report_html import Page, chromium, layout, markdown_tables, save_artefact, screenshot

from costaware.experiments.arms import Arm
from costaware.experiments.records import RunResult
from costaware.report import evidence, grpo, labels, opening, sweeps
from costaware.report.curves import Estimate
from costaware.report.verdicts import RULE, Verdict, fmt, verdict


def _verdicts_listed(md: str, section: str) -> dict[str, str]:
    """claim -> verdict word, from the verdict list of one section ("- claim: **yes**. To reach …")."""
    body = md.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in body.split("### Verdicts", 1)[1].splitlines():
        m = re.match(r"- (.+?): (?:\*\*(.+?)\*\*|(no verdict \(\d+ seeds?\)))", line)
        if m:
            out[m.group(1).replace("\\", "")] = m.group(2) or m.group(3)
    return out


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    """Five seeds; the validation split prefers GRPO at 2× LR, and raw p* is the best cost-aware arm on validation,
    so the tuned comparison in the decomposition (tuned → best) is not the claim (tuned → p*)."""
    runs = headline(seeds=range(5)) + make_runs("none", lr=2e-4, scale=8.0, val_shift=0.02, seeds=range(5))
    runs += rollout_runs(seeds=range(5))
    out = tmp_path_factory.mktemp("five")
    return runs, grpo.write_report(runs, out, command="c")


def test_opening_rows_are_the_claims_objects(five):
    """The opening reads the very Comparison objects the verdict list reads: they cannot disagree."""
    runs, _ = five
    sec = evidence.sections(runs, "none")[0]
    ev = evidence.evaluate_section(sec, "none", n_boot=300)
    rows = opening.rows([ev])
    assert [r.claim for r in rows] == [c for c, _, _ in ev.claims]
    assert all(r.comparison is c for r, (_, c, _) in zip(rows, ev.claims, strict=True))


def test_opening_table_and_verdict_list_agree_in_the_rendered_report(five):
    _, paths = five
    md = paths["markdown"].read_text()
    table = markdown_tables(md)[0]
    assert table[0] == ["claim", "total-cost saving [95% CI]", "verdict"]
    opening_verdicts = {r[0]: r[2] for r in table[1:] if " / " not in r[0]}  # the headline section's rows
    listed = _verdicts_listed(md, "arith / grpo")
    assert set(opening_verdicts) == set(listed) and len(listed) >= 5
    for claim, word in opening_verdicts.items():
        assert word == listed[claim], claim
    assert opening_verdicts["p* beats GRPO, learning rate tuned on validation"] in (
        "yes",
        "no, it is worse",
        "not shown",
    )
    summary = json.loads(paths["summary"].read_text())
    claims = {c["claim"]: c.get("verdict") for c in summary["sections"][0]["claims"]}
    assert all(claims[o["claim"]] == o["verdict"] for o in summary["opening"] if o["section"] == ["arith", "grpo"])
    # the sentences under the table speak from the same numbers: the saving over GRPO as the table prints it
    first = table[1]
    assert first[0] == "p* beats GRPO" and f"(saving {first[1]}, 5 seeds)" in md


def test_the_sentences_name_the_effect_the_numbers_show(five):
    """Synthetic: nonzero saves against GRPO (fewer PO tokens a round for the same gain); p* saves more again."""
    _, paths = five
    md = paths["markdown"].read_text()
    para = md.split("\n\n")[3]  # the title, which method to use, the table, then the sentences
    assert para.startswith("A user who switches from GRPO to p\\* reaches the target accuracy")
    assert "Both effects add to the saving: dropping the zero-advantage rows (nonzero against GRPO:" in para


@pytest.mark.parametrize("seeds", [1, 2])
def test_too_few_seeds_give_no_interval_and_no_verdict(tmp_path, seeds):
    runs = headline(seeds=range(seeds)) + make_runs("none", setting="cispo", seeds=range(seeds))
    runs += make_runs("p_star", setting="cispo", seeds=range(seeds))
    paths = grpo.write_report(runs, tmp_path, command="c")
    md, html = paths["markdown"].read_text(), paths["html"].read_text()
    text = Page(html).text
    assert "CI excludes zero" not in text and "within noise" not in text
    said = md.replace(RULE, "")  # the rule names the verdicts once
    for word in ("**yes**", "**no, it is worse**", "**not shown**"):
        assert word not in said
    for t in markdown_tables(md):
        for row in t:
            assert not any(
                c in ("yes", "not shown") or c.endswith((", yes", ", no, it is worse", ", not shown")) for c in row
            ), row
    table = [r for r in markdown_tables(md)[0] if not r[2].startswith("cannot say")]  # a pair not run: said so
    assert len(table) >= 5 and all(r[2] == f"no verdict ({seeds} seed{'s' if seeds > 1 else ''})" for r in table[1:]), (
        table
    )
    assert all(
        r[1].endswith(f"({seeds} seed{'s' if seeds > 1 else ''}: no interval)") and "[" not in r[1] for r in table[1:]
    )
    assert f"With {seeds} seed{'s' if seeds > 1 else ''}: no interval, these are point estimates" in md
    summary = json.loads(paths["summary"].read_text())
    assert {o["verdict"] for o in summary["opening"]} == {"no verdict", None}
    assert all(o["saving"]["lo"] is None for o in summary["opening"] if o["saving"])


@pytest.mark.parametrize("mod", ["verdicts", "figures", "labels"])
def test_docstring_examples_run(mod):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"costaware.report.{mod}"))
    assert result.attempted > 0 and result.failed == 0


def test_verdict_rule():
    assert verdict(Estimate(0.1, 0.01, 0.2, seeds=3)) is Verdict.YES
    assert verdict(Estimate(-0.1, -0.2, -0.01, seeds=5)) is Verdict.NO
    assert verdict(Estimate(0.1, -0.01, 0.2, seeds=5)) is Verdict.NOT_SHOWN
    assert verdict(Estimate(0.1, 0.1, 0.1, seeds=2)) is Verdict.NO_INTERVAL
    assert fmt(Estimate(-0.001, -0.001, -0.001, seeds=1)) == "0% (1 seed: no interval)"  # never "-0%"


# --- prices and targets ---------------------------------------------------------------------------------------


def _pair(seeds=range(5)):
    """A saves nothing per round; B spends 0.6 of A's PO tokens and 1.5× its generated tokens a round."""
    runs = make_runs("none", po_per_round=5000, gen_per_round=4000, n_evals=61, noise=0.002, seeds=seeds)
    runs += make_runs("nonzero", po_per_round=3000, gen_per_round=6000, n_evals=61, noise=0.002, seeds=seeds)
    sec = evidence.sections(runs, "none")[0]
    return sec, (Arm("none"), sec.default_lr), (Arm("nonzero"), sec.default_lr)


def test_price_sweep_is_the_po_saving_at_zero_and_tends_to_the_generated_saving():
    sec, a, b = _pair()
    target = 0.5
    zero, huge = sweeps.price_savings(sec, a, b, target, [0.0, 1e5], n_boot=500)
    assert zero == evidence.axis_saving(
        sec, a, b, "po_tokens", target, 1 / 3, 500, 0
    )  # exactly: total cost = PO tokens
    gen = evidence.axis_saving(sec, a, b, "generated_tokens", target, 1 / 3, 500, 0)
    assert zero.value == pytest.approx(0.4, abs=0.03) and gen.value == pytest.approx(-0.5, abs=0.03)
    assert huge.value == pytest.approx(gen.value, abs=1e-3) and huge.lo == pytest.approx(gen.lo, abs=1e-3)
    mid = sweeps.price_savings(sec, a, b, target, np.linspace(0, 10, 21), n_boot=200)
    assert all(x.value >= y.value for x, y in zip(mid, mid[1:], strict=False))  # dearer generation: B saves less


def test_price_sweep_uses_the_verdicts_bootstrap(five):
    runs, _ = five
    sec = evidence.sections(runs, "none")[0]
    ev = evidence.evaluate_section(sec, "none", n_boot=400, generation_cost=1.0)
    rows = sweeps.price_claims(ev, prices=(1 / 3, 1.0, 3.0), n_boot=400)
    claims = [(n, c) for n, c, _ in ev.claims if c is not None]
    assert [r.claim for r in rows] == [n for n, _ in claims]
    for row, (_, c) in zip(rows, claims, strict=True):
        assert row.savings[1] == c.savings["total_cost"]  # the same Estimate, CI and all


def test_price_sweep_rejects_a_bad_price():
    sec, a, b = _pair(range(3))
    with pytest.raises(ValueError, match="prices must be finite numbers >= 0, got -1"):
        sweeps.price_savings(sec, a, b, 0.5, [-1.0])


def test_target_sweep_at_the_jobs_fraction_is_the_verdict(five):
    runs, _ = five
    sec = evidence.sections(runs, "none")[0]
    ev = evidence.evaluate_section(sec, "none", n_boot=300)
    rows = sweeps.target_claims(ev, fractions=(0.9, 0.95, 0.98), n_boot=300)
    for row, (_, c, _) in zip(rows, [x for x in ev.claims if x[1] is not None], strict=True):
        assert row.savings[1] == c.savings["total_cost"]


def test_a_saving_that_holds_at_one_target_says_so():
    yes, no = Estimate(0.2, 0.1, 0.3, seeds=5), Estimate(0.1, -0.1, 0.3, seeds=5)
    assert sweeps.TargetRow("c", (no, yes, no)).note == "holds at only one target"
    assert sweeps.TargetRow("c", (yes, yes, no)).note == "holds at 2 of 3 targets"
    assert sweeps.TargetRow("c", (yes, yes, yes)).note == ""
    assert sweeps.TargetRow("c", (None, yes, no)).note == "holds at only one target"
    one = Estimate(0.2, 0.2, 0.2, seeds=1)
    assert sweeps.TargetRow("c", (one, one, one)).note == ""  # no interval: nothing holds


def test_measured_ratio_by_hand():
    a, b = make_runs("none", seeds=[0, 1])  # last eval: 300k PO tokens in 30 s, rounds 60 × 4000 generated
    a = RunResult(a.id, a.evals, generation_seconds=48.0)
    b = RunResult(b.id, b.evals, generation_seconds=24.0)
    gen = a.evals[-1].generated_tokens
    want = ((48 + 24) / (2 * gen)) / (60 / 600_000)
    assert sweeps.measured_ratio([a, b]) == pytest.approx(want)
    assert sweeps.measured_ratio(make_runs("none", seeds=[0])) is None  # no generation time recorded


def test_report_has_the_price_and_target_tables(five):
    _, paths = five
    md = paths["markdown"].read_text()
    assert (
        "## Verdicts at other prices of a generated token" in md and "| claim | g = 1/3 | g = 1 | g = 3 | note |" in md
    )
    assert "arXiv:2509.21009" in md and "arXiv:2509.18521" in md  # the GPU timings, cited
    assert "## Verdicts at other targets" in md and "| claim | 90%: " in md
    assert paths["price_sweep"].stat().st_size > 10_000 and paths["waterfall"].stat().st_size > 10_000
    summary = json.loads(paths["summary"].read_text())
    sec = summary["sections"][0]
    assert {"1/3", "1", "3"} <= set(sec["prices"][0]) and {"0.9", "0.95", "0.98"} <= set(sec["targets"][0])
    assert len(next(iter(sec["price_sweep"].values()))) == len(sweeps.SWEEP)
    assert len(summary["runs"]) == 5 * 6 + 5 * 5 and all("spec" in r for r in summary["runs"])


# --- styles -----------------------------------------------------------------------------------------------------


def _drawn_colours(monkeypatch, runs, tmp_path) -> dict[str, str]:
    """The colour of every labelled line of every figure of a report, by label; one colour per label."""
    seen: dict[str, set[str]] = {}
    real = matplotlib.axes.Axes.plot

    def plot(self, *args, **kw):
        if "label" in kw and "color" in kw:
            seen.setdefault(kw["label"].split(" (n=")[0], set()).add(kw["color"])
        return real(self, *args, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    grpo.write_report(runs, tmp_path, command="c")
    assert all(len(c) == 1 for c in seen.values()), seen  # the same in every panel and figure
    return {k: c.pop() for k, c in seen.items()}


def test_a_method_has_one_colour_whatever_else_the_report_holds(monkeypatch, tmp_path):
    full = _drawn_colours(monkeypatch, headline(seeds=range(3)) + make_runs("p_smooth", seeds=range(3)), tmp_path / "a")
    few = make_runs("none", seeds=range(3)) + make_runs("nonzero", po_per_round=3750, seeds=range(3))
    few += make_runs("pods", po_per_round=3100, scale=15.0, seeds=range(3))
    part = _drawn_colours(monkeypatch, few, tmp_path / "b")
    assert {"GRPO", "nonzero", "PODS"} <= set(part) and len(full) > len(part)
    for name in part:
        assert part[name] == full[name], name
    assert len({full[n] for n in ("GRPO", "nonzero", "p*", "PODS", "p*_smooth(0.01)")}) == 5


def test_style_table():
    assert len({s.colour for s in labels.STYLES.values()}) == len(labels.STYLES)  # one colour per method
    raw = labels.style(Arm("p_star", weights="raw"))
    assert raw.colour == labels.style(Arm("p_star")).colour and raw != labels.style(Arm("p_star"))
    with pytest.raises(TypeError, match="arm must be an Arm"):
        labels.style("p_star")


# --- the page in a browser --------------------------------------------------------------------------------------


def test_the_first_screen_holds_the_opening_table(five, tmp_path):
    if chromium() is None:
        pytest.skip("no Chromium (scripts/install_browser.sh installs it)")
    _, paths = five
    got = layout(paths["html"])
    assert got["opening_text"].startswith("claim\ttotal-cost saving [95% CI]\tverdict")
    # which method to use sits above the table: on the first screen with it
    assert Page(paths["html"].read_text()).paragraphs[0]["text"].startswith("Which method to use. At this job's")
    assert 0 < got["opening_bottom"] <= got["viewport"][1], got  # all of it on the first screen
    assert got["page_width"] <= 1280  # nothing wider than the window
    screenshot(paths["html"], tmp_path / "first.png")
    assert (tmp_path / "first.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    save_artefact(paths["html"], "report-synthetic")


def test_a_long_arm_is_cut_from_the_rounds_axis_and_the_report_says_so(tmp_path):
    """PODS spends five times GRPO's rounds: the rounds axis ends at 1.25 × the median arm's last round."""
    runs = make_runs("none", seeds=range(3)) + make_runs("nonzero", po_per_round=3750, seeds=range(3))
    runs += make_runs("p_star", po_per_round=3000, seeds=range(3))
    runs += make_runs("pods", po_per_round=1000, scale=50.0, seeds=range(3))
    md = grpo.write_report(runs, tmp_path, command="c")["markdown"].read_text()
    assert "Cut here: arith/grpo: PODS" in md
    from costaware.report.figures import x_limit

    assert x_limit([60, 80, 100, 300]) == pytest.approx(1.25 * 90)
