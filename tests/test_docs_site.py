"""The docs site builds with ``mkdocs build --strict`` and reads as written: the docstrings' Sphinx roles become
inline code (linked where the target has a page), their doctests stay code blocks with their ``>>>`` prompts, lists
are lists and nested lists nested, ``p*`` is not the start of an emphasis, and long code lines wrap instead of
running past the block's edge. The pure conversion of
``scripts/griffe_rst.py`` is checked without MkDocs; the site is built once for this module, and skipped with the
reason when the ``docs`` extra is absent (under ``CI=true`` that fails instead)."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# in a page's text, where the role's backticks have become <code>: ":class:Name"
ROLE_TEXT = re.compile(r":(?:py:)?(?:class|func|meth|data|mod|attr|obj|exc|const):`?[\w~.]")


def _griffe_rst():
    spec = importlib.util.spec_from_file_location("griffe_rst", ROOT / "scripts" / "griffe_rst.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rst = _griffe_rst()


def _known(target: str) -> str | None:
    return {"Foo": "pkg.mod.Foo", "pkg.mod.bar": "pkg.mod.bar"}.get(target)


# --- the conversion, without MkDocs -------------------------------------------------------------------------------


def test_roles_become_optional_references_shown_as_sphinx_shows_them():
    out = rst.convert("See :class:`Foo`, :func:`~pkg.mod.bar`, :py:meth:`the step <Foo.step>` and :mod:`x.y`.", _known)
    assert out == (
        'See <autoref identifier="pkg.mod.Foo" optional><code>Foo</code></autoref>, '
        '<autoref identifier="pkg.mod.bar" optional><code>bar()</code></autoref>, '
        "<code>the step</code> and <code>x.y</code>."
    )


def test_a_doctest_run_becomes_one_pycon_block_up_to_the_blank_line():
    doc = "Text.\n\n>>> f(1)\n2\n>>> g()   # :func:`f` stays as written in code\n'x'\n\nAfter :data:`Foo`."
    out = rst.convert(doc, _known)
    assert out.split("\n") == [
        "Text.",
        "",
        "```pycon",
        ">>> f(1)",
        "2",
        ">>> g()   # :func:`f` stays as written in code",
        "'x'",
        "```",
        "",
        'After <autoref identifier="pkg.mod.Foo" optional><code>Foo</code></autoref>.',
    ]


def test_an_indented_doctest_keeps_its_indentation_inside_the_fence():
    out = rst.fence_blocks("Args:\n    x: a value.\n\n    >>> x = 1\n    >>> x\n    1\n")
    assert "    ```pycon\n    >>> x = 1\n    >>> x\n    1\n    ```" in out


def test_a_literal_block_becomes_a_code_block_and_its_paragraph_ends_in_one_colon():
    doc = "\n".join(
        ["Run it::", "", "    cmd --flag \\", "        --more", "", "    # a comment", "", "Then this.", ""]
        + ["Example::", "", "    >>> 1 + 1", "    2"]
    )
    assert rst.fence_blocks(doc).split("\n") == [
        "Run it:",
        "",
        "```text",
        "cmd --flag \\",
        "    --more",
        "",
        "# a comment",
        "```",
        "",
        "Then this.",
        "",
        "Example:",
        "",
        "```pycon",
        ">>> 1 + 1",
        "2",
        "```",
    ]


def test_existing_fences_are_left_as_they_are():
    doc = "```python\n>>> not_a_doctest_here\nx::\n```\n:class:`Foo`"
    out = rst.convert(doc, _known)
    assert out.startswith("```python\n>>> not_a_doctest_here\nx::\n```\n") and ":class:" not in out


# --- the built site ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python") if not _has(m)]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the docs extra is missing ({', '.join(missing)}): pip install -e '.[docs]'")
        pytest.skip(f"the 'docs' extra is not installed ({', '.join(missing)})")
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}"
    return out


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _pages(site: Path) -> dict[str, str]:
    return {p.relative_to(site).as_posix(): p.read_text() for p in sorted(site.rglob("*.html"))}


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _outside_code(page: str) -> str:
    return re.sub(r"<pre\b.*?</pre>|<code\b.*?</code>", "", page, flags=re.S)


def test_no_page_shows_a_sphinx_role(site):
    shown = {name: ROLE_TEXT.findall(_text(page)) for name, page in _pages(site).items()}
    assert {name: found for name, found in shown.items() if found} == {}


def test_roles_link_to_the_objects_the_api_pages_render(site):
    core = (site / "api" / "core" / "index.html").read_text()
    # :class:`WeightedIndexDataset` in CostAwareSampler's docstring
    assert re.search(
        r'<a class="autorefs autorefs-internal"[^>]*href="#costaware\.sampler\.WeightedIndexDataset"', core
    )
    assert "<autoref" not in core  # every reference was resolved or shown as plain code


def test_doctests_are_code_blocks_with_their_prompts(site):
    api = {name: page for name, page in _pages(site).items() if name.startswith("api/")}
    assert api
    for name, page in api.items():
        assert "<blockquote" not in page, name
        assert "&gt;&gt;&gt;" not in _outside_code(page), f"{name}: a doctest prompt outside a code block"
    blocks = [_text(b) for b in re.findall(r"<pre\b.*?</pre>", api["api/core/index.html"], flags=re.S)]
    assert any(">>> s = CostAwareSampler([1.0, 4.0, 16.0], num_samples=5, seed=0)" in b for b in blocks)
    assert any('>>> SamplingConfig("p_smooth", alpha=0.1).full_support\nTrue' in b for b in blocks)


def test_lists_are_lists(site):
    index = (site / "index.html").read_text()
    assert re.search(r"<ul>\s*<li><strong>CPU only</strong>", index)
    run_in = {
        name: [line for p in re.findall(r"<p>(.*?)</p>", page, flags=re.S) for line in _text(p).split("\n")]
        for name, page in _pages(site).items()
    }
    bullets = {name: [ln for ln in lines if re.match(r"\s*(?:[-*]|\d+\.) \S", ln)] for name, lines in run_in.items()}
    assert {name: found for name, found in bullets.items() if found} == {}


def test_nested_lists_stay_nested(site):
    # Python-Markdown nests a list only under a four-space indent; with less it joins the parent list
    page = (site / "main-job" / "index.html").read_text()
    item = re.search(r"<li>Runs GRPO from that checkpoint.*?</li>\s*<li>Evaluates held-out", page, flags=re.S)
    assert item and re.search(r"<ul>\s*<li>GRPO \(<code>none</code>\) and GRPO at", item[0])


def test_an_asterisk_inside_a_word_is_literal(site):
    text = " ".join(_text((site / "main-job" / "index.html").read_text()).split())
    assert "adds p*, PODS, cost-aware PODS, GRESO with p* rows" in text
    stray = {
        name: found
        for name, page in _pages(site).items()
        if (found := [em for em in re.findall(r"<em>(.*?)</em>", page, flags=re.S) if re.search(r"[()=/²Σ]", em)])
    }
    assert stray == {}


def test_code_blocks_wrap_long_lines_on_every_page(site):
    css = (site / "stylesheets" / "extra.css").read_text()
    rule = re.search(r"\.md-typeset pre > code\s*\{([^}]*)\}", css)
    assert rule and re.search(r"white-space:\s*pre-wrap", rule[1]), css
    pages = _pages(site)
    without = [name for name, page in pages.items() if "stylesheets/extra.css" not in page and "<pre" in page]
    assert without == []
