"""The runs' step errors (``Profile.mse_every``): each arm's measured sub-sampling error of a step beside J's
closed form of it, and the cost to equal variance that J compares.

At each measured round a run records the mean over the round's steps of ‖ĝ_s − ḡ‖² (ḡ the pool's expected step)
and J's closed form of its expectation (``grpo.step_error``). Per arm (and LR) this averages both over the
measured rounds and the seeds, and multiplies each by the PO tokens the arm fed per optimiser step: variance ×
tokens per step is the cost to equal variance (J, the pool as the dataset), so its ratio to `nonzero`'s at the
same LR is J's predicted cost ratio, measured and in closed form. The pool's own noise, which J leaves out,
is not in these numbers (``experiments.row_variance`` measures it). Nothing here without step errors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware.experiments.arms import Arm
from costaware.experiments.records import RunResult
from costaware.report.labels import label
from costaware.report.md import escape, table

__all__ = ["ArmStepErrors", "arm_step_errors", "lines", "summary"]


@dataclass(frozen=True)
class ArmStepErrors:
    """One arm's step errors over its seeds: means over every measured round of every seed."""

    task: str
    setting: str
    arm: Arm
    learning_rate: float
    seeds: int
    points: int
    measured: float
    predicted: float | None  # None: no round had a closed form
    tokens_per_step: float  # PO tokens fed per optimiser step, over the whole runs

    @property
    def cost_measured(self) -> float:
        return self.measured * self.tokens_per_step

    @property
    def cost_predicted(self) -> float | None:
        return None if self.predicted is None else self.predicted * self.tokens_per_step


def arm_step_errors(results: Sequence[RunResult]) -> list[ArmStepErrors]:
    """Every (task, setting, arm, LR) whose runs recorded step errors, in that order."""
    by: dict[tuple[str, str, Arm, float], list[RunResult]] = defaultdict(list)
    for r in results:
        if r.step_errors:
            by[(r.id.task, r.id.setting, r.id.arm, r.id.learning_rate)].append(r)
    out = []
    for (task, setting, arm, lr), runs in sorted(by.items()):
        points = [p for r in runs for p in r.step_errors]
        predicted = [p.predicted for p in points if p.predicted is not None]
        steps = sum(r.evals[-1].step for r in runs)
        out.append(
            ArmStepErrors(
                task, setting, arm, lr, len(runs), len(points), float(np.mean([p.measured for p in points])),
                float(np.mean(predicted)) if predicted else None,
                sum(r.evals[-1].po_tokens for r in runs) / steps if steps else float("nan"),
            )
        )  # fmt: skip
    return out


def _ratio(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None or not y > 0 else x / y


def _nonzero(rows: Sequence[ArmStepErrors], a: ArmStepErrors) -> ArmStepErrors | None:
    return next((b for b in rows if (b.task, b.setting, b.arm, b.learning_rate)
                 == (a.task, a.setting, Arm("nonzero"), a.learning_rate)), None)  # fmt: skip


def lines(results: Sequence[RunResult]) -> list[str]:
    """The report's table (nothing when no run recorded step errors)."""
    rows = arm_step_errors(results)
    if not rows:
        return []

    def num(v: float | None, f: str = ".3g") -> str:
        return "–" if v is None or not np.isfinite(v) else format(v, f)

    body = []
    for a in rows:
        nz = _nonzero(rows, a)
        body.append([
            f"{a.task} / {a.setting}", label(a.arm), f"{a.learning_rate:g}", str(a.seeds),
            str(a.points), num(a.measured), num(a.predicted), num(_ratio(a.measured, a.predicted), ".2f"),
            num(a.tokens_per_step, ".0f"), num(_ratio(a.cost_measured, nz.cost_measured) if nz else None, ".2f"),
            num(_ratio(a.cost_predicted, nz.cost_predicted) if nz else None, ".2f"),
        ])  # fmt: skip
    return [
        "### Step errors: measured against J's closed form",
        "",
        escape(
            "Per measured round, the mean over its steps of ‖ĝ_s − ḡ‖² (ĝ_s the step's importance-weighted "
            "gradient, ḡ the pool's expected step), from exact per-row gradients, beside J's closed form of its "
            "expectation; means over the measured rounds and seeds. Cost to equal variance = step error × PO "
            "tokens per step; its ratio to nonzero's at the same LR is J's cost ratio (below 1: cheaper), "
            "measured and predicted (J compares arms with one expected step: GRPO's and raw-weight p*'s are "
            "n_supp/N of nonzero's). The pool's own noise is not in these numbers."
        ),
        "",
        *table(
            [
                "task / setting",
                "arm",
                "LR",
                "seeds",
                "rounds measured",
                "step error measured",
                "closed form",
                "measured / closed form",
                "PO tokens per step",
                "cost vs nonzero, measured",
                "cost vs nonzero, closed form",
            ],
            body,
        ),  # fmt: skip
        "",
    ]


def summary(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """The same as JSON."""
    rows = arm_step_errors(results)
    out = []
    for a in rows:
        nz = _nonzero(rows, a)
        out.append({
            "task": a.task, "setting": a.setting, "arm": a.arm.key, "learning_rate": a.learning_rate,
            "seeds": a.seeds, "points": a.points, "measured": a.measured, "predicted": a.predicted,
            "tokens_per_step": a.tokens_per_step,
            "cost_vs_nonzero_measured": _ratio(a.cost_measured, nz.cost_measured) if nz else None,
            "cost_vs_nonzero_predicted": _ratio(a.cost_predicted, nz.cost_predicted) if nz else None,
        })  # fmt: skip
    return out
