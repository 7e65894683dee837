"""The prompt-stage sections of `costaware reproduce`: which prompts are worth generating.

A section whose setting names a finite train set (``grpo-512-prompts``: the runs of group ``rollout``)
compares, in total cost to the common target, the candidate :data:`SKIP` (p* rows behind the biased
cost-aware skip) and, when run, :data:`UNBIASED` (p* rows behind cost-aware prompt sampling with
prompt weights) against GRPO and the peers: ``nonzero``, PODS, cost-aware PODS, GRESO's skip and DAPO's
dynamic sampling. The decomposition gains a line for the prompt stage; the prompt-stage target's verdict is
computed (:class:`TargetVerdict`): ≥ 2× less total cost than GRPO and ≥ 15% less than the best of
``nonzero``, PODS, GRESO and DAPO, each with a CI over ≥ 5 seeds that excludes zero.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware.experiments.arms import Arm
from costaware.report.curves import DEFAULT_GENERATION_COST, Estimate
from costaware.report.evidence import (
    HEADLINE_AXIS,
    ClaimPair,
    Comparison,
    Effect,
    Evidence,
    Key,
    Pair,
    Section,
    as_arm,
    baseline_key,
    compare,
    judge,
)
from costaware.report.evidence_text import answer_paragraph, describe
from costaware.report.labels import label
from costaware.report.md import escape, table
from costaware.report.predicted import Predictions, prompt_table, row_level_line, source
from costaware.report.verdicts import fmt

__all__ = [
    "SKIP",
    "UNBIASED",
    "PEERS",
    "TARGET_PEERS",
    "is_peer",
    "MIN_SAVING",
    "MIN_SAVING_OVER_BEST",
    "MIN_SEEDS",
    "is_rollout",
    "TARGET_WORDS",
    "TargetVerdict",
    "PromptCounts",
    "RolloutEvidence",
    "evaluate_rollout",
    "answer",
    "section_lines",
    "summary",
]

SKIP = Arm("p_star", rollout="cost_aware_skip")  # the candidate (biased)
UNBIASED = Arm("p_star", rollout="cost_aware")  # the unbiased candidate, when run
GRESO, DAPO = Arm("none", rollout="greso"), Arm("none", rollout="dapo")
# The peers beside nonzero, by what defines them: a PODS row method, or a prompt stage that skips or refills
PEER_METHODS, PEER_ROLLOUTS = ("pods", "cost_pods"), ("greso", "dapo")
PEERS = (Arm("nonzero"), *(Arm(m) for m in PEER_METHODS), GRESO, DAPO)
TARGET_PEERS = (Arm("nonzero"), Arm("pods"), GRESO, DAPO)  # the target's "best of": the largest saving over GRPO
MIN_SAVING = 0.5  # ≥ 2× less total cost than GRPO
MIN_SAVING_OVER_BEST = 0.15
MIN_SEEDS = 5
_FINITE_SET = re.compile(r"-\d+-prompts$")


def is_peer(arm: Arm) -> bool:
    """A peer other than ``nonzero``: PODS or cost-aware PODS (any options), GRESO's skip or DAPO's sampling.

    >>> is_peer(Arm("pods")), is_peer(Arm("p_star", rollout="greso")), is_peer(Arm("nonzero"))
    (True, True, False)
    """
    return arm.method in PEER_METHODS or arm.rollout in PEER_ROLLOUTS


def is_rollout(sec: Section) -> bool:
    """A prompt-stage section: a finite train set (``…-<N>-prompts``) or an arm with a prompt stage."""
    return bool(_FINITE_SET.search(sec.setting)) or any(a.rollout != "all" for a, _ in sec.arms)


TARGET_WORDS = (
    f"the prompt-stage target: ≥ 2× less total cost than GRPO and ≥ {100 * MIN_SAVING_OVER_BEST:.0f}% less "
    f"than the best of nonzero, PODS, GRESO's skip and DAPO's dynamic sampling, each with a CI over "
    f"≥ {MIN_SEEDS} seeds that excludes zero"
)


@dataclass(frozen=True)
class TargetVerdict:
    """The prompt-stage target for one candidate; ``shortfalls`` names each failing part, with its numbers."""

    candidate: Key
    met: bool
    shortfalls: tuple[str, ...]
    vs_baseline: Comparison | None
    best_peer: Key | None
    vs_best: Comparison | None
    seeds: int

    def text(self, sec: Section) -> str:
        name = escape(sec.name(self.candidate))
        if not self.met:
            return f"{name}: **target not met**: " + "; ".join(escape(s) for s in self.shortfalls) + "."
        assert self.vs_baseline is not None and self.vs_best is not None and self.best_peer is not None
        return (
            f"{name}: **target met**: total cost saving {fmt(self.vs_baseline.savings[HEADLINE_AXIS])} over "
            f"{escape(sec.name(self.vs_baseline.a))} (needs ≥ +{100 * MIN_SAVING:.0f}%, 2×) and "
            f"{fmt(self.vs_best.savings[HEADLINE_AXIS])} over the best peer, {escape(sec.name(self.best_peer))} "
            f"(needs ≥ +{100 * MIN_SAVING_OVER_BEST:.0f}%), each CI excluding zero, over {self.seeds} seeds."
        )

    def as_dict(self) -> dict[str, Any]:
        def s(c: Comparison | None) -> Any:
            return None if c is None else c.savings[HEADLINE_AXIS].as_dict()

        return {
            "candidate": self.candidate[0].key,
            "met": self.met,
            "shortfalls": list(self.shortfalls),
            "saving_vs_baseline": s(self.vs_baseline),
            "best_peer": None if self.best_peer is None else self.best_peer[0].key,
            "saving_vs_best_peer": s(self.vs_best),
            "seeds": self.seeds,
        }


@dataclass(frozen=True)
class PromptCounts:
    """Means over seeds of the run counters; None where a run did not record it (no prompt stage)."""

    examined: float | None
    drawn: float | None
    refills: float | None

    @property
    def skipped(self) -> float | None:
        return None if not self.examined or self.drawn is None else 1.0 - self.drawn / self.examined


@dataclass(frozen=True)
class RolloutEvidence:
    evidence: Evidence
    candidates: tuple[Key, ...]
    targets: tuple[TargetVerdict, ...]
    counts: dict[Key, PromptCounts]
    peer_savings: dict[Key, Estimate]  # each target peer's total-cost saving over GRPO


def _counts(sec: Section, key: Key) -> PromptCounts:
    def mean(name: str) -> float | None:
        v = [r.counters.get(name) for r in sec.arms[key]]
        return None if any(x is None for x in v) else float(np.mean([x for x in v if x is not None]))

    return PromptCounts(mean("prompts_examined"), mean("prompts_drawn"), mean("zvf_refills"))


def _rollout_pairs(
    sec: Section, base: Key, baseline: Arm, cands: tuple[Key, ...]
) -> tuple[list[Pair], list[ClaimPair]]:
    """The decomposition's steps (with the prompt stage) and the claims against GRPO and the peers."""

    def k(arm: Arm) -> Key:
        return (arm, sec.default_lr)

    nonzero, pstar = k(Arm("nonzero")), k(Arm("p_star"))
    pairs: list[Pair] = [
        ("zero-advantage row filter", Effect.RENORMALISATION, base, nonzero),
        ("cost-aware rows", Effect.MATCHED_STEP, nonzero, pstar),
    ]
    for c in cands:
        what = "biased skip" if c[0] == SKIP else "weighted, unbiased"
        pairs.append(
            (f"cost-aware prompt stage ({what})", Effect.PROMPT_STAGE, pstar, c)
            if pstar in sec.arms
            else (f"cost-aware rows and prompt stage ({what}), together", Effect.ROWS_AND_PROMPTS, nonzero, c)
        )
    claims: list[ClaimPair] = []
    for i, c in enumerate(cands):
        others = [base] + [k(p) for p in PEERS if i == 0 or k(p) in sec.arms]  # the unbiased one: peers run
        others += [o for o in (k(Arm("p_star", rollout="greso")), pstar) if o in sec.arms]
        claims += [(f"{label(c[0])} beats {label(o[0])}", o, c) for o in others]
    claims += [(f"{label(p)} beats {label(baseline)}", base, k(p)) for p in (GRESO, DAPO)]
    return pairs, claims


def evaluate_rollout(
    sec: Section,
    baseline: str | Arm = "none",
    *,
    target_fraction: float = 0.95,
    generation_cost: float = DEFAULT_GENERATION_COST,
    n_boot: int = 2000,
    seed: int = 0,
) -> RolloutEvidence:
    """Decomposition, claims, plateau and target verdicts of a prompt-stage section (see the module doc)."""
    baseline = as_arm(baseline, "baseline")
    base = baseline_key(sec, baseline, target_fraction)
    unbiased = (UNBIASED, sec.default_lr)
    cands = ((SKIP, sec.default_lr),) + ((unbiased,) if unbiased in sec.arms else ())
    pairs, claims = _rollout_pairs(sec, base, baseline, cands)
    ev = judge(
        sec,
        base,
        pairs,
        claims,
        target_fraction=target_fraction,
        generation_cost=generation_cost,
        n_boot=n_boot,
        seed=seed,
        tuned_note=f"the prompt-stage group runs no learning-rate sweep of {label(baseline)}",
    )
    done = {(c.a, c.b): c for c in ev.decomposition + [c for _, c, _ in ev.claims if c is not None]}

    def comp(a: Key, b: Key) -> Comparison | None:
        """The comparison of ``b`` against ``a``, computed once (the verdicts' own where they hold it)."""
        if not ev.informative or a not in sec.arms or b not in sec.arms:
            return None
        if (a, b) not in done:
            name = f"{label(b[0])} against {label(a[0])}"
            done[(a, b)] = compare(sec, name, Effect.CLAIM, a, b, ev.target, generation_cost, n_boot, seed)
        return done[(a, b)]

    peer_keys = [(p, sec.default_lr) for p in TARGET_PEERS]
    peer_savings = {p: cmp.savings[HEADLINE_AXIS] for p in peer_keys if (cmp := comp(base, p)) is not None}
    targets = tuple(_target(sec, ev, c, peer_savings, comp) for c in cands)
    return RolloutEvidence(ev, cands, targets, {key: _counts(sec, key) for key in sec.arms}, peer_savings)


def _target(
    sec: Section,
    ev: Evidence,
    cand: Key,
    peer_savings: dict[Key, Estimate],
    comp: Callable[[Key, Key], Comparison | None],
) -> TargetVerdict:
    """Each part of the target, checked on the total-cost saving's point estimate and its CI; a part that fails
    is named with its numbers."""
    base = ev.baseline
    if cand not in sec.arms:
        return TargetVerdict(cand, False, (f"{sec.name(cand)} was not run",), None, None, None, 0)
    if not ev.informative:
        why = f"the target {ev.target:.3f} is not above the starting accuracy {ev.start:.3f}: no method improved enough"
        return TargetVerdict(cand, False, (why,), None, None, None, len(sec.arms[cand]))
    short: list[str] = []
    vs_base = comp(base, cand)
    assert vs_base is not None  # both were run and the target is informative
    s = vs_base.savings[HEADLINE_AXIS]
    if not (s.value >= MIN_SAVING and s.lo > 0):
        short.append(
            f"against {sec.name(base)}, total cost saving {fmt(s)}; it needs ≥ +{100 * MIN_SAVING:.0f}% (2×)"
            + ("" if s.lo > 0 else " with a CI above zero")
        )
    best = (
        max(peer_savings, key=lambda p: (np.nan_to_num(peer_savings[p].value, nan=-np.inf), p))
        if peer_savings
        else None
    )
    vs_best = None if best is None else comp(best, cand)
    if vs_best is None:
        short.append("none of " + ", ".join(label(p) for p in TARGET_PEERS) + " was run, so the best peer is unknown")
    else:
        assert best is not None  # vs_best is compared against the best peer
        b = vs_best.savings[HEADLINE_AXIS]
        if not (b.value >= MIN_SAVING_OVER_BEST and b.lo > 0):
            short.append(
                f"against the best peer, {sec.name(best)} (itself saving {fmt(peer_savings[best])} over "
                f"{sec.name(base)}), total cost saving {fmt(b)}; it needs ≥ +{100 * MIN_SAVING_OVER_BEST:.0f}%"
                + ("" if b.lo > 0 else " with a CI above zero")
            )
    seeds = min(len(sec.arms[key]) for key in (base, cand) + ((best,) if best else ()))
    if seeds < MIN_SEEDS:
        short.append(f"{seeds} seed{'s' if seeds != 1 else ''}; the target needs CIs over ≥ {MIN_SEEDS}")
    return TargetVerdict(cand, not short, tuple(short), vs_base, best, vs_best, seeds)


def answer(rev: RolloutEvidence, baseline: str | Arm) -> str:
    """The opening paragraph of a prompt-stage section: the usual answer for the candidate, then the target."""
    para = answer_paragraph(rev.evidence, baseline, rev.candidates[0][0])
    return (
        para
        + f" {TARGET_WORDS[0].upper()}{TARGET_WORDS[1:]}. "
        + " ".join(t.text(rev.evidence.section) for t in rev.targets)
    )


def _counts_rows(rev: RolloutEvidence) -> list[list[str]]:
    sec = rev.evidence.section

    def f(v: float | None, pct: bool = False) -> str:
        return "–" if v is None else f"{100 * v:.0f}%" if pct else f"{v:.0f}"

    order = sorted(sec.arms, key=lambda key: (key[0] != rev.evidence.baseline[0], key))
    return [
        [sec.name(key), f(c.examined), f(c.drawn), f(c.skipped, pct=True), f(c.refills)]
        for key in order
        for c in (rev.counts[key],)
    ]


def _measured_beside(rev: RolloutEvidence, pred: Predictions) -> list[str]:
    """The prompt stage's predicted effects next to the measured ones, one bullet per arm run."""
    sec, ev = rev.evidence.section, rev.evidence
    steps = {c.b: c for c in ev.decomposition if c.effect in (Effect.PROMPT_STAGE, Effect.ROWS_AND_PROMPTS)}
    claims = {(c.a, c.b): c for _, c, _ in ev.claims if c is not None}
    out = []
    for arm, skip, logs, against in ((GRESO, "greso", "none", ev.baseline), (SKIP, "cost_aware_skip", "nonzero", None)):
        key = (arm, sec.default_lr)
        comp = claims.get((ev.baseline, key)) if against else steps.get(key)
        pr = pred.skips.get(skip, {}).get(logs)
        if key not in sec.arms or pr is None:
            continue
        measured = rev.counts[key].skipped
        out.append(
            f"- {escape(sec.name(key))}: predicted share of generated tokens skipped {pr[0].text(pct=True)}, "
            f"of Σ\\|A\\| lost {pr[1].text(pct=True)} ({source(logs)}); measured share of prompts skipped "
            + ("not recorded" if measured is None else f"{100 * measured:.0f}%")
            + (
                ""
                if comp is None
                else f"; {escape(sec.name(comp.a))} → {escape(sec.name(comp.b))}: "
                f"{describe(comp.savings['generated_tokens'], 'generated_tokens')}, "
                f"{describe(comp.savings[HEADLINE_AXIS], HEADLINE_AXIS)}"
            )
            + "."
        )
    un = (UNBIASED, sec.default_lr)
    mix = pred.prompt_level.get("posterior+a0.1", {}).get("nonzero")
    if un in sec.arms and mix is not None:
        comp = steps.get(un)
        out.append(
            f"- {escape(sec.name(un))} (posterior mixed with uniform at floor 0.1): predicted J(q)/J(uniform) "
            f"{mix.text()} (nonzero logs), a predicted saving of {100 * (1 - mix.median):.0f}%; measured "
            + (
                "not computed"
                if comp is None
                else f"{escape(sec.name(comp.a))} → {escape(sec.name(comp.b))}: "
                f"{describe(comp.savings[HEADLINE_AXIS], HEADLINE_AXIS)}"
            )
            + "."
        )
    return out


def section_lines(rev: RolloutEvidence, pred: Predictions) -> list[str]:
    """The prompt-stage part of a section, after its method table, decomposition and verdicts."""
    sec, ev = rev.evidence.section, rev.evidence
    lines = [
        "### The prompt-stage target: total cost to the common target",
        "",
        f"{TARGET_WORDS[0].upper()}{TARGET_WORDS[1:]}.",
        "",
    ]
    lines += [f"- {t.text(sec)}" for t in rev.targets]
    if rev.peer_savings:
        lines += [
            "",
            "Peers' total-cost saving over GRPO (the best one is the bar): "
            + "; ".join(f"{escape(sec.name(p))} {fmt(s)}" for p, s in rev.peer_savings.items())
            + ".",
        ]
    lines += ["", "### Prompts examined and generated (mean over seeds)", ""]
    lines += table(
        ["method", "prompts examined", "prompts generated", "skipped before generation", "DAPO refills"],
        _counts_rows(rev),
    )
    lines += [
        "",
        "Biased arms say so in their label: a skipped prompt is never trained on, so the expected update "
        "is not full-dataset GRPO's. Unbiased cost-aware prompts carry the weight 1/(N q).",
        "",
        "### Predicted beside measured",
        "",
        pred.note(),
        "",
    ]
    if pred.available:
        lines += prompt_table(pred) + [""] + _measured_beside(rev, pred)
        matched = next((c for c in ev.decomposition if c.effect is Effect.MATCHED_STEP), None)
        lines += ["", row_level_line(pred, matched, sec)]
    return lines + [""]


def summary(rev: RolloutEvidence, pred: Predictions) -> dict[str, Any]:
    """The prompt-stage numbers for ``summary.json``."""
    return {
        "candidates": [c[0].key for c in rev.candidates],
        "targets": [t.as_dict() for t in rev.targets],
        "peer_savings_over_baseline": {p[0].key: s.as_dict() for p, s in rev.peer_savings.items()},
        "prompt_counts": {
            f"{a.key}@{lr:g}": {"examined": c.examined, "drawn": c.drawn, "skipped": c.skipped, "refills": c.refills}
            for (a, lr), c in rev.counts.items()
        },
        "predicted": pred.as_dict(),
    }
