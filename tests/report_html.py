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


# --- a headless browser (Chromium from the system packages: scripts/install_browser.sh) -------------------------

SCREEN = (1280, 900)  # the first screen a reader sees


def chromium() -> str | None:
    """The Chromium binary, or None; under CI=true a missing browser is an error, not a skip."""
    import os
    import shutil

    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI=true but no Chromium: run scripts/install_browser.sh")
    return None


def _run(args: list[str], timeout: float = 120) -> str:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as home:  # a fresh profile: no state from another run
        out = subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={home}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    return out.stdout


def screenshot(html_path, png_path, *, width: int = SCREEN[0], height: int = SCREEN[1]) -> None:
    """A screenshot of the page at ``width`` × ``height`` px."""
    from pathlib import Path

    _run([f"--window-size={width},{height}", f"--screenshot={png_path}", Path(html_path).resolve().as_uri()])


def layout(html_path, *, width: int = SCREEN[0], height: int = SCREEN[1]) -> dict:
    """Where the page puts things, as the browser lays it out at ``width`` × ``height``: the bottom of the
    opening table (``#opening``) and of the page, and the page's first table's text, read back through the DOM."""
    import json
    import re
    import shutil
    import tempfile
    from pathlib import Path

    probe = (
        "<script>window.addEventListener('load',()=>{const t=document.querySelector('#opening table');"
        "const r=t?t.getBoundingClientRect():null;const d=document.createElement('pre');d.id='probe';"
        "d.textContent=JSON.stringify({opening_bottom:r?r.bottom:null,opening_width:r?r.width:null,"
        "page_width:document.documentElement.scrollWidth,viewport:[innerWidth,innerHeight],"
        "opening_text:t?t.innerText:''});document.body.appendChild(d);});</script>"
    )
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        shutil.copy(html_path, page)
        page.write_text(page.read_text().replace("</body>", probe + "</body>"))
        dom = _run([f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()])
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    if m is None:
        raise AssertionError("the probe did not run: " + dom[-500:])
    import html as _html

    return json.loads(_html.unescape(m.group(1)))


def save_artefact(html_path, name: str) -> None:
    """A 1280-px-wide screenshot of the report's first screen and of the whole page, into $COSTAWARE_ARTEFACTS
    (default ``artefacts/`` in the working directory) when a browser is present."""
    import os
    from pathlib import Path

    if chromium() is None:
        return
    folder = Path(os.environ.get("COSTAWARE_ARTEFACTS", "artefacts"))
    folder.mkdir(parents=True, exist_ok=True)
    screenshot(html_path, folder / f"{name}.png")
    screenshot(html_path, folder / f"{name}-full.png", height=16000)
