"""Two records of one profile compared: do its verdicts survive a numeric perturbation?

The stability check runs the evidence profile twice: once as recorded, once perturbed (``--set
numeric_jitter=1e-6``, or the same command on another processor). Each run's summary is written by
``python -m costaware.report.settled RUNS --json OUT.json``. For every claim, task and price that both records
hold, by the verdict estimator, it asks two things:

- do the verdicts agree?
- does each record's saving lie inside the other's 95% CI?

The check passes when both hold on every row. A row without an interval (too few seeds) cannot pass.

    python -m costaware.report.stability A.json B.json [--json OUT.json]

>>> a = {"verdict_estimator": "band", "rows": [{"task": "sort", "claim": "p* beats GRPO", "generation_cost": 1.0,
...      "estimator": "band", "value": 0.15, "lo": 0.04, "hi": 0.25, "undefined": 0.0, "seeds": 30}]}
>>> b = {"verdict_estimator": "band", "rows": [{**a["rows"][0], "value": 0.10, "lo": -0.01, "hi": 0.21}]}
>>> (row,) = compare(a, b)
>>> row.verdicts_agree, row.savings_inside, passes([row])
(False, True, False)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costaware.report.curves import Estimate
from costaware.report.md import table
from costaware.report.settled import estimate_of
from costaware.report.verdicts import fmt, verdict

__all__ = ["StabilityRow", "compare", "passes", "markdown", "main"]

Key = tuple[str, str, float]  # (task, claim, generation_cost)


@dataclass(frozen=True)
class StabilityRow:
    """One claim on one task at one price, as each record measured it."""

    task: str
    claim: str
    generation_cost: float
    a: Estimate
    b: Estimate

    @property
    def verdicts_agree(self) -> bool:
        return verdict(self.a) == verdict(self.b)

    @property
    def savings_inside(self) -> bool:
        """Each record's saving within the other's CI (False when either has no interval)."""
        if not (self.a.has_interval and self.b.has_interval):
            return False
        return _inside(self.a.value, self.b) and _inside(self.b.value, self.a)

    @property
    def holds(self) -> bool:
        return self.verdicts_agree and self.savings_inside


def _inside(value: float, est: Estimate) -> bool:
    return not math.isnan(value) and est.lo <= value <= est.hi


def _estimates(record: dict[str, Any], name: str, estimator: str) -> dict[Key, Estimate]:
    try:
        rows = record["rows"]
    except (KeyError, TypeError):
        raise ValueError(f"{name} is not a settled record: it has no 'rows'") from None
    out: dict[Key, Estimate] = {}
    for d in rows:
        if d.get("estimator") != estimator:
            continue
        out[(d["task"], d["claim"], float(d["generation_cost"]))] = estimate_of(d)
    return out


def compare(
    record_a: dict[str, Any], record_b: dict[str, Any], estimator: str | None = None, names: Sequence[str] = ("A", "B")
) -> list[StabilityRow]:
    """The rows both records hold by ``estimator`` (default: record A's verdict estimator), in A's order.

    Raises ValueError, naming the records, when they share no row.
    """
    est = estimator or record_a.get("verdict_estimator", "band")
    a, b = _estimates(record_a, names[0], est), _estimates(record_b, names[1], est)
    common = [k for k in a if k in b]
    if not common:
        raise ValueError(f"{names[0]} and {names[1]} share no claim measured by the {est!r} estimator")
    return [StabilityRow(t, c, g, a[(t, c, g)], b[(t, c, g)]) for t, c, g in common]


def passes(rows: Sequence[StabilityRow]) -> bool:
    return bool(rows) and all(r.holds for r in rows)


def markdown(rows: Sequence[StabilityRow], names: Sequence[str] = ("A", "B")) -> str:
    """One table per task, then the computed sentence that says whether the check passes."""
    lines: list[str] = []
    for task in dict.fromkeys(r.task for r in rows):
        lines += [f"**{task}**", ""]
        body = [
            [r.claim, f"{r.generation_cost:.3g}", f"{fmt(r.a)}, {verdict(r.a).value}",
             f"{fmt(r.b)}, {verdict(r.b).value}", _yes(r.verdicts_agree), _yes(r.savings_inside)]
            for r in rows if r.task == task
        ]  # fmt: skip
        header = ["claim", "g", names[0], names[1], "verdicts agree", "each saving inside the other's CI"]
        lines += [*table(header, body), ""]
    agree, inside = sum(r.verdicts_agree for r in rows), sum(r.savings_inside for r in rows)
    failed = [f"{r.task} / {r.claim} at g = {r.generation_cost:.3g}" for r in rows if not r.holds]
    lines.append(
        f"Verdicts agree on {agree} of {len(rows)} rows; each saving lies inside the other record's CI on "
        f"{inside} of {len(rows)}. "
        + ("The check passes." if passes(rows) else "The check fails on: " + "; ".join(failed) + ".")
    )
    return "\n".join(lines)


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _read(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"a record must be a settled summary file, got {path!r}")
    try:
        record = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path!r} is not JSON: {e}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path!r} is not a settled record: it has no 'rows'")
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m costaware.report.stability", description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="the recorded summary (settled.json)")
    p.add_argument("b", help="the perturbed run's summary")
    p.add_argument("--estimator", choices=("band", "crossing"), help="default: record A's verdict estimator")
    p.add_argument("--json", help="write the rows and the outcome here")
    args = p.parse_args(argv)
    try:
        rows = compare(_read(args.a), _read(args.b), args.estimator, names=(args.a, args.b))
    except ValueError as e:
        print(f"stability: {e}", file=sys.stderr)
        return 2
    print(markdown(rows, names=(Path(args.a).name, Path(args.b).name)))
    if args.json:
        out = {
            "passes": passes(rows),
            "rows": [
                {"task": r.task, "claim": r.claim, "generation_cost": r.generation_cost, "a": r.a.as_dict(),
                 "b": r.b.as_dict(), "verdicts_agree": r.verdicts_agree, "savings_inside": r.savings_inside}
                for r in rows
            ],
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
