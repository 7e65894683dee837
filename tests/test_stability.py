"""The stability check: two settled records of one profile, compared row by row."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from costaware.report import stability

RECORD = Path(__file__).resolve().parents[1] / "evidence" / "settle" / "settled.json"


def _row(value, lo, hi, *, claim="p* beats GRPO", g=1.0, seeds=30, estimator="band"):
    return {"task": "sort", "claim": claim, "generation_cost": g, "estimator": estimator, "value": value,
            "lo": lo, "hi": hi, "undefined": 0.0, "seeds": seeds}  # fmt: skip


def _record(*rows):
    return {"verdict_estimator": "band", "rows": list(rows)}


def test_a_record_against_itself_passes_on_every_row():
    record = json.loads(RECORD.read_text())
    rows = stability.compare(record, copy.deepcopy(record))
    assert len(rows) == sum(r["estimator"] == record["verdict_estimator"] for r in record["rows"]) > 0
    assert stability.passes(rows)
    assert stability.markdown(rows).endswith("The check passes.")


def test_a_flipped_verdict_fails_and_is_named():
    a = _record(_row(0.15, 0.04, 0.25), _row(0.05, -0.05, 0.15, claim="p* beats nonzero"))
    b = _record(_row(0.10, -0.01, 0.21), _row(0.05, -0.05, 0.15, claim="p* beats nonzero"))
    rows = stability.compare(a, b)
    assert [r.verdicts_agree for r in rows] == [False, True] and [r.savings_inside for r in rows] == [True, True]
    text = stability.markdown(rows)
    assert "Verdicts agree on 1 of 2 rows" in text
    assert text.endswith("The check fails on: sort / p* beats GRPO at g = 1.")


def test_each_saving_must_lie_inside_the_others_ci_both_ways():
    # A's saving lies inside B's wide CI, but B's lies outside A's narrow one: a one-way check would pass it
    a = _record(_row(0.30, 0.25, 0.35))
    b = _record(_row(0.15, 0.02, 0.32))
    (row,) = stability.compare(a, b)
    assert row.verdicts_agree and not row.savings_inside and not stability.passes([row])
    (row,) = stability.compare(b, a)  # the same either way round
    assert not row.savings_inside


def test_a_row_without_an_interval_cannot_pass():
    a = _record(_row(0.2, None, None, seeds=2))
    (row,) = stability.compare(a, copy.deepcopy(a))
    assert row.verdicts_agree and not row.savings_inside and not stability.passes([row])


def test_only_the_verdict_estimators_rows_by_default_and_the_other_on_request():
    a = _record(_row(0.2, 0.1, 0.3), _row(-0.2, -0.3, -0.1, estimator="crossing"))
    b = _record(_row(0.2, 0.1, 0.3), _row(0.2, 0.1, 0.3, estimator="crossing"))
    assert stability.passes(stability.compare(a, b))
    assert not stability.passes(stability.compare(a, b, estimator="crossing"))


def test_records_with_no_common_row_are_refused_by_name():
    a = _record(_row(0.2, 0.1, 0.3))
    b = _record(_row(0.2, 0.1, 0.3, g=3.0))
    with pytest.raises(ValueError, match="first.json and second.json share no claim"):
        stability.compare(a, b, names=("first.json", "second.json"))
    with pytest.raises(ValueError, match="B is not a settled record"):
        stability.compare(a, {"runs": 3})


def test_cli_prints_the_tables_and_writes_the_outcome(tmp_path, capsys):
    out = tmp_path / "stability.json"
    assert stability.main([str(RECORD), str(RECORD), "--json", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith("The check passes.")
    written = json.loads(out.read_text())
    assert written["passes"] is True and all(r["verdicts_agree"] and r["savings_inside"] for r in written["rows"])


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda d: d / "missing.json", "a record must be a settled summary file, got"),
        (lambda d: d, "a record must be a settled summary file, got"),
        (lambda d: (d / "bad.json").write_text("{not json") and d / "bad.json", "is not JSON"),
        (lambda d: (d / "list.json").write_text("[1, 2]") and d / "list.json", "is not a settled record"),
    ],
    ids=["missing", "a-folder", "malformed", "not-a-record"],
)
def test_cli_errors_are_one_line(tmp_path, capsys, make, said):
    assert stability.main([str(RECORD), str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stability: ") and said in err


def test_docstring_example_runs():
    import doctest

    result = doctest.testmod(stability)
    assert result.attempted and not result.failed
