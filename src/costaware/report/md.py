"""Markdown from plain text: the one place where the report escapes what it did not write as Markdown.

Labels hold Markdown's own characters. In "p* (paper's proxy |A|)" the ``|`` ends a table cell, so
the row gets a column too many, which GitHub and Python-Markdown both drop without a word; in
"J(p_|A|)/J(p*_true)" the ``*`` and ``_`` pairs italicise what lies between them. Every table of the
report goes through :func:`table`, which escapes every cell, and every label put into a sentence
goes through :func:`escape`; a cell that is already Markdown says so by being :class:`Md`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["Md", "escape", "code", "table"]

# Backslash escapes that CommonMark (GitHub) and Python-Markdown (with its tables extension) both
# honour: the backslash itself, code, emphasis and the cell separator, and a ']' that would close a
# link's text ("[z](w)"); a lone "[0.1, 0.3]" (every CI) is no link and stays as it is, readable in the
# .md file. '<' would start raw HTML and has no backslash escape in Python-Markdown: an entity works in both.
_SPECIAL = re.compile(r"([\\`*_|]|\](?=[(\[]))")


class Md(str):
    """Text that is already Markdown (bold, a code span): :func:`table` leaves it as it is."""


def escape(text: object) -> str:
    r"""``text`` as Markdown that renders as exactly that text.

    >>> escape("p* (paper's proxy |A|)")
    "p\\* (paper's proxy \\|A\\|)"
    >>> escape("J(p_|A|)/J(p*_true) < 1")
    'J(p\\_\\|A\\|)/J(p\\*\\_true) &lt; 1'
    """
    if isinstance(text, Md):
        return str(text)
    return _SPECIAL.sub(r"\\\1", str(text)).replace("<", "&lt;")


def code(text: str) -> Md:
    """A code span. Inside one, GitHub splits a table cell at ``|`` and Python-Markdown does not, and
    neither takes ``\\|`` the same way: text with ``|`` or a backtick is shown escaped instead."""
    if "|" in text or "`" in text:
        return Md(escape(text))
    return Md(f"`{text}`")


def table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table; every cell is escaped unless it is :class:`Md`.

    >>> table(["method", "peak"], [["p*_smooth(0.01)", "0.5"]])
    ['| method | peak |', '|---|---|', '| p\\\\*\\\\_smooth(0.01) | 0.5 |']
    """
    lines = ["| " + " | ".join(escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):  # a programming error: the renderers would pad or drop silently
            raise ValueError(f"a row has {len(row)} cells and the header {len(header)}: {list(row)!r}")
        lines.append("| " + " | ".join(escape(c).replace("\n", " ") for c in row) + " |")
    return lines
