"""The report's first stage: every number it states, computed from the run records into frozen records.

:func:`compute_claims` groups the runs into sections (``report.evidence``), evaluates each (a prompt-stage
section through ``report.rollout``), and adds per section the arms' statistics (``report.arm_stats``), the
key arms a reader compares first, the verdicts at other prices and targets and the price sweep
(``report.sweeps``), and the predictions from the per-prompt logs (``report.predicted``). The figures,
the Markdown, the HTML and ``summary.json`` only read what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from costaware.experiments.arms import Arm
from costaware.experiments.records import RunId, RunResult
from costaware.report import opening, sweeps
from costaware.report.advice import MethodChoice, section_choices
from costaware.report.arm_stats import ArmStats, section_arm_stats
from costaware.report.curves import Estimate
from costaware.report.evidence import Evidence, Key, Section, evaluate_section, sections
from costaware.report.predicted import Predictions, predict
from costaware.report.rollout import RolloutEvidence, evaluate_rollout, is_peer, is_rollout
from costaware.report.tuned import TunedEvidence
from costaware.report.tuned import evaluate as evaluate_tuned

__all__ = ["SectionId", "SectionClaims", "ReportClaims", "compute_claims", "key_arms", "section_id"]

SectionId = tuple[str, str]  # (task, setting)
HEADLINE_SETTING = "grpo"  # the job's own loss: the sections the advice speaks for


def section_id(sec: Section) -> SectionId:
    return sec.task, sec.setting


@dataclass(frozen=True)
class SectionClaims:
    """One section's numbers; ``rollout`` only for a prompt-stage section, ``predictions`` for it and the
    headline (``grpo``) sections; ``price_sweep`` None where the target is not above the start."""

    evidence: Evidence
    rollout: RolloutEvidence | None
    predictions: Predictions | None
    arm_stats: Mapping[Key, ArmStats]
    key_arms: tuple[Key, ...]
    price_rows: tuple[sweeps.PriceRow, ...]
    target_rows: tuple[sweeps.TargetRow, ...]
    price_sweep: Mapping[Key, tuple[Estimate, ...]] | None

    @property
    def id(self) -> SectionId:
        return section_id(self.evidence.section)


@dataclass(frozen=True)
class ReportClaims:
    """Every section's numbers, the opening table's rows, and this machine's measured price of a token."""

    baseline: Arm
    candidate: Arm
    generation_cost: float
    target_fraction: float
    sections: tuple[SectionClaims, ...]
    opening_rows: tuple[opening.Row, ...]
    measured_price_ratio: float | None  # seconds per generated token over seconds per PO token (CPU)
    tuned: tuple[TunedEvidence, ...] = ()  # each arm swept over LRs at its own validation-chosen LR
    advice: tuple[MethodChoice, ...] = ()  # the method to use per headline task and price (``report.advice``)

    @property
    def evidences(self) -> list[Evidence]:
        return [s.evidence for s in self.sections]


def key_arms(ev: Evidence, stats: Mapping[Key, ArmStats], candidates: Sequence[Key]) -> list[Key]:
    """The arms a reader compares first: GRPO, nonzero, the candidate(s), and the best peer (the one of PODS,
    cost-aware PODS, GRESO's skip, DAPO's sampling with the lowest total cost to the target)."""
    sec, lr = ev.section, ev.section.default_lr
    out = [ev.baseline, (Arm("nonzero"), lr), *candidates]
    peers = [k for k in sec.arms if k[1] == lr and is_peer(k[0])]
    if peers:
        out.append(min(peers, key=lambda k: (stats[k].to_target["total_cost"], k)))
    return [k for k in dict.fromkeys(out) if k in sec.arms]


def _section_claims(
    sec: Section,
    baseline: Arm,
    candidate: Arm,
    target_fraction: float,
    generation_cost: float,
    logs: Mapping[RunId, Path] | None,
) -> SectionClaims:
    rollout = (
        evaluate_rollout(sec, baseline, target_fraction=target_fraction, generation_cost=generation_cost)
        if is_rollout(sec)
        else None
    )
    ev = (
        rollout.evidence
        if rollout is not None
        else evaluate_section(
            sec, baseline, candidate=candidate, target_fraction=target_fraction, generation_cost=generation_cost
        )
    )
    predictions = (
        predict(sec, logs, generation_cost) if rollout is not None or sec.setting == HEADLINE_SETTING else None
    )
    stats = section_arm_stats(ev)
    keys = key_arms(ev, stats, rollout.candidates if rollout is not None else ((candidate, sec.default_lr),))
    sweep = (
        {k: tuple(sweeps.price_savings(sec, ev.baseline, k, ev.target, sweeps.SWEEP)) for k in keys if k != ev.baseline}
        if ev.informative
        else None
    )
    return SectionClaims(
        evidence=ev,
        rollout=rollout,
        predictions=predictions,
        arm_stats=stats,
        key_arms=tuple(keys),
        price_rows=tuple(sweeps.price_claims(ev)),
        target_rows=tuple(sweeps.target_claims(ev)),
        price_sweep=sweep,
    )


def compute_claims(
    results: Sequence[RunResult],
    *,
    baseline: Arm,
    candidate: Arm,
    generation_cost: float,
    target_fraction: float,
    logs: Mapping[RunId, Path] | None,
) -> ReportClaims:
    """Every section's numbers (see the module doc); the headline section (``grpo``) first."""
    secs = sections(results, baseline)
    if not secs:
        raise ValueError(f"baseline {baseline.key!r} has no runs: arms are {sorted({r.id.arm.key for r in results})}")
    claims = tuple(_section_claims(s, baseline, candidate, target_fraction, generation_cost, logs) for s in secs)
    return ReportClaims(
        baseline=baseline,
        candidate=candidate,
        generation_cost=generation_cost,
        target_fraction=target_fraction,
        sections=claims,
        opening_rows=tuple(
            opening.rows([s.evidence for s in claims], {s.id: s.rollout.targets for s in claims if s.rollout})
        ),
        measured_price_ratio=sweeps.measured_ratio([r for r in results if r.id.method != "sft"]),
        tuned=tuple(evaluate_tuned([s.evidence for s in claims], target_fraction=target_fraction)),
        advice=tuple(
            choice
            for s in claims
            if s.rollout is None and s.evidence.section.setting == HEADLINE_SETTING
            for choice in section_choices(s.evidence, s.price_rows, candidate)
        ),
    )
