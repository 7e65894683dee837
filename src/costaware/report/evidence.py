"""The evidence of the main job, computed: decomposition of the saving, verdicts, plateau, tuned baseline.

Every verdict is decided on the headline axis, total cost (``curves.AXES[0]``); the other axes are beside it.

docs/design.md, "Evidence: controls and confounders": GRPO → nonzero isolates renormalisation,
nonzero → p* (centred) and GRPO → p* (raw) isolate cost-aware sampling at a matched expected step,
and a baseline at its validation-tuned learning rate guards against a weak baseline. No label string is
ever looked up or compared: runs are grouped by their typed :class:`~costaware.experiments.arms.Arm`
(``RunId.arm``), and each comparison carries its :class:`Effect`. The same evidence in words (a saving
described, a verdict line, the answer paragraph) is :mod:`costaware.report.evidence_text`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from costaware._checks import generation_cost as check_generation_cost
from costaware.experiments.arms import Arm
from costaware.experiments.records import RunResult
from costaware.grpo.methods import method_names
from costaware.report.curves import AXES, DEFAULT_GENERATION_COST, Estimate, gap_at, saving, seed_curves
from costaware.report.labels import label
from costaware.report.plateau import MIN_GAIN, Plateau, plateau
from costaware.report.verdicts import RULE

__all__ = [
    "Section",
    "Plateau",
    "MIN_GAIN",
    "Effect",
    "Comparison",
    "Evidence",
    "sections",
    "plateau",
    "evaluate_section",
    "judge",
    "compare",
    "axis_saving",
    "baseline_key",
    "HEADLINE_AXIS",
    "as_arm",
    "COST_AWARE",
    "RULE",
]

Key = tuple[Arm, float]  # (arm, learning rate)
# the unbiased methods whose distribution uses the costs (the tuned comparison's "best cost-aware method")
COST_AWARE = method_names(lambda m: m.uses_costs and not m.biased)
_EXCLUDED_GROUPS = ("ablation", "control")


class Effect(enum.Enum):
    """What a comparison measures; its display text is :attr:`Comparison.name`, which nothing matches on."""

    RENORMALISATION = enum.auto()  # GRPO → nonzero
    MATCHED_STEP = enum.auto()  # nonzero → p* (centred): cost-aware sampling at a matched expected step
    BASELINE_STEP = enum.auto()  # GRPO → p* (raw): cost-aware sampling at GRPO's expected step
    TUNED_BASELINE = enum.auto()  # tuned GRPO → best cost-aware arm: a comparison of baselines, not an effect
    PROMPT_STAGE = enum.auto()  # p* → p* with a prompt stage: which prompts get generated at all
    ROWS_AND_PROMPTS = enum.auto()  # nonzero → p* with a prompt stage, when p* alone was not run
    CLAIM = enum.auto()  # a verdict's comparison


def as_arm(name: str | Arm, what: str) -> Arm:
    """An arm named at the public edge: a method id at its default options, or an Arm."""
    if isinstance(name, Arm):
        return name
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a method id or an Arm, got {name!r}")
    try:
        return Arm(name)
    except ValueError as e:
        raise ValueError(f"{what} must be a method id or an Arm, got {name!r} ({e})") from None


@dataclass(frozen=True)
class Section:
    """The runs of one task and setting, by (arm, learning rate); ``default_lr`` is the methods' LR."""

    task: str
    setting: str
    arms: dict[Key, list[RunResult]]
    default_lr: float

    def name(self, key: Key) -> str:
        return label(key[0], learning_rate=key[1], default_lr=self.default_lr)


def sections(results: Sequence[RunResult], baseline: str | Arm) -> list[Section]:
    """Group the non-ablation runs by (task, setting), each holding the ``baseline`` arm at least."""
    baseline = as_arm(baseline, "baseline")
    by: dict[tuple[str, str], dict[Key, list[RunResult]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.id.group not in _EXCLUDED_GROUPS and r.id.method != "sft":
            by[(r.id.task, r.id.setting)][(r.id.arm, r.id.learning_rate)].append(r)
    out = []
    for (task, setting), arms in sorted(by.items(), key=lambda kv: (kv[0][1] != "grpo", kv[0])):  # headline first
        if not any(a == baseline for a, _ in arms):
            continue
        # the methods' LR: an arm's LR sweep (group lr_sweep) runs it at other LRs, never at the methods' own
        others = [lr for (a, lr), runs in arms.items() if a != baseline for r in runs if r.id.group != "lr_sweep"]
        lrs = others or [lr for (a, lr) in arms if a == baseline]
        default_lr = max(set(lrs), key=lambda v: (lrs.count(v), -v))  # the methods' LR; ties: the smaller
        out.append(Section(task, setting, {k: sorted(v, key=lambda r: r.id.seed) for k, v in arms.items()}, default_lr))
    return out


def _peak(runs: Sequence[RunResult], metric: str) -> float:
    return float(seed_curves(runs, "po_tokens", metric=metric).mean.max())


def _has_validation(runs: Sequence[RunResult]) -> bool:
    return all(e.validation_accuracy is not None for r in runs for e in r.evals)


@dataclass(frozen=True)
class Comparison:
    """Saving of ``b`` over ``a`` to the common target on each axis (positive: ``b`` needs less).

    ``effect`` says what is compared; ``name`` is its text in the report.
    """

    name: str
    a: Key
    b: Key
    savings: dict[str, Estimate]
    rounds_at: float = float("nan")  # the last round both reached
    rounds_gap: Estimate | None = None  # accuracy of b minus a at rounds_at: equal rollouts
    effect: Effect = Effect.CLAIM


@dataclass(frozen=True)
class Evidence:
    """Everything the report states about one section, computed."""

    section: Section
    baseline: Key
    target: float
    target_fraction: float
    generation_cost: float
    tuned: Key | None
    tuned_note: str
    best: Key | None
    best_note: str
    decomposition: list[Comparison]
    claims: list[tuple[str, Comparison | None, str]]  # (claim, comparison or None, why absent)
    plateau: Plateau
    peaks: dict[Key, float] = field(default_factory=dict)
    start: float = float("nan")  # highest seed-mean accuracy at the first evaluation among the arms compared
    tuned_plateau: Plateau | None = None  # the same check on the tuned baseline, when it is another LR

    @property
    def informative(self) -> bool:
        """False when the target is not above the starting accuracy: every arm 'reaches' it at x = 0."""
        return bool(self.target > self.start)


def compare(
    sec: Section, name: str, effect: Effect, a: Key, b: Key, target: float, cost: float, n_boot: int, seed: int
) -> Comparison:
    """The saving of ``b`` over ``a`` to ``target`` on every axis, and their accuracy gap at equal rounds."""
    ra, rb = sec.arms[a], sec.arms[b]
    est = {axis: axis_saving(sec, a, b, axis, target, cost, n_boot, seed) for axis in AXES}
    at, gap = gap_at(seed_curves(ra, "rounds"), seed_curves(rb, "rounds"), n_boot=n_boot, seed=seed)
    return Comparison(name, a, b, est, at, gap, effect)


def axis_saving(
    sec: Section, a: Key, b: Key, axis: str, target: float, cost: float, n_boot: int, seed: int
) -> Estimate:
    """The saving of ``b`` over ``a`` on one axis: the one bootstrap every verdict, sweep and figure uses."""
    return saving(
        seed_curves(sec.arms[a], axis, generation_cost=cost),
        seed_curves(sec.arms[b], axis, generation_cost=cost),
        target,
        n_boot=n_boot,
        seed=seed,
    )


Pair = tuple[str, Effect, Key, Key]  # (name, effect, earlier, later): a step of the decomposition
ClaimPair = tuple[str, "Key | None", Key]  # (claim, earlier, later); earlier None: not run (the tuned note says why)


def judge(
    sec: Section,
    base: Key,
    pairs: Sequence[Pair],
    claim_pairs: Sequence[ClaimPair],
    *,
    target_fraction: float,
    generation_cost: float,
    n_boot: int,
    seed: int,
    tuned: Key | None = None,
    tuned_note: str = "",
    best: Key | None = None,
    best_note: str = "",
) -> Evidence:
    """The common target over the arms that ``pairs`` and ``claim_pairs`` name, then each pair's comparison.

    The target is ``target_fraction`` × the lowest seed-mean peak among those arms, so that every seed-mean
    curve reaches it. A step whose arms were not both run is left out; a claim whose arms were not says so.
    """
    check_generation_cost(generation_cost)  # before any curve is read
    pairs = [(n, e, a, b) for n, e, a, b in pairs if a in sec.arms and b in sec.arms]
    used = {k for *_, a, b in pairs for k in (a, b)} | {k for _, a, b in claim_pairs for k in (a, b) if k in sec.arms}
    used.add(base)
    peaks = {k: _peak(sec.arms[k], "heldout") for k in sorted(used)}  # sorted: the summary lists them in one order
    target = target_fraction * min(peaks.values())
    start = max(float(seed_curves(sec.arms[k], "po_tokens").mean[0]) for k in used)
    flat = f"the target {target:.3f} is not above the starting accuracy {start:.3f}: no method improved enough"
    args = (target, generation_cost, n_boot, seed)
    decomposition = [compare(sec, n, e, a, b, *args) for n, e, a, b in pairs] if target > start else []
    claims: list[tuple[str, Comparison | None, str]] = []
    for claim, other, later in claim_pairs:
        if not target > start:
            claims.append((claim, None, flat))
        elif later not in sec.arms:
            claims.append((claim, None, f"{sec.name(later)} was not run"))
        elif other is None:
            claims.append((claim, None, tuned_note))
        elif other not in sec.arms:
            claims.append((claim, None, f"{sec.name(other)} was not run"))
        else:
            claims.append((claim, compare(sec, claim, Effect.CLAIM, other, later, *args), ""))
    return Evidence(
        sec,
        base,
        target,
        target_fraction,
        generation_cost,
        tuned,
        tuned_note,
        best,
        best_note,
        decomposition,
        claims,
        plateau(sec.arms[base], n_boot=n_boot, seed=seed),
        peaks,
        start,
        plateau(sec.arms[tuned], n_boot=n_boot, seed=seed) if tuned not in (None, base) else None,
    )


def _tuned_baseline(sec: Section, baseline: Arm) -> tuple[Key | None, str]:
    """The baseline at its learning rate of best peak seed-mean VALIDATION accuracy, and how it was chosen
    (or why there is none)."""
    lrs = sorted(lr for a, lr in sec.arms if a == baseline)
    if len(lrs) < 2:
        return None, f"no learning-rate sweep of {label(baseline)} was run"
    if not all(_has_validation(sec.arms[(baseline, lr)]) for lr in lrs):
        return None, "no validation accuracy was recorded, and the held-out set is never used to tune"
    val = {lr: _peak(sec.arms[(baseline, lr)], "validation") for lr in lrs}
    tuned = (baseline, max(lrs, key=lambda lr: (val[lr], -lr)))
    return tuned, "chosen on peak seed-mean validation accuracy: " + ", ".join(
        f"lr {lr:g}: {v:.3f}" for lr, v in val.items()
    )


def _best_cost_aware(sec: Section) -> tuple[Key | None, str]:
    """The unbiased cost-aware arm at the methods' LR with the best peak (validation where every one has it)."""
    ca = [k for k in sec.arms if k[0].method in COST_AWARE and k[0].step_budget == "rows" and k[1] == sec.default_lr]
    if not ca:
        return None, ""
    metric = "validation" if all(_has_validation(sec.arms[k]) for k in ca) else "heldout"
    best = max(ca, key=lambda k: _peak(sec.arms[k], metric))
    return best, (
        "chosen on peak seed-mean validation accuracy"
        if metric == "validation"
        else "chosen on held-out accuracy (no validation split recorded): an optimistic choice"
    )


def _headline_pairs(
    sec: Section, base: Key, baseline: Arm, candidate: Arm, tuned: Key | None, best: Key | None
) -> tuple[list[Pair], list[ClaimPair]]:
    """The decomposition's steps and the claims of a section without a prompt stage."""
    nonzero, cand = (Arm("nonzero"), sec.default_lr), (candidate, sec.default_lr)
    raw = (dataclasses.replace(candidate, weights="raw"), sec.default_lr)
    pairs: list[Pair] = [
        ("renormalisation", Effect.RENORMALISATION, base, nonzero),
        ("cost-aware sampling at a matched step", Effect.MATCHED_STEP, nonzero, cand),
        (f"cost-aware sampling at {label(baseline)}'s step", Effect.BASELINE_STEP, base, raw),
    ]
    tuned_words = f"{label(baseline)}, learning rate tuned on validation"
    if tuned is not None and best is not None:
        pairs.append((f"{tuned_words} → best cost-aware method", Effect.TUNED_BASELINE, tuned, best))
    claim_pairs: list[ClaimPair] = [
        (f"{label(candidate)} beats {label(baseline)}", base, cand),
        (f"nonzero beats {label(baseline)}", base, nonzero),
        (f"{label(candidate)} beats nonzero", nonzero, cand),
    ]
    if tuned != base:  # at the default LR the first claim already is this one (the opening says so)
        claim_pairs.append((f"{label(candidate)} beats {tuned_words}", tuned, cand))
    pods = (Arm("pods"), sec.default_lr)
    claim_pairs.append((f"{label(candidate)} beats PODS", pods, cand))
    if pods in sec.arms:  # the peer against the baseline and nonzero: the first screen's choice of method reads them
        claim_pairs += [("PODS beats " + label(baseline), base, pods), ("PODS beats nonzero", nonzero, pods)]
    paper, calibrated = ((dataclasses.replace(candidate, proxy=p), sec.default_lr) for p in ("advantage", "calibrated"))
    if paper in sec.arms:  # a token-sum setting: p* ('auto' = calibrated proxy) against the paper's proxy,
        # and the paper's p* against the same controls, so "where the paper's p* did not" is computed too
        claim_pairs += [
            (f"{label(candidate)} beats {label(paper[0])}", paper, cand),
            (f"{label(paper[0])} beats {label(baseline)}", base, paper),
            (f"{label(paper[0])} beats nonzero", nonzero, paper),
        ]
    if calibrated in sec.arms:  # the headline loss: is the calibrated proxy at least as good as the paper's?
        claim_pairs.append((f"{label(calibrated[0])} beats {label(candidate)}", cand, calibrated))
    return pairs, claim_pairs


def evaluate_section(
    sec: Section,
    baseline: str | Arm,
    *,
    candidate: str | Arm = "p_star",
    target_fraction: float = 0.95,
    generation_cost: float = DEFAULT_GENERATION_COST,
    n_boot: int = 2000,
    seed: int = 0,
) -> Evidence:
    """Target, tuned baseline, best cost-aware arm, decomposition, claims and plateau of one section.

    The common target is ``target_fraction`` × the lowest seed-mean peak among the arms compared, so
    that every seed-mean curve reaches it. The tuned baseline's LR and the best cost-aware arm are
    chosen on VALIDATION accuracy; without a validation split there is no tuned baseline.
    """
    baseline, candidate = as_arm(baseline, "baseline"), as_arm(candidate, "candidate")
    base = baseline_key(sec, baseline, target_fraction)
    tuned, tuned_note = _tuned_baseline(sec, baseline)
    best, best_note = _best_cost_aware(sec)
    pairs, claim_pairs = _headline_pairs(sec, base, baseline, candidate, tuned, best)
    ev = judge(
        sec,
        base,
        pairs,
        claim_pairs,
        target_fraction=target_fraction,
        generation_cost=generation_cost,
        n_boot=n_boot,
        seed=seed,
        tuned=tuned,
        tuned_note=tuned_note,
        best=best,
        best_note=best_note,
    )
    nonzero = (Arm("nonzero"), sec.default_lr)
    support = (dataclasses.replace(candidate, step_budget="support"), sec.default_lr)
    if support in sec.arms and nonzero in sec.arms and ev.informative:  # at the section's target, which it
        # does not set (an arm added after the recorded sections must not move their numbers)
        claim = f"{label(support[0])} beats nonzero"
        ev.claims.append(
            (claim, compare(sec, claim, Effect.CLAIM, nonzero, support, ev.target, generation_cost, n_boot, seed), "")
        )
    return ev


def baseline_key(sec: Section, baseline: Arm, target_fraction: float) -> Key:
    """The baseline's (arm, default LR), checked once at the public edge with ``target_fraction``."""
    if not 0 < target_fraction <= 1:
        raise ValueError(f"target_fraction must be in (0, 1], got {target_fraction!r}")
    base: Key = (baseline, sec.default_lr)
    if base not in sec.arms:
        raise ValueError(
            f"baseline {baseline.key!r} has no runs at the default lr {sec.default_lr:g} in {sec.task}/{sec.setting}"
        )
    return base


HEADLINE_AXIS = AXES[0]  # total cost: every verdict is decided by its CI
