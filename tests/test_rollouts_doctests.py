"""The docstring examples of the rollouts package run (pytest does not collect doctests here)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["group", "state", "prompts", "prompt_rule", "logs", "synthetic"])
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(f"costaware.rollouts.{name}"), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
