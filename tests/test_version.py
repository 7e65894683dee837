"""The version is written in one place, ``costaware.__version__``: pyproject.toml reads it from there
(setuptools' dynamic version), so the installed distribution's metadata says the same."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pytest

import costaware


def test_installed_metadata_version_is_costaware_version():
    try:
        installed = version("costaware")
    except PackageNotFoundError:
        pytest.skip("costaware is not installed (pip install -e .)")
    assert installed == costaware.__version__, (
        "the installed metadata and costaware.__version__ differ: reinstall (pip install -e .) after a version change"
    )
