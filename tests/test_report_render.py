"""The report as a person sees it: labels with Markdown's own characters (``|``, ``*``, ``_``) render as
written, every table row has its header's columns, and the figures fit a page."""

from __future__ import annotations

import doctest
import struct

import markdown
import pytest
from report_fixtures import hand_logs, headline, make_runs, rollout_runs
from report_html import Page, gfm_cells, markdown_tables

from costaware.report import grpo, labels, md

NASTY = ["p* (paper's proxy |A|)", "J(p_|A|)/J(p*_true)", "p*_smooth(0.01)", "a_b_c *x* `y` [z](w) [u][v] <b> \\ |"]


def test_md_docstring_examples_run():
    result = doctest.testmod(md)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("text", NASTY)
def test_escape_renders_as_written_in_a_sentence_and_in_a_cell(text):
    page = Page(
        markdown.markdown(
            f"Said: {md.escape(text)} here.\n\n" + "\n".join(md.table(["a", "b"], [[text, "x"]])), extensions=["tables"]
        )
    )
    assert page.paragraphs[0]["text"] == f"Said: {text} here." and not page.paragraphs[0]["inline"]
    ((header, row),) = page.tables
    assert [c["text"] for c in row] == [text, "x"] and not row[0]["inline"]
    assert gfm_cells(md.table(["a", "b"], [[text, "x"]])[2]) == [text, "x"]  # as GitHub splits it


def test_table_refuses_a_row_of_another_width():
    with pytest.raises(ValueError, match="3 cells and the header 2"):
        md.table(["a", "b"], [["1", "2", "3"]])
    assert md.code("a|b") == "a\\|b" and md.code("x") == "`x`"  # no '|' inside a code span: renderers differ


def _records():
    runs = headline(seeds=range(2)) + make_runs("p_smooth", fidelity=True, seeds=range(2))
    for setting in ("cispo", "dapo", "grpo+zvf"):
        runs += make_runs("none", setting=setting, seeds=range(2)) + make_runs(
            "p_star", setting=setting, seeds=range(2)
        )
        runs += make_runs(
            "p_star", setting=setting, proxy="advantage", fidelity=True, po_per_round=3300, seeds=range(2)
        )
    runs += make_runs("p_star", group="ablation", proxy_noise=0.1, po_per_round=3000, seeds=[0])
    return runs + rollout_runs(seeds=range(2))  # a prompt-stage section: its target, prompt and prediction tables


@pytest.fixture(scope="module")
def nasty_report(tmp_path_factory):
    """Five settings; every label holds '|', '*' and '_', as "p* (paper's proxy |A|)" does."""
    mp = pytest.MonkeyPatch()
    mp.setattr(labels, "LABELS", {k: f"{v} |x*_" for k, v in labels.LABELS.items()})
    try:
        out = tmp_path_factory.mktemp("nasty")
        runs = _records()
        logs = hand_logs([r for r in runs if r.id.method in ("none", "nonzero") and r.id.rollout == "all"], out)
        paths = grpo.write_report(runs, out, command="costaware reproduce --set a=|b", profile={"t": "a|b"}, logs=logs)
    finally:
        mp.undo()
    return paths


def _commonmark(text: str) -> str:
    """The Markdown as a CommonMark renderer with GitHub's tables draws it (markdown-it-py)."""
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py is not installed")
    return markdown_it.MarkdownIt("commonmark").enable("table").render(text)


@pytest.mark.parametrize("renderer", ["python-markdown", "commonmark"])
def test_every_html_table_row_has_the_header_columns_and_every_cell_its_text(nasty_report, renderer):
    md_text = nasty_report["markdown"].read_text()
    html = nasty_report["html"].read_text()
    runs = Page(html[html.index("<details>") : html.index("</details>")]).tables  # the run list: in the HTML only
    assert len(runs) == 1 and len(runs[0]) > 10 and all(len(r) == len(runs[0][0]) for r in runs[0])
    html = html[: html.index("<details>")] + html[html.index("</details>") :]
    page = Page(html if renderer == "python-markdown" else _commonmark(md_text))
    want = markdown_tables(md_text)
    assert len(page.tables) == len(want) >= 6 and sum(len(t) for t in want) > 40
    for html_rows, md_rows in zip(page.tables, want, strict=True):
        header = html_rows[0]
        assert all(c["tag"] == "th" for c in header)
        for html_row, md_row in zip(html_rows, md_rows, strict=True):
            # Python-Markdown and GitHub pad or drop cells to the header's count without a word, so the
            # HTML's column count alone cannot fail: the Markdown row must split into as many cells, and
            # each HTML cell must hold its whole text, unformatted.
            assert len(html_row) == len(header) == len(md_row), md_row
            assert [c["text"] for c in html_row] == md_row
            assert not {t for c in html_row for t in c["inline"]} - {"code"}, html_row
    cells = {c["text"] for t in page.tables for r in t for c in r}
    assert {
        "p* |x*_ (paper's proxy |A|)",
        "p*_smooth(0.01) |x*_",
        "GRPO |x*_",
        "p* |x*_ (cost-aware skip, biased)",
        "last_status+a0.1",
        "greso (biased skip): share of generated tokens skipped / of Σ|A| lost",
    } <= cells


@pytest.mark.parametrize("renderer", ["python-markdown", "commonmark"])
def test_sentences_render_labels_as_written(nasty_report, renderer):
    md_text = nasty_report["markdown"].read_text()
    page = Page(nasty_report["html"].read_text() if renderer == "python-markdown" else _commonmark(md_text))
    assert "J(p_|A|)/J(p*_true) = 1 + χ²" in page.text
    assert "p* |x*_ beats p* |x*_ (paper's proxy |A|):" in page.text
    assert "Plateau check: GRPO |x*_" in page.text
    assert "p* |x*_ (cost-aware skip, biased): target not met: 2 seeds; the target needs CIs over ≥ 5" in page.text
    assert "Row level, predicted beside measured: J(p*)/J(uniform on the non-zero rows) =" in page.text
    assert "Command: costaware reproduce --set a=|b" in page.text
    for p in page.paragraphs:  # emphasis only where the report means it: bold verdicts and figures
        if "|x*_" in p["text"] or "J(p_" in p["text"]:
            assert "em" not in p["inline"], p["text"]


def _png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_figures_fit_a_page_two_panels_a_row(nasty_report, tmp_path):
    for axis in ("total_cost", "po_tokens", "generated_tokens", "rounds"):
        w, h = _png_size(nasty_report[axis])  # five settings: a 2 x 3 grid
        assert w <= 1200 and h > w * 0.8, (w, h)
    one = grpo.write_report(headline(seeds=range(2)), tmp_path, command="c")
    w1, h1 = _png_size(one["po_tokens"])
    assert w1 <= 650 and h1 < 0.75 * h
    assert _png_size(nasty_report["ablations"])[0] <= 650


def test_the_report_states_each_tasks_cost_structure_from_its_neutral_runs_logs(nasty_report):
    """The GRPO and nonzero runs' per-prompt logs give a cost-structure row per task (a TASK_SECTIONS entry)."""
    md_text = nasty_report["markdown"].read_text()
    assert "## Cost structure: can p* choose between a group's responses?" in md_text
    head = md_text.index("## Cost structure")
    rows = [line for line in md_text[head:].splitlines()[:20] if line.startswith("| ") and "mixed groups" not in line]
    assert rows and all(len(r.split(" | ")) == 9 for r in rows)
