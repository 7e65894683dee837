"""Where cost-aware row sampling can act: the cost structure of a task's generated groups.

p* ∝ |A|/√c chooses between the responses of one group only when their costs differ. This module measures,
from the per-prompt logs every run writes (``runs/*.prompts.jsonl``, :class:`costaware.rollouts.logs.PromptRound`),
over the groups with **mixed rewards** (the only groups whose rows carry an advantage):

- the within-group coefficient of variation of row cost (prompt + completion tokens; population std over
  mean), its median and 90th percentile over groups;
- the within-group share of cost variance (law of total variance over the mixed groups' rows): 0 when
  every group's rows cost the same, 1 when every group has the same mean cost;
- the correlation of completion length with reward, pooled over rows and within groups (both centred by
  their group's means, so that prompt size, which moves both, drops out);
- the mean completion length of right and of wrong responses (reward >= ``right_at``), and the mean over
  groups of (wrong − right) mean length within a group.

>>> from costaware.rollouts.logs import PromptRound
>>> recs = [PromptRound(0, 0, (1.0, 0.0), (4, 12), prompt_tokens=4), PromptRound(0, 1, (1.0, 1.0), (3, 3), 2)]
>>> s = cost_structure(recs)
>>> s.mixed_groups, round(s.median_cv, 3), s.mean_length_right, s.mean_length_wrong
(1, 0.333, 4.0, 12.0)
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from costaware._checks import integer, value_error
from costaware._command import OneLineParser, run_command, split_debug
from costaware.rollouts.logs import PromptRound, read_prompt_rounds

__all__ = [
    "CostStructure",
    "cost_structure",
    "cost_structure_of_logs",
    "cost_structure_section",
    "first_rounds",
    "runs_cost_structure_section",
]

# The runs whose logs measure a task's cost structure: their row sampling does not choose rows by cost, and
# they generate every prompt, so the logged groups are the policy's own, unfiltered.
NEUTRAL_METHODS = ("none", "nonzero")


@dataclass(frozen=True)
class CostStructure:
    """Cost statistics over the mixed-reward groups of some logs (NaN where no such group exists)."""

    groups: int  # every logged group
    mixed_groups: int  # groups whose rewards are not all equal
    rows: int  # rows of the mixed groups
    median_cv: float  # median over mixed groups of std(row cost) / mean(row cost)
    p90_cv: float  # its 90th percentile
    within_share: float  # Σ_groups Σ_rows (c − c̄_group)² / Σ_rows (c − c̄)²
    length_reward_corr: float  # Pearson r of completion length and reward over the mixed groups' rows
    within_length_reward_corr: float  # the same after centring both by their group's means
    mean_length_right: float  # mean completion tokens of the right rows (reward >= right_at)
    mean_length_wrong: float  # ... of the wrong rows
    mean_within_gap: float  # mean over mixed groups of (wrong − right) mean completion tokens

    @property
    def wrong_longer(self) -> bool:
        return bool(self.mean_length_wrong > self.mean_length_right)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    sx, sy = float(np.std(x)), float(np.std(y))
    if x.size < 2 or sx == 0.0 or sy == 0.0:
        return math.nan
    return float(np.mean((x - x.mean()) * (y - y.mean())) / (sx * sy))


def cost_structure(records: Sequence[PromptRound], *, right_at: float = 0.5) -> CostStructure:
    """The statistics of :class:`CostStructure` over ``records`` (one per generated group)."""
    if not math.isfinite(right_at):
        raise ValueError(f"right_at must be a finite reward, got {right_at!r}")
    costs, lengths, rewards, cvs, gaps, group_of = [], [], [], [], [], []
    groups = 0
    for rec in records:
        if not isinstance(rec, PromptRound):
            raise TypeError(f"records must hold PromptRound, got {type(rec).__name__}")
        groups += 1
        r = np.asarray(rec.rewards, dtype=np.float64)
        if r.min() == r.max():
            continue
        n = np.asarray(rec.completion_lengths, dtype=np.float64)
        c = n + rec.prompt_tokens
        cvs.append(float(c.std() / c.mean()) if c.mean() > 0 else 0.0)
        right = r >= right_at
        if right.any() and (~right).any():
            gaps.append(float(n[~right].mean() - n[right].mean()))
        group_of.append(np.full(r.size, len(cvs) - 1))
        costs.append(c)
        lengths.append(n)
        rewards.append(r)
    nan = math.nan
    if not cvs:
        return CostStructure(groups, 0, 0, nan, nan, nan, nan, nan, nan, nan, nan)
    c, n, r, g = (np.concatenate(a) for a in (costs, lengths, rewards, group_of))
    sizes = np.bincount(g)

    def centred(x: np.ndarray) -> np.ndarray:
        return x - (np.bincount(g, weights=x) / sizes)[g]

    total = float(((c - c.mean()) ** 2).sum())
    right = r >= right_at
    return CostStructure(
        groups=groups, mixed_groups=len(cvs), rows=int(c.size),
        median_cv=float(np.median(cvs)), p90_cv=float(np.quantile(cvs, 0.9)),
        within_share=float((centred(c) ** 2).sum() / total) if total > 0 else nan,
        length_reward_corr=_pearson(n, r), within_length_reward_corr=_pearson(centred(n), centred(r)),
        mean_length_right=float(n[right].mean()) if right.any() else nan,
        mean_length_wrong=float(n[~right].mean()) if (~right).any() else nan,
        mean_within_gap=float(np.mean(gaps)) if gaps else nan,
    )  # fmt: skip


def first_rounds(records: Sequence[PromptRound], n: int) -> list[PromptRound]:
    """The records of the first ``n`` distinct rounds (the policy's rollouts before ``n`` updates, in one log)."""
    if integer(n, "n", strict=True) < 1:
        raise value_error("n", n, "must be an integer >= 1")
    keep = set(sorted({r.round for r in records})[:n])
    return [r for r in records if r.round in keep]


def cost_structure_of_logs(
    paths: Sequence[str | os.PathLike[str]], *, right_at: float = 0.5, rounds: int | None = None
) -> CostStructure:
    """:func:`cost_structure` over the records of the per-prompt logs ``paths`` (``rounds``: only each log's
    first that many rounds, e.g. 1 for the starting policy's rollouts)."""
    return cost_structure(_records_of_logs(paths, rounds), right_at=right_at)


def _records_of_logs(
    paths: Sequence[str | os.PathLike[str]], rounds: int | None, *, empty_ok: bool = True
) -> list[PromptRound]:
    """Every log's records (``rounds``: its first that many rounds); ``empty_ok=False``: a log without one is a
    ValueError."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ValueError("paths must name at least one per-prompt log (runs/*.prompts.jsonl), got none")
    if rounds is not None:  # before any file is read
        integer(rounds, "rounds", minimum=1, strict=True, why=" or None")
    records: list[PromptRound] = []
    for p in paths:
        recs = read_prompt_rounds([p])
        if not recs and not empty_ok:
            raise ValueError(f"{os.fspath(p)!r} holds no rounds: no per-prompt record (a JSON line per group)")
        records += recs if rounds is None else first_rounds(recs, rounds)
    return records


def _f(x: float, fmt: str) -> str:
    return "n/a" if not math.isfinite(x) else format(x, fmt)


def cost_structure_section(
    logs: Mapping[str, Sequence[str | os.PathLike[str]]], *, right_at: float = 0.5
) -> tuple[list[str], dict[str, CostStructure]]:
    """A Markdown section (lines) with one table row per task, and the records it was drawn from.

    ``logs`` maps a task label to its runs' per-prompt logs (e.g. the GRPO and ``nonzero`` headline runs',
    whose sampling does not choose rows by cost).
    """
    if not isinstance(logs, Mapping):
        raise TypeError(f"logs must map a task label to its per-prompt logs, got {type(logs).__name__}")
    stats = {task: cost_structure_of_logs(paths, right_at=right_at) for task, paths in logs.items()}
    lines = [
        "## Cost structure: can p* choose between a group's responses?",
        "",
        "Over the groups with mixed rewards (the ones with an advantage): the within-group CV of row cost (prompt "
        "+ completion tokens), the share of cost variance within groups, the correlation of completion length "
        "with reward (pooled, and within groups), and the mean completion length of right and wrong responses. "
        "p* ∝ |A|/√c can choose between a group's responses only where the CV is well above 0.",
        "",
        "| task | mixed groups | CV median | CV 90th pct | within share | r(len, reward) | within r | "
        "len right | len wrong |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, s in stats.items():
        lines.append(f"| {task} | {s.mixed_groups} | {_f(s.median_cv, '.2f')} | {_f(s.p90_cv, '.2f')} | "
                     f"{_f(s.within_share, '.1%')} | {_f(s.length_reward_corr, '+.2f')} | "
                     f"{_f(s.within_length_reward_corr, '+.2f')} | {_f(s.mean_length_right, '.1f')} | "
                     f"{_f(s.mean_length_wrong, '.1f')} |")  # fmt: skip
    lines.append("")
    return lines, stats


def runs_cost_structure_section(results: Sequence[Any], logs: Mapping[Any, os.PathLike[str] | str] | None) -> list[str]:
    """The report's section (a ``report.markdown_report.TASK_SECTIONS`` entry): :func:`cost_structure_section` over the
    per-prompt logs of each task's GRPO and ``nonzero`` runs (GRPO setting, every prompt generated); no
    lines when no such run left a log."""
    if not logs:
        return []
    by_task: dict[str, list[str | os.PathLike[str]]] = {}
    for r in results:
        rid = r.id
        if rid.method in NEUTRAL_METHODS and rid.rollout == "all" and rid.setting == "grpo" and rid in logs:
            if os.path.exists(logs[rid]):
                by_task.setdefault(rid.task, []).append(logs[rid])
    if not by_task:
        return []
    lines, _ = cost_structure_section({task: sorted(map(str, paths)) for task, paths in sorted(by_task.items())})
    return lines


PROG = "python -m costaware.report.cost_structure"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costaware.report.cost_structure [--rounds N] LOG...``: print the statistics of the logs.

    A bad option, a log that is missing, a folder, holds a malformed line or no round at all: one line on
    stderr, exit status 2 (``--debug``: the traceback).
    """
    argv, debug = split_debug(argv)
    ap = OneLineParser(prog=PROG, description=main.__doc__)
    ap.add_argument("logs", nargs="+", help="per-prompt logs (runs/*.prompts.jsonl)")
    ap.add_argument("--rounds", type=int, default=None, help="only each log's first N rounds (1: the starting policy)")
    args = ap.parse_args(argv)

    def run() -> None:
        if args.rounds is not None:
            integer(args.rounds, "--rounds", minimum=1)
        s = cost_structure(_records_of_logs(args.logs, args.rounds, empty_ok=False))
        for name, value in vars(s).items():
            print(f"{name:>26}: {value:.4g}" if isinstance(value, float) else f"{name:>26}: {value}")

    return run_command(PROG, run, debug=debug)


if __name__ == "__main__":
    sys.exit(main())
