"""Each arm at its own learning rate, chosen on the validation split, and the comparisons of the tuned arms.

A profile whose ``lr_sweep_arms`` names arms besides GRPO runs each of them at the multiples of ``lr_sweep`` as
well (its x1 run is the headline's). :func:`pick_lr` chooses an arm's LR from its peak seed-mean validation
accuracy at each LR (ties: the smaller LR), the rule of GRPO's tuned baseline in ``report.evidence``; the
held-out set never enters. :func:`tuned_arms` applies it to every swept arm of a section, and :func:`evaluate`
compares the tuned arms, `nonzero` → each tuned cost-aware arm and, when GRPO was swept, GRPO → each tuned arm,
at a target of their own (``target_fraction`` × the lowest seed-mean held-out peak among them) with the
verdicts' paired bootstrap. A section with fewer than two tuned arms gives nothing, so a report without such
sweeps is unchanged.

>>> pick_lr({1e-4: 0.61, 2e-4: 0.64, 4e-4: 0.64})  # a tie goes to the smaller LR
0.0002
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from costaware.experiments.arms import Arm
from costaware.report import evidence as E
from costaware.report.curves import AXES, seed_curves
from costaware.report.evidence_text import AXIS_WORDS
from costaware.report.labels import label
from costaware.report.md import escape, table
from costaware.report.verdicts import fmt, verdict

__all__ = ["TunedArm", "TunedEvidence", "pick_lr", "tuned_arms", "evaluate", "lines", "summary"]


@dataclass(frozen=True)
class TunedArm:
    """One arm's LR, chosen on validation: ``validation`` maps each swept LR to its peak seed-mean accuracy."""

    arm: Arm
    learning_rate: float
    validation: dict[float, float]

    @property
    def key(self) -> E.Key:
        return (self.arm, self.learning_rate)

    @property
    def at_edge(self) -> bool:
        """The chosen LR is the smallest or the largest swept: the best one may lie beyond the sweep."""
        return self.learning_rate in (min(self.validation), max(self.validation))


@dataclass(frozen=True)
class TunedEvidence:
    """One section's tuned arms and their comparisons at a target of their own (empty: not above the start)."""

    section: E.Section
    tuned: tuple[TunedArm, ...]
    target: float
    start: float
    comparisons: tuple[E.Comparison, ...]


def pick_lr(validation: Mapping[float, float]) -> float:
    """The LR with the highest peak validation accuracy; ties go to the smaller LR."""
    if not validation:
        raise ValueError("validation must map at least one learning rate to its accuracy, got {}")
    return max(validation, key=lambda lr: (validation[lr], -lr))


def _has_validation(runs: Sequence[Any]) -> bool:
    return all(e.validation_accuracy is not None for r in runs for e in r.evals)


def _peak(runs: Sequence[Any], metric: str) -> float:
    return float(seed_curves(runs, "po_tokens", metric=metric).mean.max())


def tuned_arms(sec: E.Section) -> list[TunedArm]:
    """Every arm of ``sec`` run at two LRs or more, each with validation accuracy, at its chosen LR."""
    by: dict[Arm, dict[float, Any]] = defaultdict(dict)
    for (arm, lr), runs in sec.arms.items():
        by[arm][lr] = runs
    out = []
    for arm, at_lr in sorted(by.items()):
        if len(at_lr) < 2 or not all(_has_validation(r) for r in at_lr.values()):
            continue
        val = {lr: _peak(r, "validation") for lr, r in sorted(at_lr.items())}
        out.append(TunedArm(arm, pick_lr(val), val))
    return out


def _pairs(tuned: Sequence[TunedArm]) -> list[tuple[TunedArm, TunedArm]]:
    by = {t.arm: t for t in tuned}
    pairs = []
    nonzero, grpo = by.get(Arm("nonzero")), by.get(Arm("none"))
    if nonzero is not None:
        pairs += [(nonzero, t) for t in tuned if t.arm.method in E.COST_AWARE]
    if grpo is not None:
        pairs += [(grpo, t) for t in tuned if t is not grpo]
    return pairs


def evaluate(
    evs: Sequence[E.Evidence], *, target_fraction: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[TunedEvidence]:
    """The tuned arms of each section with two or more of them, and their comparisons (see the module doc)."""
    out = []
    for ev in evs:
        sec = ev.section
        tuned = tuned_arms(sec)
        pairs = _pairs(tuned)
        if not pairs:
            continue
        used = sorted({t.key for pair in pairs for t in pair})
        target = target_fraction * min(_peak(sec.arms[k], "heldout") for k in used)
        start = max(float(seed_curves(sec.arms[k], "po_tokens").mean[0]) for k in used)
        comps = tuple(
            E.compare(sec, f"{label(a.arm)} → {label(b.arm)}", E.Effect.CLAIM, a.key, b.key, target,
                      ev.generation_cost, n_boot, seed)
            for a, b in pairs
        ) if target > start else ()  # fmt: skip
        out.append(TunedEvidence(sec, tuple(tuned), target, start, comps))
    return out


def lines(tevs: Sequence[TunedEvidence]) -> list[str]:
    """The report's section: each tuned arm's LR and the comparisons (nothing when no section has them)."""
    if not tevs:
        return []
    out = [
        "## Each arm at its own learning rate",
        "",
        "Each swept arm runs at the profile's LR multiples; its LR is the one with the highest peak seed-mean "
        "validation accuracy (ties: the smaller), never chosen on the held-out set. The comparisons below put "
        "each arm at its own LR, at a target of their own: 95% of the lowest seed-mean held-out peak among the "
        "tuned arms compared. An LR at the edge of the sweep may not be the best one.",
        "",
    ]
    for t in tevs:
        sec = t.section
        out += [f"### {escape(sec.task)} / {escape(sec.setting)}", ""]
        out += table(
            ["arm", "LR chosen", "peak validation accuracy by LR", "note"],
            [
                [
                    label(a.arm),
                    f"{a.learning_rate:g} (×{a.learning_rate / sec.default_lr:.3g})",
                    ", ".join(f"{lr:g}: {v:.3f}" for lr, v in a.validation.items()),
                    "at the edge of the sweep" if a.at_edge else "",
                ]
                for a in t.tuned
            ],
        )
        out.append("")
        if not t.comparisons:
            out += [f"Not compared: the target {t.target:.3f} is not above the starting accuracy {t.start:.3f}.", ""]
            continue
        out += [f"Target: **{t.target:.3f}**.", ""]
        out += table(
            ["each at its tuned LR", *(f"{AXIS_WORDS[a]} saving [95% CI]" for a in AXES), "verdict"],
            [[c.name, *(fmt(c.savings[a]) for a in AXES), verdict(c.savings[AXES[0]]).value] for c in t.comparisons],
        )
        out.append("")
    return out


def summary(tevs: Sequence[TunedEvidence]) -> list[dict[str, Any]]:
    """The same as JSON: per section, the tuned arms and the comparisons."""
    return [
        {
            "task": t.section.task,
            "setting": t.section.setting,
            "target": t.target,
            "start": t.start,
            "tuned": [
                {
                    "arm": a.arm.key,
                    "learning_rate": a.learning_rate,
                    "at_edge": a.at_edge,
                    "validation": {f"{lr:g}": v for lr, v in a.validation.items()},
                }
                for a in t.tuned
            ],  # fmt: skip
            "comparisons": [
                {
                    "name": c.name,
                    "from": [c.a[0].key, c.a[1]],
                    "to": [c.b[0].key, c.b[1]],
                    **{axis: s.as_dict() for axis, s in c.savings.items()},
                    "verdict": verdict(c.savings[AXES[0]]).value,
                }
                for c in t.comparisons
            ],  # fmt: skip
        }
        for t in tevs
    ]
