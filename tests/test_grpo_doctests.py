"""The docstring examples of the GRPO core and the TRL adapter's pure modules run (pytest does not
collect doctests in this project: see pyproject's addopts)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "costaware.grpo.config",
    "costaware.grpo.proxy",
    "costaware.grpo.beta",
    "costaware.grpo.loss_families",
    "costaware.grpo.methods",
    "costaware.grpo.pods",
    "costaware.grpo.plan",
    "costaware.grpo.step",
    "costaware.grpo.shard",
    "costaware.grpo.factors",
    "costaware.grpo.accounting",
    "costaware.sampling_options",
]


@pytest.mark.parametrize("name", MODULES + ["costaware.integrations.trl.batch", "costaware.integrations.trl.config"])
def test_docstring_examples_run(name):
    if name.startswith("costaware.integrations.trl"):
        pytest.importorskip("trl", reason="the 'trl' extra is not installed")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
