"""The report's last stage: ``report.html``, one self-contained page rendered through a Jinja2 template
(``templates/report.html.j2``).

Each Markdown part (``report.markdown_report``) is rendered by Python-Markdown with its tables extension and a
tree processor that puts every figure's PNG into its ``<img>`` as a data URL; the template places the parts by
name: the opening table in ``#opening`` (the rendering tests find it there), and the list of every run, which
only the page shows, folded under what ran.
"""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import jinja2
import markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor
from markupsafe import Markup

from costaware.report.draw import ReportFigures
from costaware.report.markdown_report import OPENING_TABLE, WHAT_RAN, MarkdownPart

__all__ = ["render_html", "TEMPLATE"]

TEMPLATE = "report.html.j2"
PAGE_TITLE = "costaware reproduce"


class _InlineFigures(Treeprocessor):
    """Replaces an ``<img>`` source that names a drawn figure by the figure's data URL."""

    def __init__(self, md: markdown.Markdown, data_urls: Mapping[str, str]) -> None:
        super().__init__(md)
        self.data_urls = data_urls

    def run(self, root: ET.Element) -> None:
        for img in root.iter("img"):
            url = self.data_urls.get(img.get("src", ""))
            if url is not None:
                img.set("src", url)
                img.set("style", "max-width:100%")


class _InlineFiguresExtension(Extension):
    def __init__(self, data_urls: Mapping[str, str]) -> None:
        super().__init__()
        self.data_urls = data_urls

    def extendMarkdown(self, md: markdown.Markdown) -> None:  # noqa: N802 (Python-Markdown's name)
        # after the inline processor (priority 20), which makes the <img> elements
        md.treeprocessors.register(_InlineFigures(md, self.data_urls), "costaware_inline_figures", 5)


@dataclass(frozen=True)
class _Block:
    name: str
    html: Markup


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("costaware.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def _data_urls(figures: ReportFigures) -> dict[str, str]:
    return {
        path.name: "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
        for path in figures.paths.values()
    }


def render_html(parts: Sequence[MarkdownPart], figures: ReportFigures, run_list: Sequence[str]) -> str:
    """The page: every part of the report, its figures inlined, and ``run_list`` (Markdown table lines)."""
    inline = _InlineFiguresExtension(_data_urls(figures))

    def html(lines: Sequence[str]) -> Markup:
        # Markdown's output is the page's HTML: trusted, not text to escape
        return Markup(markdown.markdown("\n".join(lines), extensions=["tables", inline]))

    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            title=PAGE_TITLE,
            blocks=[_Block(part.name, html(part.lines)) for part in parts],
            run_list=html(run_list),
            opening_table=OPENING_TABLE,
            what_ran=WHAT_RAN,
        )
    )
