"""An arm's options are declared once (``ArmOptions``): the arm, the run's spec and its record inherit them,
each keeps its positional fields, and a record's file keeps its field order."""

from __future__ import annotations

import dataclasses

import pytest

from costaware.experiments.arms import Arm, ArmOptions
from costaware.experiments.records import ID_ORDER, RunId
from costaware.experiments.specs import RunSpec

OPTIONS = {f.name: f.default for f in dataclasses.fields(ArmOptions)}
CLASSES = (Arm, RunSpec, RunId)


@pytest.mark.parametrize("cls", CLASSES)
def test_the_options_come_from_one_declaration_with_its_defaults(cls):
    assert issubclass(cls, ArmOptions)
    assert not set(OPTIONS) & set(cls.__annotations__)  # none redeclared
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert {name: fields[name].default for name in OPTIONS} == OPTIONS
    assert all(fields[name].kw_only for name in OPTIONS)
    assert "method" in fields and not fields["method"].kw_only


def test_positional_fields_are_what_they_were():
    assert Arm("p_star").method == "p_star"
    spec = RunSpec("headline", "p_star", 3, "sort")
    assert (spec.group, spec.method, spec.seed, spec.task) == ("headline", "p_star", 3, "sort")
    rid = RunId("sort", "p_star", 3, 1e-4, "grpo")
    assert (rid.task, rid.method, rid.seed, rid.learning_rate, rid.loss_type) == ("sort", "p_star", 3, 1e-4, "grpo")
    # the next positional argument used to be `weights`: now an error, never a silently different field
    with pytest.raises(TypeError):
        RunSpec("headline", "p_star", 3, "sort", "raw")  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunId("sort", "p_star", 3, 1e-4, "grpo", "raw")  # type: ignore[misc]


@pytest.mark.parametrize("cls", CLASSES)
def test_each_class_checks_the_options_under_its_own_name(cls):
    required = {
        Arm: dict(method="p_star"),
        RunSpec: dict(group="headline", method="p_star", seed=0),
        RunId: dict(task="sort", method="p_star", seed=0, learning_rate=1e-4, loss_type="grpo"),
    }
    bad = [(dict(weights="centered"), "weights"), (dict(method="a:b"), "method"), (dict(alpha=1.5), "alpha")]
    for kw, name in [*bad, (dict(rollout="some"), "rollout")]:
        with pytest.raises(ValueError, match=f"{cls.__name__}.{name}"):
            cls(**{**required[cls], **kw})


def test_the_arm_reads_as_before():
    arm = Arm("p_smooth", alpha=0.05, weights="raw")
    assert repr(arm) == (
        "Arm(method='p_smooth', weights='raw', alpha=0.05, proxy_noise=0.0, step_budget='rows', proxy='auto', "
        "rollout='all')"
    )
    assert eval(repr(arm)) == arm


def test_a_records_file_order_names_every_field_once():
    assert sorted(ID_ORDER) == sorted(f.name for f in dataclasses.fields(RunId))
    rid = RunId("sort", "p_star", 3, 1e-4, "grpo", weights="raw")
    assert list(rid.as_dict()) == list(ID_ORDER) and RunId(**rid.as_dict()) == rid
