"""Predicted savings from the runs' per-prompt logs, to set beside the measured ones.

Each GRPO run leaves ``runs/<run file stem>.prompts.jsonl``. From a section's GRPO logs (analysed with
row method ``none``: every row is fed to PO) and its ``nonzero`` logs (row method ``nonzero``),
:func:`costaware.rollouts.analysis.analyse` gives, per run, the prompt-level J(q)/J(uniform) of each
candidate prompt sampler, the biased skips' expected share of generated tokens skipped and of Σ|A| lost,
and the row level's J(p*)/J(uniform on the non-zero rows), the predicted edge of p* over ``nonzero``
(which the report's fidelity J(p)/J(uniform over all rows) mixes with the zero-row effect). Here: the
median over the runs (seeds), with the min and max. A ratio r < 1 predicts a saving of 1 − r in cost to
a given variance. A run without a log (recorded before the logs existed) is counted, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from costaware.experiments.arms import Arm
from costaware.experiments.records import RunId
from costaware.report.evidence import HEADLINE_AXIS, Comparison, Section
from costaware.report.evidence_text import describe
from costaware.report.md import escape, table
from costaware.rollouts.analysis import AnalysisConfig, analyse
from costaware.rollouts.logs import read_prompt_rounds

__all__ = ["LOG_ARMS", "source", "Spread", "Predictions", "predict", "prompt_table", "row_level_line"]

# The arms whose logs are analysed, with the analysis's row method (which rows PO is fed).
LOG_ARMS = (("none", Arm("none")), ("nonzero", Arm("nonzero")))
ROW_LEVEL = "J(p*)/J(uniform on the non-zero rows)"


@dataclass(frozen=True)
class Spread:
    """The median of one number over ``n`` runs, with its min and max."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        v = np.asarray([x for x in values if not math.isnan(x)], float)  # inf stays: a q that drops a signal
        return None if v.size == 0 else cls(float(np.median(v)), float(v.min()), float(v.max()), int(v.size))

    def text(self, pct: bool = False) -> str:
        f = (lambda x: f"{100 * x:.0f}%") if pct else (lambda x: "inf" if math.isinf(x) else f"{x:.2f}")
        return f(self.median) if self.n == 1 else f"{f(self.median)} [{f(self.lo)}, {f(self.hi)}]"

    def as_dict(self) -> dict[str, float]:
        return {"median": self.median, "min": self.lo, "max": self.hi, "n": self.n}


@dataclass(frozen=True)
class Predictions:
    """A section's predictions, by the row method of the logs they come from (``none``: GRPO's logs)."""

    runs: dict[str, int]  # row method -> runs whose log was analysed
    missing: dict[str, int]  # row method -> runs without a readable log
    prompt_level: dict[str, dict[str, Spread]]  # candidate -> row method -> overall J(q)/J(uniform)
    kinds: dict[str, str]  # candidate -> oracle / predictor / mixture / two_stage
    skips: dict[str, dict[str, tuple[Spread, Spread]]]  # skip rule -> row method -> (tokens skipped, Σ|A| lost)
    row_level: Spread | None  # J(p*)/J(uniform on the non-zero rows), over every log
    problems: tuple[str, ...] = ()  # unreadable logs, one line each

    @property
    def available(self) -> bool:
        return sum(self.runs.values()) > 0

    def note(self) -> str:
        """One line: which logs the numbers come from, or why there are none."""
        gone = sum(self.missing.values())
        if not self.available:
            return (
                f"No prediction: none of the {gone} GRPO and nonzero runs of this section left a readable "
                "per-prompt log (runs recorded before the logs existed have none)."
            )
        used = ", ".join(f"{n} {'GRPO' if m == 'none' else m}" for m, n in self.runs.items() if n)
        return (
            f"Predicted from the per-prompt logs of {used} run{'s' if sum(self.runs.values()) != 1 else ''}"
            + (f"; {gone} run{'s' if gone != 1 else ''} left no readable log" if gone else "")
            + "; median [min, max] over runs."
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "missing": self.missing,
            "problems": list(self.problems),
            "prompt_level": {
                c: {"kind": self.kinds[c], **{m: s.as_dict() for m, s in by.items()}}
                for c, by in self.prompt_level.items()
            },
            "skips": {
                k: {m: {"tokens_skipped": t.as_dict(), "signal_lost": g.as_dict()} for m, (t, g) in by.items()}
                for k, by in self.skips.items()
            },
            "row_level": None if self.row_level is None else self.row_level.as_dict(),
        }


def predict(sec: Section, logs: Mapping[RunId, Path] | None, generation_cost: float) -> Predictions:
    """Analyse the logs of the section's GRPO and nonzero runs at the methods' LR (see the module doc)."""
    runs: dict[str, int] = {}
    missing: dict[str, int] = {}
    problems: list[str] = []
    ratios: dict[str, dict[str, list[float]]] = {}
    kinds: dict[str, str] = {}
    skipped: dict[str, dict[str, list[tuple[float, float]]]] = {}
    rows: list[float] = []
    for method, arm in LOG_ARMS:
        runs[method] = missing[method] = 0
        for run in sec.arms.get((arm, sec.default_lr), []):
            path = None if logs is None else logs.get(run.id)
            if path is None or not Path(path).exists():
                missing[method] += 1
                continue
            try:
                with np.errstate(divide="ignore", invalid="ignore"):  # rounds without signal are NaN, and skipped
                    res = analyse(
                        read_prompt_rounds([path]), AnalysisConfig(generation_cost=generation_cost, row_method=method)
                    )
            except (OSError, ValueError) as e:
                missing[method] += 1
                problems.append(f"{Path(path).name}: {e}")
                continue
            runs[method] += 1
            for r in res.prompt_level:
                kinds[r.name] = r.kind
                ratios.setdefault(r.name, {}).setdefault(method, []).append(r.overall)
            for s in res.skips:
                skipped.setdefault(s.name, {}).setdefault(method, []).append(
                    (s.overall_tokens_skipped, s.overall_signal_lost)
                )
            rows.append(res.row_level.overall)
    prompt_level = {c: {m: sp for m, v in by.items() if (sp := Spread.of(v)) is not None} for c, by in ratios.items()}
    skips = {
        k: {
            m: (t, g)
            for m, v in by.items()
            if (t := Spread.of([a for a, _ in v])) is not None and (g := Spread.of([b for _, b in v])) is not None
        }
        for k, by in skipped.items()
    }
    return Predictions(runs, missing, prompt_level, kinds, skips, Spread.of(rows), tuple(problems))


def source(method: str) -> str:
    """The logs a number comes from, by the analysis's row method."""
    return "GRPO logs" if method == "none" else f"{method} logs"


def prompt_table(pred: Predictions) -> list[str]:
    """The prompt-level J(q)/J(uniform) of every candidate, and the biased skips' expected effect, per log source."""
    methods = [m for m, n in pred.runs.items() if n]
    rows = [
        [c, pred.kinds[c], *(by[m].text() if m in by else "–" for m in methods)] for c, by in pred.prompt_level.items()
    ]
    rows += [
        [
            f"{k} (biased skip): share of generated tokens skipped / of Σ|A| lost",
            "skip",
            *(f"{by[m][0].text(pct=True)} / {by[m][1].text(pct=True)}" if m in by else "–" for m in methods),
        ]
        for k, by in pred.skips.items()
    ]
    return table(["candidate", "kind", *(f"J(q)/J(uniform), {source(m)}" for m in methods)], rows)


def row_level_line(pred: Predictions, measured: Comparison | None, sec: Section) -> str:
    """The row-level prediction of p*'s edge over nonzero, beside the measured nonzero → p* saving."""
    if not pred.available:
        return pred.note()
    if pred.row_level is None:
        return f"{pred.note()} No round of the logs had a non-zero advantage: no row-level prediction."
    r = pred.row_level
    head = (
        f"Row level, predicted beside measured: {escape(ROW_LEVEL)} = {r.text()} ({r.n} log{'s' if r.n != 1 else ''}), "
        f"a predicted saving of {100 * (1 - r.median):.0f}% of p\\* over nonzero in PO tokens to a given variance"
    )
    if measured is None:
        return head + "; measured: not computed (nonzero or p\\* not run, or the target is not above the start)."
    name = f"{escape(sec.name(measured.a))} → {escape(sec.name(measured.b))}"
    return (
        f"{head}; measured ({name}): {describe(measured.savings['po_tokens'], 'po_tokens')}, "
        f"{describe(measured.savings[HEADLINE_AXIS], HEADLINE_AXIS)}. The gap is what J leaves out: the rollouts' "
        "own sampling noise (J treats the pool as the whole data set), the proxy, Adam, bias, the plateau."
    )
