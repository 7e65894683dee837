"""Every figure a page quotes from the settle profile's record is the record's: the pages' settled blocks are
what `python -m costaware.report.settled ... --quote-in` writes from `evidence/settle/settled.json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costaware.report import settled

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "evidence" / "settle" / "settled.json"
PAGES = ("README.md", "docs/evidence.md")


def _block(text: str) -> str:
    i, j = text.index(settled.BLOCK_START) + len(settled.BLOCK_START), text.index(settled.BLOCK_END)
    return text[i:j].strip()


@pytest.mark.parametrize("page", PAGES)
def test_a_page_quotes_the_record(page):
    record = json.loads(RECORD.read_text())
    assert _block((ROOT / page).read_text()) == settled.quoted_block(record)


def test_the_record_is_the_archived_runs_summary():
    """The recorded summary is what the archived runs give: seeds and runs agree with the archive's files."""
    record = json.loads(RECORD.read_text())
    archived = sorted(p.name for p in (RECORD.parent / "runs").glob("*.json.gz"))
    assert record["runs"] == len(archived)
    per_task = {t: sum(len(s) for s in arms.values()) for t, arms in record["seeds"].items()}
    assert sum(per_task.values()) == len(archived)


def test_a_changed_figure_is_caught(tmp_path):
    record = json.loads(RECORD.read_text())
    page = (ROOT / PAGES[0]).read_text()
    if not record["rows"]:
        pytest.skip("the record holds no comparison yet")
    record["rows"][0]["value"] += 0.05  # one figure moved by 5 points
    assert _block(page) != settled.quoted_block(record)


def test_the_readmes_words_on_the_choice_are_the_records():
    """The README says which method the record's rule names wherever a saving is shown; a record that names
    another fails here, so the sentence is rewritten with it."""
    from costaware.report.method_choice import choices

    record = json.loads(RECORD.read_text())
    rows = [settled._row(d) for d in record["rows"]]
    named = {c.left[0] for c in choices(rows, record["verdict_estimator"]) if c.left}
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "On this record that is PODS wherever any saving is shown" in readme
    assert named == {"pods"}
    # "p* beat nonzero at g = 1/3 and g = 1 on sortcheck; on sort it did not at any price"
    assert "p\\* beat `nonzero` at g = 1/3 and g = 1; where they share one length (`sort`), it did not" in readme
    verdicts = {(r.task, round(r.generation_cost, 3)): r.as_dict()["verdict"] for r in rows
                if r.claim == "p* beats nonzero" and r.estimator == record["verdict_estimator"]}  # fmt: skip
    assert verdicts == {
        ("sort", 0.333): "not shown",
        ("sort", 1.0): "not shown",
        ("sort", 3.0): "not shown",
        ("sortcheck:7", 0.333): "yes",
        ("sortcheck:7", 1.0): "yes",
        ("sortcheck:7", 3.0): "not shown",
    }


def test_the_stability_figures_the_pages_quote_are_the_recorded_comparisons():
    """The evidence page's and the README's words on the perturbed job are the recorded comparison's
    (``evidence/settle-jitter/stability-same-seeds.json``)."""
    from costaware.report.settled import estimate_of
    from costaware.report.verdicts import fmt, verdict

    rec = json.loads((ROOT / "evidence" / "settle-jitter" / "stability-same-seeds.json").read_text())
    rows = rec["rows"]
    agree, inside = sum(r["verdicts_agree"] for r in rows), sum(r["savings_inside"] for r in rows)
    page = " ".join((ROOT / "docs" / "evidence.md").read_text().split())
    assert f"the verdicts agree on {agree} of {len(rows)} rows" in page
    assert f"inside the other's CI on {inside} of {len(rows)}" in page
    (row,) = [r for r in rows if r["task"] == "sortcheck:7" and r["claim"] == "p* beats nonzero"
              and r["generation_cost"] == 1.0]  # fmt: skip
    a, b = estimate_of(row["a"]), estimate_of(row["b"])
    quoted = f"{fmt(a)}, {verdict(a).value}, unperturbed and {fmt(b)}, {verdict(b).value}, perturbed"
    assert quoted.replace("-", "−") in page or quoted in page
    assert verdict(a).value == "yes" and verdict(b).value == "not shown"  # the README's sentence says so


GAP_RECORD = ROOT / "evidence" / "gap" / "gap.json"


def test_the_design_page_quotes_the_gap_record():
    from costaware.report import gap

    page = (ROOT / "docs" / "design.md").read_text()
    i, j = page.index(gap.BLOCK_START) + len(gap.BLOCK_START), page.index(gap.BLOCK_END)
    assert page[i:j].strip() == gap.quoted_block(json.loads(GAP_RECORD.read_text()))


def test_the_gap_record_counts_the_archived_runs():
    """The gap record read every archived run of each gap profile, and no profile it does not name."""
    record = json.loads(GAP_RECORD.read_text())
    archived = {
        d.name: len(list((d / "runs").glob("*.json.gz")))
        for d in (ROOT / "evidence").iterdir()
        if d.name.startswith("gap") and (d / "runs").is_dir()
    }
    assert record["runs"] == archived


def test_the_gap_record_is_the_archived_runs_table():  # about 10 s: the row-level J reads every nonzero log
    from costaware.report import gap

    record = json.loads(GAP_RECORD.read_text())
    fresh = json.loads(json.dumps(gap.summary(*gap.load_profiles(ROOT / "evidence"))))
    assert fresh == record


def _gap_figures() -> dict[str, str]:
    """The figures the pages quote from the gap record, as the pages write them."""
    from costaware.report.verdicts import fmt

    record = json.loads(GAP_RECORD.read_text())
    rows = {r["key"]: r for r in record["rows"]}
    ref, oracle = rows["reference"], rows["oracle"]
    ps = next(
        d for d in record["step_errors"]["gap"] if d["arm"] == "p_star" and d["learning_rate"] == ref["p_star_lr"]
    )
    d = settled.estimate_of(oracle["against_reference"])
    cut = 1 - ps["cost_vs_nonzero_measured"]  # the share of the sub-sampling error p* removes at equal tokens
    bound = ref["measured"]["hi"] / cut
    return {
        "bound": f"cutting it to {ps['cost_vs_nonzero_measured']:.2f} moves the total by about {cut:.2f} s, and the "
        f"reference's upper bound of {100 * ref['measured']['hi']:+.0f}% bounds s below about {bound:.0%}: a pool "
        f"noise of {1 - bound:.0%} or more",
        "step": f"with {ps['cost_vs_nonzero_measured']:.2f} of its PO tokens ({ps['cost_vs_nonzero_predicted']:.2f} in "
        "closed",
        "reference": fmt(settled.estimate_of(ref["measured"])),
        "oracle": fmt(settled.estimate_of(oracle["measured"])),
        "gap": f"a gap of {round(100 * ref['gap'])} points",
        "closed": f"{round(100 * d.value)} points [{100 * d.lo:+.0f}, {100 * d.hi:+.0f}] above the reference, "
        f"{d.value / ref['gap']:.0%} of its gap",
    }


def _plain(text: str) -> str:
    return " ".join(text.replace("−", "-").split())


@pytest.mark.parametrize(
    "page, keys",
    [
        ("docs/design.md", ("step", "reference", "oracle", "gap", "closed")),
        ("README.md", ("step", "reference", "oracle")),
    ],
)
def test_the_gap_figures_the_pages_quote_are_the_records(page, keys):
    text = _plain((ROOT / page).read_text())
    figures = _gap_figures()
    for k in keys:
        assert _plain(figures[k]) in text, (k, figures[k])
    record = json.loads(GAP_RECORD.read_text())
    lr = record["rows"][0]["nonzero_lr"]  # the reference's arms
    ratios = [d["measured"] / d["predicted"] for d in record["step_errors"]["gap"] if d["learning_rate"] == lr]
    tuned = next(r for r in record["rows"] if r["key"] == "adamw-tuned")  # "both pick GRPO's", "both arms pick x1"
    assert tuned["nonzero_lr"] == tuned["p_star_lr"] == lr and len(tuned["seeds"]) >= 20
    assert ratios and all(
        0.9 <= r <= 1.1 for r in ratios
    )  # "each arm's measured step error is within 10% of its closed form"
