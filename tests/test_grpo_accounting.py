"""costaware.grpo.accounting: counters that sum pools exactly, metric names, a lossless dict round trip,
an atomic state file, and errors that name the bad value or the bad file.

Each property is checked by a function that takes the implementation, so the same check is also run on
a plausible wrong variant (a skip streak that never resets, a save that writes the file in place) and
must reject it.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware import _io
from costaware.grpo import accounting
from costaware.grpo.accounting import (
    METRIC_PREFIX,
    STATE_FILE,
    Counters,
    StepCounts,
    load_counters,
    save_counters,
)

STEP_FIELDS = [f.name for f in fields(StepCounts)]
amounts = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)
step_counts = st.builds(
    StepCounts, **{name: amounts for name in STEP_FIELDS if name != "skipped"}, skipped=st.sampled_from([0.0, 1.0])
)


def _check_add(add, steps: list[StepCounts]) -> None:
    """``add`` over ``steps`` gives the column sums, the pool count and the trailing run of skipped pools."""
    c = Counters()
    for s in steps:
        add(c, s)
    table = np.array([[getattr(s, n) for n in STEP_FIELDS] for s in steps]).reshape(len(steps), len(STEP_FIELDS))
    np.testing.assert_allclose([getattr(c, n) for n in STEP_FIELDS], table.sum(0), rtol=1e-12)
    trailing = 0
    for s in reversed(steps):  # pools skipped since the last one that trained
        if not s.skipped:
            break
        trailing += 1
    assert c.generations == len(steps) and c.consecutive_skipped == trailing


def _add_without_reset(c: Counters, step: StepCounts) -> None:
    """Wrong: counts skipped pools but never resets the streak when a pool trains."""
    for f in fields(step):
        setattr(c, f.name, getattr(c, f.name) + float(getattr(step, f.name)))
    c.generations += 1
    c.consecutive_skipped += step.skipped


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(step_counts, max_size=12))
def test_adding_pools_sums_every_count_and_tracks_the_trailing_skip_streak(steps):
    _check_add(Counters.add, steps)


def test_the_add_check_rejects_a_skip_streak_that_never_resets():
    skip, train = StepCounts(skipped=1.0), StepCounts(tokens=5.0)
    _check_add(Counters.add, [skip, skip, train, skip])
    with pytest.raises(AssertionError):
        _check_add(_add_without_reset, [skip, skip, train, skip])


def test_every_step_count_has_a_cumulative_counter():
    assert set(STEP_FIELDS) <= {f.name for f in fields(Counters)}


def test_metrics_log_every_counter_as_a_total_and_every_step_count_under_step():
    c = Counters()
    step = StepCounts(tokens=7.0, rows_drawn=3.0, skipped=0.0)
    c.add(step)
    totals = c.metrics()
    assert totals == {f"{METRIC_PREFIX}/total/{f.name}": float(getattr(c, f.name)) for f in fields(Counters)}
    both = c.metrics(step)
    assert {k: v for k, v in both.items() if "/step/" in k} == {
        f"{METRIC_PREFIX}/step/{n}": float(getattr(step, n)) for n in STEP_FIELDS
    }
    assert all(type(v) is float for v in both.values())


@settings(max_examples=60, deadline=None)
@given(values=st.fixed_dictionaries({f.name: amounts for f in fields(Counters)}))
def test_counters_round_trip_through_a_dict_and_json_exactly(values):
    c = Counters(**values)
    assert Counters.from_dict(c.to_dict()) == c
    assert Counters.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_from_dict_ignores_unknown_keys_and_defaults_missing_ones_to_zero():
    c = Counters.from_dict({"tokens": 12, "a_future_counter": 3.0})
    assert c == Counters(tokens=12.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "12", None])
def test_from_dict_rejects_a_non_finite_or_non_numeric_counter_naming_it(bad):
    with pytest.raises(ValueError, match="'rows_fed'"):
        Counters.from_dict({"tokens": 1.0, "rows_fed": bad})


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "3"])
def test_step_counts_reject_a_negative_or_non_finite_value_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"StepCounts\.rows_unique"):
        StepCounts(rows_unique=bad)


def test_save_then_load_restores_the_counters_and_creates_the_folder(tmp_path):
    c = Counters()
    c.add(StepCounts(tokens=300, tokens_plain=500, rows_drawn=4, po_seconds=0.25))
    path = save_counters(c, tmp_path / "checkpoint-7")
    assert path == os.path.join(tmp_path / "checkpoint-7", STATE_FILE)
    assert load_counters(tmp_path / "checkpoint-7") == c
    assert os.listdir(tmp_path / "checkpoint-7") == [STATE_FILE]  # no temporary file left behind


def test_a_folder_without_state_loads_as_none(tmp_path):
    assert load_counters(tmp_path) is None


def _check_save_is_atomic(save, folder, monkeypatch) -> None:
    """A write that dies half-way leaves the previous state file readable and unchanged."""
    before = Counters(tokens=1.0, generations=1.0)
    accounting.save_counters(before, folder)

    def dump_then_crash(obj, handle):
        handle.write('{"tokens": 2')
        raise OSError("disk full")

    def crash(fd):  # the atomic writer's file is written, then the disk fills before it is moved
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(accounting.json, "dump", dump_then_crash)
        m.setattr(_io.os, "fsync", crash)
        with pytest.raises(OSError, match="disk full"):
            save(Counters(tokens=2.0), folder)
    assert load_counters(folder) == before


def _save_in_place(counters, folder):
    """Wrong: writes the state file directly, so a crash leaves half a file."""
    path = os.path.join(os.fspath(folder), STATE_FILE)
    with open(path, "w") as handle:
        accounting.json.dump(counters.to_dict(), handle)
    return path


def test_a_save_that_fails_half_way_keeps_the_previous_state(tmp_path, monkeypatch):
    _check_save_is_atomic(save_counters, tmp_path, monkeypatch)
    assert os.listdir(tmp_path) == [STATE_FILE]
    with pytest.raises((AssertionError, ValueError)):  # the check rejects an in-place write
        _check_save_is_atomic(_save_in_place, tmp_path / "in_place", monkeypatch)


@pytest.mark.parametrize(
    "text,match",
    [
        ('{"tokens": 1', "not valid JSON"),
        ("[1, 2]", "must hold a JSON object, got list"),
        ('{"tokens": NaN}', "'tokens'.*finite"),
        ('{"tokens": "many"}', "'tokens'.*finite"),
    ],
    ids=["truncated", "a-list", "nan-counter", "text-counter"],
)
def test_a_bad_state_file_is_a_value_error_naming_its_path(tmp_path, text, match):
    (tmp_path / STATE_FILE).write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        load_counters(tmp_path)
    assert str(tmp_path / STATE_FILE) in str(err.value)
