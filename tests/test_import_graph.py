"""The package's import graph, read from the source (AST, nothing imported): no cycle, no upward import.

Every ``import`` counts, at module level and inside functions: a lazy import still runs at call time, so
a cycle through one is a real cycle (it only moves the failure from import time to the first call, and a
reader still has to hold both modules in mind at once). Imports under ``if TYPE_CHECKING:`` never run and
do not count. ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.

Layers, lowest first: the core (``grpo``, ``sgd``, ``rollouts``, ``generation``, ``evaluation``, ``theory`` and
the top-level modules) < the main job's records (``experiments.arms``, ``experiments.records``) < ``report`` <
the jobs (the rest of ``experiments``, ``sgd.figure``, and ``integrations.verl.cpu``, which runs verl's loop on the
main job's task and policy); ``integrations`` adapts the core to the engines and sits below the jobs. ``cli`` sits above everything (see ``LAYER_OF``).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "costaware"

# Cycles inside another engineer's area, by area (a cycle is allowed when all its modules are under the
# area), each with who is fixing it. When an area has no cycle left, its strict xfail below passes, which
# fails the suite: remove the entry then.
ALLOWED_CYCLES: dict[str, str] = {
}  # fmt: skip
# Each module's layer is that of the longest prefix here that names it (a module, or a package's modules).
LAYER_OF: dict[str, str] = {
    "costaware": "core",  # the top-level modules and the packages not named below: the math, grpo, sgd, ...
    "costaware.integrations": "integrations",  # adapts the core to TRL and verl
    "costaware.integrations.verl.cpu": "jobs",  # verl's loop on a CPU with the main job's task and policy
    "costaware.experiments.arms": "records",  # the main job's records: the experiments write them, the report
    "costaware.experiments.records": "records",  # reads them
    "costaware.report": "report",
    "costaware.experiments": "jobs",  # the main job
    "costaware.sgd.figure": "jobs",  # the paper's SGD figure, drawn with report.synthetic
    "costaware.cli": "cli",
}
# What a layer may import, its own included; each set holds what its members may import (closed under
# import), so checking every edge checks every path.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "integrations": frozenset({"core", "integrations"}),
    "records": frozenset({"core", "records"}),
    "report": frozenset({"core", "records", "report"}),
    "jobs": frozenset({"core", "integrations", "records", "report", "jobs"}),
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
    """Every import statement of ``tree``, nested ones included, except those under ``if TYPE_CHECKING``."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
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


def test_lazy_imports_count_and_type_checking_imports_do_not():
    tree = ast.parse(
        "import os\nif TYPE_CHECKING:\n    import costaware.a\n"
        "def f():\n    from costaware import b\n    import costaware.c\n"
    )
    names = [a.name if isinstance(n, ast.Import) else n.module for n in _imports(tree) for a in n.names]
    assert sorted(names) == ["costaware", "costaware.c", "os"]


def test_the_graph_sees_the_packages_own_edges():
    g = graph()
    assert "costaware.report.curves" in g["costaware.report.evidence"]  # a module-level from-import
    assert "costaware.grpo.config" in g["costaware.report.grpo"]  # a lazy one, inside a function


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


@pytest.mark.parametrize("importer", sorted(MAY_IMPORT))
def test_no_upward_import(importer):
    g = graph()
    bad = sorted((m, t) for m in g if layer(m) == importer for t in g[m] if layer(t) not in MAY_IMPORT[importer])
    assert not bad, f"{importer} imports from above it (module, imported): {bad[:10]}"


def test_layers_are_closed_under_import_and_name_the_moved_modules():
    for name, allowed in MAY_IMPORT.items():
        assert name in allowed and all(MAY_IMPORT[a] <= allowed for a in allowed), name
    assert layer("costaware.experiments.records") == "records" and layer("costaware.experiments.runs") == "jobs"
    assert layer("costaware.sgd.figure") == "jobs" and layer("costaware.sgd.runner") == "core"
    # The report imports experiments.records, which runs the package's __init__ first: it must import nothing.
    assert not graph()["costaware.experiments"]


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
