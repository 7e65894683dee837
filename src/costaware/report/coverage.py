"""How often a job with fewer seeds has a 95% CI that holds the settled record's estimate.

A job of n seeds is drawn from the record's seeds (without replacement, the same seeds for every arm, so the
pairing holds), its saving and paired-bootstrap CI are computed as the record computes them (the band
estimator, at the record's target and levels), and the draw counts as covered when that CI holds the
estimate of every seed. Repeated ``draws`` times per n, this measures what a user's n-seed run can say: how
often its CI holds the record's value, and how wide it is; once for the plain percentile interval the report
uses, once for the expanded percentile interval (:func:`~costaware.report.curves.expanded_level`).

The record's value is itself an estimate, and the draws come from its own seeds, so the coverage here is
somewhat higher than coverage of the true saving would be.

    python -m costaware.report.coverage RUNS_DIR [--json OUT.json] [--quote-in docs/evidence.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from costaware.experiments.records import RunResult
from costaware.report.curves import SeedCurves, band_saving, expanded_level, seed_curves
from costaware.report.settled import compared_tasks, load_runs, replace_block
from costaware.report.sweeps import price_name

__all__ = ["COVERAGE_CLAIMS", "CoverageRow", "coverage_rows", "markdown", "main"]

# (claim, control, method): the main job's three headline comparisons
COVERAGE_CLAIMS: tuple[tuple[str, str, str], ...] = (
    ("nonzero beats GRPO", "none", "nonzero"),
    ("p* beats GRPO", "none", "p_star"),
    ("p* beats nonzero", "nonzero", "p_star"),
)
BLOCK_START, BLOCK_END = "<!-- coverage:start -->", "<!-- coverage:end -->"
_ROUNDING = 1e-12  # a mean over fewer seeds of equal curves differs from the record's in the last bits


@dataclass(frozen=True)
class CoverageRow:
    """One claim on one task at one price: how often ``draws`` jobs of ``seeds`` seeds covered ``full``."""

    task: str
    claim: str
    generation_cost: float
    seeds: int
    draws: int
    full: float  # the record's estimate, every seed
    coverage: float  # the share of drawn jobs whose 95% CI holds it
    median_half_width: float
    coverage_expanded: float  # the same with the expanded percentile interval (curves.expanded_level)
    median_half_width_expanded: float


def _subset(c: SeedCurves, idx: np.ndarray) -> SeedCurves:
    return SeedCurves(c.grid, c.ys[idx], tuple(c.seeds[i] for i in idx))


def coverage_rows(
    results: Sequence[RunResult],
    *,
    sizes: Sequence[int] = (5, 10),
    draws: int = 300,
    prices: Sequence[float] = (1 / 3,),
    n_boot: int = 2000,  # the expanded interval of 5 seeds reads the 0.1% tails: about 2 resamples each
    seed: int = 0,
) -> list[CoverageRow]:
    """Each claim of :data:`COVERAGE_CLAIMS` on each task, price and job size in ``sizes`` (each at most the
    record's seeds)."""
    rows = []
    for t in compared_tasks(results):
        for g in prices:
            curves = {k: seed_curves(v, "total_cost", generation_cost=g) for k, v in t.arms.items()}
            for claim, a, b in COVERAGE_CLAIMS:
                if a not in curves or b not in curves:
                    continue
                ca, cb = curves[a], curves[b]
                full = band_saving(ca, cb, t.levels, n_boot=1, seed=seed).value
                rng = np.random.default_rng(seed)
                for n in sizes:
                    if not 2 <= n <= len(ca.seeds):
                        raise ValueError(f"sizes must lie in 2..{len(ca.seeds)} (the record's seeds), got {n}")
                    held: dict[float, list[bool]] = {0.95: [], expanded_level(n): []}
                    half: dict[float, list[float]] = {k: [] for k in held}
                    for d in range(draws):
                        idx = np.sort(rng.choice(len(ca.seeds), n, replace=False))
                        for level in held:  # the same resamples (seed) read at both levels
                            e = band_saving(_subset(ca, idx), _subset(cb, idx), t.levels, n_boot=n_boot,
                                            seed=seed + d, level=level)  # fmt: skip
                            held[level].append(bool(e.lo - _ROUNDING <= full <= e.hi + _ROUNDING))
                            half[level].append((e.hi - e.lo) / 2)
                    (plain, wide) = held
                    rows.append(
                        CoverageRow(t.task, claim, float(g), n, draws, full, float(np.mean(held[plain])),
                                    float(np.median(half[plain])), float(np.mean(held[wide])),
                                    float(np.median(half[wide])))
                    )  # fmt: skip
    return rows


def markdown(rows: Sequence[CoverageRow]) -> str:
    """One table: each claim's record value, and per job size how often its 95% CI held it and how wide it was."""
    sizes = sorted({r.seeds for r in rows})
    head = "| task | claim | g | record | " + " | ".join(
        f"{n} seeds: covered, half-width | {n} seeds, expanded: covered, half-width" for n in sizes) + " |"  # fmt: skip
    lines = [head, "|---" * (4 + 2 * len(sizes)) + "|"]
    for key in dict.fromkeys((r.task, r.claim, r.generation_cost) for r in rows):
        cells = {r.seeds: r for r in rows if (r.task, r.claim, r.generation_cost) == key}
        first = next(iter(cells.values()))
        lines.append(
            f"| {key[0]} | {key[1]} | {price_name(key[2])} | {100 * first.full:+.0f}% | "
            + " | ".join(
                f"{100 * cells[n].coverage:.0f}%, {100 * cells[n].median_half_width:.0f} pts | "
                f"{100 * cells[n].coverage_expanded:.0f}%, {100 * cells[n].median_half_width_expanded:.0f} pts"
                for n in sizes
            )  # fmt: skip
            + " |"
        )
    draws = rows[0].draws if rows else 0
    return "\n".join(lines) + (
        f"\n\n{draws} drawn jobs per size; a 95% CI should hold the record's value in about 95%. 'expanded': the "
        "same resamples read at the expanded percentile level (`report.curves.expanded_level`)."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m costaware.report.coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", help="a folder of run records (<out>/runs) or of their .json.gz archive")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--quote-in", nargs="*", default=(), help="pages whose coverage block is rewritten from the rows")
    p.add_argument("--sizes", nargs="+", type=int, default=[5, 10], help="job sizes, in seeds")
    p.add_argument("--draws", type=int, default=300, help="jobs drawn per size")
    args = p.parse_args(argv)
    folder = Path(args.runs)
    if not folder.is_dir():
        print(f"coverage: runs must be a folder of run records, got {str(folder)!r}", file=sys.stderr)
        return 2
    try:
        rows = coverage_rows(load_runs(folder), sizes=args.sizes, draws=args.draws)
    except ValueError as e:
        print(f"coverage: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"coverage: no comparison in {str(folder)!r}", file=sys.stderr)
        return 2
    text = markdown(rows)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    for page in map(Path, args.quote_in):
        page.write_text(replace_block(page.read_text(), text, BLOCK_START, BLOCK_END))
    return 0


def quoted_block(recorded: list[dict[str, Any]]) -> str:
    """What a page quotes of a recorded coverage file (the rows :func:`main` writes with ``--json``)."""
    return markdown([CoverageRow(**d) for d in recorded])


if __name__ == "__main__":
    raise SystemExit(main())
