"""The report's tables about the runs themselves, computed: what ran, the tokens each run fed, generation's share
of the wall time, the proxy's fidelity across training, and the ablations against their task's headline target.

Like ``report.claims``, this holds numbers only; ``report.markdown_front`` and ``report.markdown_appendix`` lay
them out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costaware.experiments.arms import Arm
from costaware.experiments.records import RunResult
from costaware.report.arm_stats import ArmStats, arm_stats
from costaware.report.claims import ReportClaims
from costaware.report.evidence import Key

__all__ = [
    "FIDELITY_KEYS",
    "FidelitySummary",
    "WhatRanRow",
    "TokenShareRow",
    "GenerationShare",
    "TokenShares",
    "AblationRow",
    "Ablations",
    "RunTables",
    "what_ran",
    "token_shares",
    "generation_share",
    "fidelity_summary",
    "ablations",
    "compute_run_tables",
]

FIDELITY_KEYS = ("pearson", "chi2", "j_vs_uniform")
FidelitySummary = dict[str, dict[Arm, dict[str, dict[str, float]]]]


@dataclass(frozen=True)
class WhatRanRow:
    """One group, task and setting: its arms (with the LR the most of them ran at), seeds and run minutes."""

    group: str
    task: str
    setting: str
    arms: tuple[Key, ...]
    default_lr: float
    learning_rates: tuple[float, ...]
    seeds: tuple[int, ...]
    runs: int
    minutes: float


def what_ran(results: Sequence[RunResult]) -> list[WhatRanRow]:
    """One row per group, task and setting, sorted."""
    by: dict[tuple[str, str, str], list[RunResult]] = defaultdict(list)
    for r in results:
        by[(r.id.group, r.id.task, r.id.setting)].append(r)
    rows = []
    for (group, task, setting), rs in sorted(by.items()):
        arms = sorted({(r.id.arm, r.id.learning_rate) for r in rs})
        lrs = [lr for _, lr in arms]
        default = max(set(lrs), key=lambda v: (lrs.count(v), -v))
        rows.append(
            WhatRanRow(
                group,
                task,
                setting,
                tuple(arms),
                default,
                tuple(sorted(set(lrs))),
                tuple(sorted({r.id.seed for r in rs})),
                len(rs),
                sum(r.wall_seconds for r in rs) / 60,
            )
        )
    return rows


@dataclass(frozen=True)
class TokenShareRow:
    """Means over seeds of one arm's own PO tokens, plain GRPO's and the nonzero rows' on the same pools; medians
    of its run and PO seconds."""

    task: str
    setting: str
    arm: Arm
    learning_rate: float
    own_po_tokens: float
    plain_po_tokens: float
    nonzero_po_tokens: float
    rounds: float
    wall_seconds: float
    po_seconds: float


@dataclass(frozen=True)
class GenerationShare:
    """Shares of the runs' summed wall time: the training rounds' generation, and the evaluations."""

    runs: int
    wall_seconds: float
    generation: float
    evaluation: float


@dataclass(frozen=True)
class TokenShares:
    rows: tuple[TokenShareRow, ...]
    controlled: bool  # every run's PO clock was measured under control
    generation: GenerationShare | None


def generation_share(runs: Sequence[RunResult]) -> GenerationShare | None:
    """Generation's share of the runs' wall time, from the runs that record it; None when none does."""
    timed = [r for r in runs if r.generation_seconds is not None and r.eval_seconds is not None and r.wall_seconds > 0]
    if not timed:
        return None
    wall = sum(r.wall_seconds for r in timed)
    gen = sum(r.generation_seconds or 0.0 for r in timed) / wall
    evaluation = sum(r.eval_seconds or 0.0 for r in timed) / wall
    return GenerationShare(len(timed), wall, gen, evaluation)


def token_shares(results: Sequence[RunResult]) -> TokenShares | None:
    """The runs that record plain GRPO's and the nonzero rows' PO tokens on their own pools; None when none does."""
    by: dict[tuple[str, str, Arm, float], list[RunResult]] = defaultdict(list)
    for r in results:
        last = r.evals[-1]
        if last.po_tokens_plain and last.po_tokens_nonzero is not None and r.id.method != "sft":
            by[(r.id.task, r.id.setting, r.id.arm, r.id.learning_rate)].append(r)
    if not by:
        return None
    rows = tuple(
        TokenShareRow(
            task,
            setting,
            arm,
            lr,
            float(np.mean([r.evals[-1].po_tokens for r in rs])),
            float(np.mean([r.evals[-1].po_tokens_plain for r in rs])),
            float(np.mean([r.evals[-1].po_tokens_nonzero for r in rs])),
            float(np.mean([r.evals[-1].rounds for r in rs])),
            float(np.median([r.wall_seconds for r in rs])),
            float(np.median([r.counters.get("po_seconds", np.nan) for r in rs])),
        )
        for (task, setting, arm, lr), rs in sorted(by.items())
    )
    controlled = all(r.po_seconds_controlled for rs in by.values() for r in rs)
    return TokenShares(rows, controlled, generation_share([r for rs in by.values() for r in rs]))


def fidelity_summary(results: Sequence[RunResult]) -> FidelitySummary:
    """Per 'task/setting' and arm: mean, min, max over training of Pearson(|A|, G), χ² and J(p)/J(uniform)."""
    acc: dict[str, dict[Arm, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in results:
        for d in r.fidelity:
            for key in FIDELITY_KEYS:
                v = getattr(d, key)
                if v is not None:
                    acc[f"{r.id.task}/{r.id.setting}"][r.id.arm][key].append(float(v))
    return {
        s: {
            arm: {
                k: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v)), "n": len(v)}
                for k, v in per.items()
            }
            for arm, per in by_arm.items()
        }
        for s, by_arm in acc.items()
    }


@dataclass(frozen=True)
class AblationRow:
    task: str
    arm: Arm
    stats: ArmStats  # against the task's headline target


@dataclass(frozen=True)
class Ablations:
    """The ablation runs with the headline GRPO and candidate runs of the same seeds (for reference), and a row
    per task and arm of those against the task's headline target."""

    runs: tuple[RunResult, ...]
    rows: tuple[AblationRow, ...]


def ablations(results: Sequence[RunResult], claims: ReportClaims) -> Ablations | None:
    """None when no ablation ran."""
    ablation_runs = [r for r in results if r.id.group == "ablation"]
    if not ablation_runs:
        return None
    seeds = {(a.id.task, a.id.seed) for a in ablation_runs}
    reference = [
        r
        for r in results
        if r.id.group == "headline"
        and r.id.arm in (claims.baseline, claims.candidate)
        and (r.id.task, r.id.seed) in seeds
    ]
    runs = ablation_runs + reference
    targets = {ev.section.task: ev.target for ev in claims.evidences if ev.section.setting == "grpo"}
    by: dict[tuple[str, Arm], list[RunResult]] = defaultdict(list)
    for r in runs:
        if r.id.task in targets and r.id.method != "sft":
            by[(r.id.task, r.id.arm)].append(r)
    rows = []
    for (task, arm), rs in sorted(by.items()):
        upto = float(min(r.evals[-1].po_tokens for r in rs))
        rows.append(AblationRow(task, arm, arm_stats(rs, targets[task], upto, generation_cost=claims.generation_cost)))
    return Ablations(tuple(runs), tuple(rows))


@dataclass(frozen=True)
class RunTables:
    what_ran: tuple[WhatRanRow, ...]
    token_shares: TokenShares | None
    fidelity: FidelitySummary
    ablations: Ablations | None


def compute_run_tables(results: Sequence[RunResult], claims: ReportClaims) -> RunTables:
    return RunTables(
        tuple(what_ran(results)), token_shares(results), fidelity_summary(results), ablations(results, claims)
    )
