"""A griffe extension for the docs site (mkdocs.yml, ``mkdocstrings`` handler ``extensions``): the docstrings are
written for ``help()`` and doctest, in reStructuredText habits, and this turns those habits into the Markdown that
mkdocstrings renders, leaving the source untouched.

- Sphinx roles (``:class:`Name```, ``:func:`~pkg.mod.f```, ``:mod:`pkg.mod```, ...) become cross-references to the
  object's canonical path, as inline code. They are optional references: a target the API pages do not render shows
  as code without a link, never as a broken reference (which would fail ``mkdocs build --strict``).
- Doctest blocks (a run of lines from a ``>>>`` line up to a blank line) become ``pycon`` code blocks; as bare
  Markdown their ``>`` would start nested block quotes.
- A reStructuredText literal block (a paragraph ending in ``::`` and the indented block after it) becomes a code block,
  the paragraph ending in one ``:``.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections.abc import Callable

ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|data|mod|attr|obj|exc|const):`(?P<body>[^`]+)`")
EXPLICIT_TITLE = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
FENCE = re.compile(r"^\s*(```|~~~)")
CALLABLE_ROLES = ("func", "meth")

Resolver = Callable[[str], "str | None"]


def role_target(role: str, body: str) -> tuple[str, str]:
    """(text shown, dotted target) of one role, as Sphinx shows it: ``~a.b.c`` shows ``c``, ``title <a.b>`` shows
    ``title``, and a function or method gets ``()``."""
    explicit = EXPLICIT_TITLE.match(body)
    if explicit:
        return explicit["title"], explicit["target"].lstrip("~.")
    target = body.lstrip("~.")
    shown = target.rsplit(".", 1)[-1] if body.startswith("~") else target
    if role in CALLABLE_ROLES and not shown.endswith(")"):
        shown += "()"
    return shown, target


def convert_roles(text: str, resolve: Resolver) -> str:
    """Every Sphinx role in ``text`` as an optional autorefs cross-reference (inline code, linked when the target is
    on a page). ``resolve`` maps a target as written to its full dotted path, or None when unknown."""

    def one(m: re.Match[str]) -> str:
        shown, target = role_target(m["role"], m["body"])
        code = "<code>" + html.escape(shown) + "</code>"
        path = resolve(target)
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    return ROLE.sub(one, text)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def fence_blocks(text: str) -> str:
    """Doctest blocks and reStructuredText literal blocks of a (dedented) docstring as fenced code blocks; lines
    already inside a fence stay as they are."""
    lines = text.split("\n")
    out: list[str] = []
    i, fenced = 0, False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
            i += 1
            continue
        if fenced:
            out.append(line)
            i += 1
            continue
        if line.lstrip().startswith(">>>"):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            pad = " " * _indent(line)
            out += [pad + "```pycon", *lines[i:end], pad + "```"]
            i = end
            continue
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            # the literal block: the indented lines after one or more blank lines
            start = i + 1
            while start < len(lines) and not lines[start].strip():
                start += 1
            end = start
            while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(line)):
                end += 1
            while end > start and not lines[end - 1].strip():
                end -= 1
            if end > start:
                head = line.rstrip()[:-2].rstrip()
                pad = " " * _indent(line)
                if head.strip():
                    out += [head + ":", ""]
                body = textwrap.dedent("\n".join(lines[start:end])).split("\n")
                lang = "pycon" if body[0].startswith(">>>") else "text"
                out += [pad + "```" + lang, *(pad + b if b else b for b in body), pad + "```"]
                i = end
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def convert(text: str, resolve: Resolver) -> str:
    """A docstring's reStructuredText habits as Markdown: code blocks first, then roles outside them."""
    parts = re.split(r"(^[ \t]*```[^\n]*\n.*?^[ \t]*```[ \t]*$)", fence_blocks(text), flags=re.S | re.M)
    return "".join(part if k % 2 else convert_roles(part, resolve) for k, part in enumerate(parts))


try:
    import griffe
except ImportError:  # the pure functions above stay importable without the docs extra
    griffe = None  # type: ignore[assignment]

if griffe is not None:

    def _resolver(obj: griffe.Object, collection: griffe.ModulesCollection) -> Resolver:
        def resolve(target: str) -> str | None:
            head, _, rest = target.partition(".")
            if head in collection.members:  # a full path: costaware.grpo.step.plan_round
                path = head
            else:  # a name in the docstring's scope: its module's, or its class's
                try:
                    path = obj.resolve(head)
                except Exception:  # unknown there (a builtin, another library's name): plain code
                    return None
            full = f"{path}.{rest}" if rest else path
            try:
                return str(collection.get_member(full).canonical_path)
            except Exception:  # an external or dynamic target: link by the path as written
                return full

        return resolve

    class RstDocstrings(griffe.Extension):
        """Converts every docstring of the loaded package once, before mkdocstrings parses it."""

        def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: object) -> None:
            self._walk(pkg, loader.modules_collection, set())

        if not hasattr(griffe.Extension, "on_package"):  # older griffe names this hook on_package_loaded

            def on_package_loaded(self, *, pkg: griffe.Module, **kwargs: object) -> None:
                self._walk(pkg, pkg.modules_collection, set())

        def _walk(self, obj: griffe.Object, collection: griffe.ModulesCollection, seen: set[str]) -> None:
            if obj.path in seen:
                return
            seen.add(obj.path)
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, _resolver(obj, collection))
            for member in obj.members.values():
                if not member.is_alias:
                    self._walk(member, collection, seen)  # type: ignore[arg-type]
