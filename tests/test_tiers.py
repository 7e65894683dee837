"""The test tiers (``tests/tiers.py``): every slow name is a test of its file, and the README's command is
the fast tier with CI running the slow one after it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tiers import SLOW_FILES, SLOW_TESTS, is_slow

HERE = Path(__file__).parent
ROOT = HERE.parent


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.parametrize("file_name", sorted(SLOW_TESTS))
def test_every_slow_name_is_a_test_of_its_file(file_name):
    names = _test_names(HERE / file_name)
    missing = sorted(n for n in SLOW_TESTS[file_name] if n.split("[", 1)[0] not in names)
    assert not missing, f"tests/tiers.py names tests that {file_name} does not have: {missing}"


def test_every_slow_file_exists():
    assert all((HERE / name).exists() for name in SLOW_FILES)


def test_a_parametrised_test_is_slow_by_its_bare_name_or_its_id():
    assert is_slow("test_verl_unbiased.py", "test_row_normalised_modes_are_unbiased[seq-mean-token-sum]")
    assert is_slow("test_docs_code.py", "test_code_block_runs[README.md#0]")
    assert not is_slow("test_docs_code.py", "test_code_block_runs[docs/verl.md#0]")
    assert is_slow("test_verl_e2e.py", "test_anything")


def test_the_readme_runs_the_fast_tier_and_ci_runs_it_then_the_slow_one():
    readme = (ROOT / "README.md").read_text().splitlines()[:8]
    command = '.venv/bin/python -m pytest -q -n auto -m "not slow"'
    assert any(command in line for line in readme), "the README's test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in ci and ".venv/bin/python -m pytest -q -n auto -m slow" in ci
    assert ci.index(command) < ci.index("-m slow")


def test_pytest_xdist_keeps_this_files_tests_on_one_worker(request):
    """``--dist loadgroup`` reads the group from the node id's ``@`` suffix; when a pytest release stops
    honouring it, the files' module fixtures are built once per worker and the README's command slows down."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not under pytest-xdist: no grouping to check (the README's command runs with -n auto)")
    assert request.node.nodeid.endswith("@test_tiers.py"), request.node.nodeid
