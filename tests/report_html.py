"""Reading a rendered report as a person sees it: its HTML tables and text (stdlib ``html.parser``), and
the cells of a Markdown table row as GitHub splits them."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class Page(HTMLParser):
    """Every table as rows of cells (cell: its text and the inline tags inside it), and the page's text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[dict]]] = []
        self.paragraphs: list[dict] = []
        self._cell: dict | None = None
        self._para: dict | None = None
        self.text_parts: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = {"tag": tag, "text": "", "inline": []}
            self.tables[-1][-1].append(self._cell)
        elif tag in ("p", "li"):
            self._para = {"text": "", "inline": []}
            self.paragraphs.append(self._para)
        for holder in (self._cell, self._para):
            if holder is not None and tag in ("em", "strong", "code", "a", "img"):
                holder["inline"].append(tag)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = None
        elif tag in ("p", "li"):
            self._para = None

    def handle_data(self, data):
        self.text_parts.append(data)
        for holder in (self._cell, self._para):
            if holder is not None:
                holder["text"] += data

    @property
    def text(self) -> str:
        return re.sub(r"\s+", " ", "".join(self.text_parts))


def gfm_cells(line: str) -> list[str]:
    """The cells of a Markdown table row split as GitHub does (at every ``|`` not escaped by a
    backslash, code spans included), unescaped."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    cells, cur, i = [], "", 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            cur += body[i : i + 2]
            i += 2
            continue
        if ch == "|":
            cells.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur)
    return [re.sub(r"\\([\\`*_\[\]|])", r"\1", c.strip()).replace("&lt;", "<").strip("`") for c in cells]


def markdown_tables(md: str) -> list[list[list[str]]]:
    """The tables of a Markdown text, each as its rows of cells (``gfm_cells``), the delimiter row left out."""
    tables, cur = [], None
    for line in md.splitlines():
        if line.startswith("|"):
            if cur is None:
                cur = []
                tables.append(cur)
            if not re.fullmatch(r"\|(-+\|)+", line.strip()):
                cur.append(gfm_cells(line))
        else:
            cur = None
    return tables
