"""The package's import graph, read from the source (AST, nothing imported): no cycle, no upward import.

Every ``import`` counts, at module level and inside functions: a lazy import still runs at call time, so
a cycle through one is a real cycle (it only moves the failure from import time to the first call, and a
reader still has to hold both modules in mind at once). Imports under ``if TYPE_CHECKING:`` count too: they
never run, but a type names the module it comes from, and a reader of one module reads the other.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.

Layers, lowest first: the core (``grpo``, ``sgd``, ``rollouts``, ``generation``, ``evaluation``, ``theory`` and
the top-level modules) < ``integrations`` (adapts the core to the engines) < ``experiments`` (the main job: its
runs and their records) < ``report`` (reads the experiments' records, and draws the SGD figure that ``sgd``
computes) < ``cli``, above everything, with ``jobs`` (a command that runs the experiments and writes their report;
see ``LAYER_OF``). So ``sgd`` imports neither the report nor the experiments, and the experiments do not import
the report.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "costaware"

# Cycles inside one area, by area (a cycle is allowed when all its modules are under the area), each with
# why. When an area has no cycle left, its strict xfail below passes, which fails the suite: remove the entry.
ALLOWED_CYCLES: dict[str, str] = {
}  # fmt: skip
# Each module's layer is that of the longest prefix here that names it (a module, or a package's modules).
LAYER_OF: dict[str, str] = {
    "costaware": "core",  # the top-level modules and the packages not named below: the math, grpo, sgd, ...
    "costaware.integrations": "integrations",  # adapts the core to TRL and verl
    "costaware.experiments": "experiments",  # the main job: its runs and their records (arms, records)
    # verl's own loop on a CPU: a job over the main job's task and tiny policy, not part of the adapter
    "costaware.integrations.verl.cpu": "experiments",
    "costaware.report": "report",  # reads the experiments' records; draws the SGD figure
    "costaware.cli": "cli",
    "costaware.jobs": "cli",  # `costaware reproduce`: the experiments' runs, then the report's writer
}
# What a layer may import, its own included; each set holds what its members may import (closed under
# import), so checking every edge checks every path.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "integrations": frozenset({"core", "integrations"}),
    "experiments": frozenset({"core", "integrations", "experiments"}),
    "report": frozenset({"core", "integrations", "experiments", "report"}),
    "cli": frozenset(LAYER_OF.values()),
}


def layer(name: str) -> str:
    return LAYER_OF[max((p for p in LAYER_OF if _under(name, p)), key=len)]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in (SRC / PACKAGE).rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, nested ones and those under ``if TYPE_CHECKING`` included."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _targets(name: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    mods = modules()
    is_pkg = modules()[name].name == "__init__.py"
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
    if node.level:  # relative: from the importer's package, up level - 1
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module.split(".")[0] != PACKAGE:
        return set()
    return {f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names}


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the costaware modules it imports (anywhere in its body)."""
    mods = modules()
    out = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        out[name] = frozenset(t for node in _imports(tree) for t in _targets(name, node) if t in mods and t != name)
    return out


def cycles(g: dict[str, frozenset[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _reach(g: dict[str, frozenset[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in g[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# ---------------------------------------------------------------- the checker itself, on hand-made graphs


def test_cycle_finder_finds_two_and_three_cycles_and_nothing_in_a_dag():
    dag = {"a": frozenset("b"), "b": frozenset("c"), "c": frozenset()}
    assert cycles(dag) == []
    two = {**dag, "c": frozenset("b")}
    assert cycles(two) == [frozenset("bc")]
    three = {"a": frozenset("b"), "b": frozenset("c"), "c": frozenset("a"), "d": frozenset("a")}
    assert cycles(three) == [frozenset("abc")]


def test_lazy_imports_and_type_checking_imports_count():
    tree = ast.parse(
        "import os\nif TYPE_CHECKING:\n    import costaware.a\n"
        "def f():\n    from costaware import b\n    import costaware.c\n"
    )
    names = [a.name if isinstance(n, ast.Import) else n.module for n in _imports(tree) for a in n.names]
    assert sorted(names) == ["costaware", "costaware.a", "costaware.c", "os"]


def test_the_graph_sees_the_packages_own_edges():
    g = graph()
    assert "costaware.report.curves" in g["costaware.report.evidence"]  # a module-level from-import
    assert "costaware.grpo.config" in g["costaware.report.markdown_sections"]  # a lazy one, inside a function


# ---------------------------------------------------------------- the package


def _allowed(cycle: frozenset[str]) -> str | None:
    return next((area for area in ALLOWED_CYCLES if all(_under(m, area) for m in cycle)), None)


def test_no_import_cycle_outside_the_allow_list():
    unexpected = [sorted(c) for c in cycles(graph()) if _allowed(c) is None]
    assert not unexpected, f"import cycles: {unexpected}"


@pytest.mark.parametrize(
    "area", [pytest.param(a, marks=pytest.mark.xfail(strict=True, reason=why)) for a, why in ALLOWED_CYCLES.items()]
)
def test_allowed_area_has_no_cycle_left(area):
    """Expected to fail while the area's cycle is there; passing (XPASS, strict) means: remove the entry."""
    assert not [sorted(c) for c in cycles(graph()) if _allowed(c) == area]


def _upward(g: dict[str, frozenset[str]], importer: str) -> list[tuple[str, str]]:
    return sorted((m, t) for m in g if layer(m) == importer for t in g[m] if layer(t) not in MAY_IMPORT[importer])


@pytest.mark.parametrize("importer", sorted(MAY_IMPORT))
def test_no_upward_import(importer):
    bad = _upward(graph(), importer)
    assert not bad, f"{importer} imports from above it (module, imported): {bad[:10]}"


def test_the_checker_refuses_an_upward_import():
    g = {**graph(), "costaware.sgd.problems": graph()["costaware.sgd.problems"] | {"costaware.report.md"}}
    assert ("costaware.sgd.problems", "costaware.report.md") in _upward(g, "core")


def test_layers_are_closed_under_import_and_place_sgd_report_and_experiments():
    for name, allowed in MAY_IMPORT.items():
        assert name in allowed and all(MAY_IMPORT[a] <= allowed for a in allowed), name
    assert layer("costaware.experiments.records") == layer("costaware.experiments.runs") == "experiments"
    assert layer("costaware.sgd.figure") == layer("costaware.sgd.runner") == "core"
    assert "report" not in MAY_IMPORT["experiments"] and "experiments" in MAY_IMPORT["report"]
    # sgd imports neither the report nor the experiments, not even through another module
    g = graph()
    reached = set().union(*(_reach(g, m) for m in g if _under(m, "costaware.sgd")))
    assert not [m for m in reached if _under(m, "costaware.report") or _under(m, "costaware.experiments")]
    # The report imports experiments.records, which runs the package's __init__ first: it must import nothing.
    assert not g["costaware.experiments"]


def test_the_job_is_given_its_report_writer_from_above():
    """`costaware reproduce`'s runner reaches no report module, not even through another; costaware.jobs, above
    both, joins them."""
    g = graph()
    assert (
        layer("costaware.jobs") == "cli"
        and {"costaware.experiments.runner", "costaware.report.grpo"} <= g["costaware.jobs"]
    )
    assert not [m for m in _reach(g, "costaware.experiments.runner") if _under(m, "costaware.report")]


def test_the_evaluation_data_and_its_hub_form_no_circle():
    g = graph()
    assert "costaware.evaluation.hub" in g["costaware.evaluation.data"]
    assert "costaware.evaluation.data" not in _reach(g, "costaware.evaluation.hub")


# ---------------------------------------------------------------- names: no module takes another's private name


def private_names(name: str, tree: ast.AST) -> list[str]:
    """The private names (``_x``, not a module) module ``name`` takes from other costaware modules:
    ``from costaware.m import _x``, or ``m._x`` on an imported costaware module. What other modules use is
    public (a module whose own name starts with ``_``, like ``_checks``, may still be imported)."""
    mods = modules()
    aliases: dict[str, str] = {}
    out = []
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in mods})
            continue
        for a in node.names:
            target = _targets(name, ast.ImportFrom(node.module, [a], node.level))
            if not target:
                continue
            (t,) = target
            if t.endswith(f".{a.name}") and t in mods:
                aliases[a.asname or a.name] = t
            elif a.name.startswith("_") and not a.name.startswith("__") and t != name:
                out.append(f"{name}: from {t} import {a.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and f"{aliases[node.value.id]}.{node.attr}" not in mods
        ):
            out.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return out


def test_the_private_name_finder_sees_both_forms():
    tree = ast.parse(
        "from costaware.grpo.beta import _x, fit_beta\nfrom costaware import theory\n"
        "def f():\n    return theory._scaled, theory.J\n"
    )
    assert private_names("costaware.experiments.records", tree) == [
        "costaware.experiments.records: from costaware.grpo.beta import _x",
        "costaware.experiments.records: costaware.theory._scaled",
    ]


def test_no_module_imports_another_modules_private_name():
    found = [
        f
        for name, path in sorted(modules().items())
        for f in private_names(name, ast.parse(path.read_text(), str(path)))
    ]
    assert not found, f"private names used across modules (make them public): {found}"


def test_the_report_reads_only_the_experiments_records():
    g = graph()
    read = {t for m in g if layer(m) == "report" for t in g[m] if layer(t) == "experiments"}
    assert read <= {"costaware.experiments.arms", "costaware.experiments.records"}, sorted(read)
