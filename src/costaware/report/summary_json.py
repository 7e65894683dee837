"""``summary.json``: the report's numbers as JSON, read from the computed claims (``report.claims``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from costaware.experiments.records import RunResult
from costaware.report.claims import ReportClaims, SectionClaims
from costaware.report.curves import MIN_SEEDS_FOR_CI, Estimate
from costaware.report.evidence import HEADLINE_AXIS, Comparison, Evidence, Key, Plateau
from costaware.report.rollout import summary as rollout_summary
from costaware.report.step_errors import summary as step_error_summary
from costaware.report.sweeps import GPU_RATIO, GPU_SOURCES, PRICES, SWEEP, TARGET_FRACTIONS, price_name
from costaware.report.tuned import summary as tuned_summary
from costaware.report.verdicts import RULE, verdict

__all__ = ["summary"]


def _key(k: Key) -> list[Any]:
    """(arm, lr) as the summary's JSON writes it: [arm key, lr]."""
    return [k[0].key, k[1]]


def _arm_name(k: Key) -> str:
    return f"{k[0].key}@{k[1]:g}"


def _plateau(p: Plateau) -> dict[str, Any]:
    return {
        "plateaued": p.plateaued,
        "undecided": p.undecided,
        "learning": p.learning,
        "start": p.start,
        "peak": p.peak,
        "peak_index": p.peak_index,
        "n_points": p.n_points,
        "peak_late": p.peak_late,
        "rise": p.rise.as_dict(),
    }


def _comparison(c: Comparison) -> dict[str, Any]:
    return {
        "name": c.name,
        "from": _key(c.a),
        "to": _key(c.b),
        **{a: s.as_dict() for a, s in c.savings.items()},
        "rounds_at": c.rounds_at,
        "accuracy_gap_at_equal_rounds": c.rounds_gap.as_dict() if c.rounds_gap else None,
    }


def _evidence(ev: Evidence) -> dict[str, Any]:
    return {
        "tuned": _key(ev.tuned) if ev.tuned else None,
        "tuned_note": ev.tuned_note,
        "best": _key(ev.best) if ev.best else None,
        "peaks": {_arm_name(k): v for k, v in ev.peaks.items()},
        "decomposition": [_comparison(c) for c in ev.decomposition],
        "claims": [
            {
                "claim": n,
                **(_comparison(c) if c else {"absent": why}),
                "verdict": None if c is None else verdict(c.savings[HEADLINE_AXIS]).value,
            }
            for n, c, why in ev.claims
        ],
        "plateau": _plateau(ev.plateau),
        "tuned_plateau": None if ev.tuned_plateau is None else _plateau(ev.tuned_plateau),
    }


def _sweeps(section: SectionClaims) -> dict[str, Any]:
    return {
        "key_arms": [_key(k) for k in section.key_arms],
        "prices": [
            {"claim": r.claim, **{price_name(g): s.as_dict() for g, s in zip(PRICES, r.savings, strict=True)}}
            for r in section.price_rows
        ],
        "price_sweep": {_arm_name(k): [e.as_dict() for e in v] for k, v in (section.price_sweep or {}).items()},
        "targets": [
            {
                "claim": r.claim,
                "note": r.note,
                **{
                    f"{f:g}": None if s is None else s.as_dict()
                    for f, s in zip(TARGET_FRACTIONS, r.savings, strict=True)
                },
            }
            for r in section.target_rows
        ],
    }


def _section(section: SectionClaims) -> dict[str, Any]:
    ev = section.evidence
    sec = ev.section
    extra: dict[str, Any] = {}
    if section.rollout is not None and section.predictions is not None:
        extra["rollout"] = rollout_summary(section.rollout, section.predictions)
    elif section.predictions is not None:
        extra["predicted"] = section.predictions.as_dict()
    return {
        "task": sec.task,
        "setting": sec.setting,
        "default_lr": sec.default_lr,
        "target": ev.target,
        "start": ev.start,
        "informative": ev.informative,
        "arms": {_arm_name(k): st.as_dict() for k, st in section.arm_stats.items()},
        **_evidence(ev),
        **extra,
        **_sweeps(section),
    }


def _opening(claims: ReportClaims) -> list[dict[str, Any]]:
    return [
        {
            "section": list(r.section),
            "claim": r.claim,
            "absent": r.absent or None,
            "saving": None if r.comparison is None else r.comparison.savings[HEADLINE_AXIS].as_dict(),
            "verdict": r.verdict,
        }
        for r in claims.opening_rows
    ]


def _advice(claims: ReportClaims) -> list[dict[str, Any]]:
    def saving(s: Estimate | None) -> Any:
        return None if s is None else s.as_dict()

    return [
        {
            "task": c.task,
            "price": c.price,
            "use": None if c.use is None else _key(c.use),
            "saving": saving(c.saving),
            "candidate_over_baseline": saving(c.candidate_over_baseline),
            "nonzero_over_baseline": saving(c.nonzero_over_baseline),
            "candidate_over_nonzero": saving(c.candidate_over_nonzero),
            "decided": c.decided,
            "absent": c.absent or None,
        }
        for c in claims.advice
    ]


def summary(
    claims: ReportClaims,
    results: Sequence[RunResult],
    *,
    command: str,
    profile: Mapping[str, Any] | None,
    sft: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The whole of ``summary.json``."""
    return {
        "baseline": claims.baseline.key,
        "candidate": claims.candidate.key,
        "generation_cost": claims.generation_cost,
        "verdict_rule": RULE,
        "min_seeds_for_ci": MIN_SEEDS_FOR_CI,
        "opening": _opening(claims),
        "advice": _advice(claims),
        "price": {
            "measured_ratio_cpu": claims.measured_price_ratio,
            "gpu_ratio_range": list(GPU_RATIO),
            "gpu_sources": [src for src, _ in GPU_SOURCES],
            "sweep": list(SWEEP),
        },
        "sections": [_section(s) for s in claims.sections],
        **({"tuned_lr": tuned_summary(claims.tuned)} if claims.tuned else {}),
        **({"step_errors": errors} if (errors := step_error_summary(results)) else {}),
        "command": command,
        "profile": profile,
        "sft": sft,
        "runs": [
            {"id": r.id.as_dict(), "arm": r.id.arm.key, "spec": r.spec, "wall_seconds": r.wall_seconds} for r in results
        ],
    }
