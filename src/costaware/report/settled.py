"""The settled comparisons: each method against its strongest controls, per task, at each price of generation.

For every task of a job's headline, each claim (B beats A) is measured on the total-cost axis at the prices
:data:`~costaware.report.sweeps.PRICES` by two estimators over the same paired bootstrap of seeds:

- ``crossing``: the report's own, 1 − x_B/x_A where the seed-mean curves first reach the common target
  (``target_fraction`` × the lowest seed-mean peak among the arms compared);
- ``band``: :func:`~costaware.report.curves.band_saving`, the geometric mean of x_B/x_A over nine accuracy
  levels spanning the last quarter of the rise to that target, so that every evaluation near the target counts.

Both are computed for every claim and recorded; the verdict uses ``band``, fixed before any run of the
profile that this module was written for. :func:`time_shares` says where the runs' wall time went, and
:func:`pairing` how strongly a seed's common random numbers couple two arms.

    python -m costaware.report.settled RUNS_DIR [--json OUT.json] [--quote-in README.md ...] [--seeds 0 1 ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from costaware.experiments.records import RunResult
from costaware.report.curves import Estimate, band_levels, band_saving, first_crossing, saving, seed_curves
from costaware.report.sweeps import PRICES
from costaware.report.verdicts import verdict

__all__ = ["CLAIMS", "ComparedTask", "Row", "compared_tasks", "settled_rows", "time_shares", "pairing", "main"]

# (claim, control A, method B) by arm key: B beats A. The controls: GRPO, GRPO without the zero-advantage
# rows (nonzero: the same expected step as centred p*) and PODS (a peer that also feeds fewer rows).
CLAIMS: tuple[tuple[str, str, str], ...] = (
    ("nonzero beats GRPO", "none", "nonzero"),
    ("p* beats GRPO", "none", "p_star"),
    ("p* beats nonzero", "nonzero", "p_star"),
    ("p*_smooth beats nonzero", "nonzero", "p_smooth"),
    ("p* beats PODS", "pods", "p_star"),
    ("PODS beats GRPO", "none", "pods"),
    ("PODS beats nonzero", "nonzero", "pods"),  # the choice of method compares every pair of candidates
)
ESTIMATORS = ("band", "crossing")
VERDICT_ESTIMATOR = "band"


@dataclass(frozen=True)
class Row:
    """One claim on one task at one price by one estimator."""

    task: str
    claim: str
    control: str
    method: str
    generation_cost: float
    estimator: str
    estimate: Estimate
    target: float

    @property
    def half_width(self) -> float:
        return (self.estimate.hi - self.estimate.lo) / 2 if self.estimate.has_interval else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "claim": self.claim,
            "control": self.control,
            "method": self.method,
            "generation_cost": self.generation_cost,
            "estimator": self.estimator,
            **self.estimate.as_dict(),
            "half_width": None if math.isnan(self.half_width) else self.half_width,
            "verdict": verdict(self.estimate).value,
            "target": self.target,
        }


def headline_arms(results: Sequence[RunResult]) -> dict[str, dict[str, list[RunResult]]]:
    """The headline runs at the profile's learning rate, by task and arm key, each arm's runs by seed."""
    by: dict[str, dict[str, list[RunResult]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.id.group == "headline":
            by[r.id.task][r.id.arm.key].append(r)
    return {t: {k: sorted(v, key=lambda r: r.id.seed) for k, v in arms.items()} for t, arms in sorted(by.items())}


def _common_seeds(arms: dict[str, list[RunResult]], keys: Sequence[str]) -> dict[str, list[RunResult]]:
    """Each arm's runs at the seeds every arm of ``keys`` ran (a paired comparison needs the same seeds)."""
    seeds = set.intersection(*({r.id.seed for r in arms[k]} for k in keys))
    return {k: [r for r in arms[k] if r.id.seed in seeds] for k in keys}


@dataclass(frozen=True)
class ComparedTask:
    """One task's arms at the seeds all of them ran, and the common target and band levels they are compared at."""

    task: str
    arms: dict[str, list[RunResult]]
    target: float
    levels: np.ndarray


def compared_tasks(results: Sequence[RunResult], target_fraction: float = 0.95) -> list[ComparedTask]:
    """Each task whose headline ran at least two arms of :data:`CLAIMS` and rose above its start: its arms at
    their common seeds, the target (``target_fraction`` × the lowest seed-mean peak) and the band's levels."""
    out = []
    for task, all_arms in headline_arms(results).items():
        keys = [k for k in dict.fromkeys(k for _, a, b in CLAIMS for k in (a, b)) if k in all_arms]
        if len(keys) < 2:
            continue
        arms = _common_seeds(all_arms, keys)
        peaks = [float(seed_curves(arms[k], "po_tokens").mean.max()) for k in keys]
        start = max(float(seed_curves(arms[k], "po_tokens").mean[0]) for k in keys)
        target = target_fraction * min(peaks)
        if target > start:  # else no method rose: nothing to compare
            out.append(ComparedTask(task, arms, target, band_levels(target, start)))
    return out


def settled_rows(
    results: Sequence[RunResult],
    *,
    prices: Sequence[float] = PRICES,
    target_fraction: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[Row]:
    """Every claim of :data:`CLAIMS` whose arms ran, per task, price and estimator (paired seeds only)."""
    rows: list[Row] = []
    for t in compared_tasks(results, target_fraction):
        for g in prices:
            curves = {k: seed_curves(v, "total_cost", generation_cost=g) for k, v in t.arms.items()}
            for claim, a, b in CLAIMS:
                if a not in curves or b not in curves:
                    continue
                est = {
                    "band": band_saving(curves[a], curves[b], t.levels, n_boot=n_boot, seed=seed),
                    "crossing": saving(curves[a], curves[b], t.target, n_boot=n_boot, seed=seed),
                }
                rows += [Row(t.task, claim, a, b, float(g), e, est[e], t.target) for e in ESTIMATORS]
    return rows


def time_shares(results: Sequence[RunResult]) -> dict[str, float]:
    """Where the runs' wall time went: generation in training rounds, evaluation, and the rest (PO and the
    trainer's own work), as shares of the summed wall time of the runs that recorded them."""
    timed = [r for r in results if r.generation_seconds is not None and r.eval_seconds is not None]
    wall = sum(r.wall_seconds for r in timed)
    if not timed or wall <= 0:
        return {}
    gen = sum(r.generation_seconds or 0.0 for r in timed) / wall
    ev = sum(r.eval_seconds or 0.0 for r in timed) / wall
    return {"runs": float(len(timed)), "wall_seconds": wall, "generation": gen, "evaluation": ev,
            "rest": 1.0 - gen - ev}  # fmt: skip


def pairing(results: Sequence[RunResult], target_fraction: float = 0.95) -> list[dict[str, Any]]:
    """Spearman correlation across seeds of two arms' PO tokens to the target (each seed's own curve): how much
    a seed's shared prompts and rollout draws couple the arms, which is what pairing the bootstrap gains."""
    from scipy.stats import spearmanr

    out = []
    for task, all_arms in headline_arms(results).items():
        for claim, a, b in CLAIMS:
            if a not in all_arms or b not in all_arms:
                continue
            arms = _common_seeds(all_arms, [a, b])
            if len(arms[a]) < 3:
                continue
            target = target_fraction * min(float(seed_curves(arms[k], "po_tokens").mean.max()) for k in (a, b))

            xa, xb = (np.array([_reach(r, target) for r in arms[k]]) for k in (a, b))
            ok = np.isfinite(xa) & np.isfinite(xb)
            rho = float(spearmanr(xa[ok], xb[ok]).statistic) if ok.sum() >= 3 else math.nan
            out.append({"task": task, "claim": claim, "seeds": int(ok.sum()), "spearman": rho})
    return out


def row_level_ratio(log: Path) -> float:
    """J(p*)/J(uniform on the non-zero rows) over one run's per-prompt log (``.prompts.jsonl``, or the archive's
    ``.prompts.jsonl.gz``): the paper's J with |A| as the gradient-norm bound, over the run's own pools."""
    import gzip
    import tempfile

    from costaware.rollouts.analysis import row_level
    from costaware.rollouts.logs import read_prompt_rounds

    with tempfile.TemporaryDirectory() as tmp:
        plain = log
        if log.suffix == ".gz":
            plain = Path(tmp) / log.stem
            plain.write_bytes(gzip.decompress(log.read_bytes()))
        with np.errstate(divide="ignore", invalid="ignore"):  # rounds without signal are NaN, and skipped
            return float(row_level(read_prompt_rounds([plain])).overall)


def predicted_row_level(folder: Path) -> dict[str, dict[str, float]]:
    """J's prediction of p* against nonzero per task, from the nonzero runs' per-prompt logs in ``folder``
    (``.prompts.jsonl`` or the archive's ``.prompts.jsonl.gz``): :func:`row_level_ratio` per run,
    its median, min and max, and the saving it predicts in PO tokens to a given variance, 1 − median."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for path in sorted(folder.glob("*.prompts.jsonl*")):
        record = load_run(path.with_name(path.name.replace(".prompts.jsonl", ".json")))
        if record is None or record.id.group != "headline" or record.id.arm.key != "nonzero":
            continue
        ratios[record.id.task].append(row_level_ratio(path))
    return {
        task: {
            "runs": float(len(v)),
            "median": float(np.median(v)),
            "min": float(min(v)),
            "max": float(max(v)),
            "predicted_saving": 1.0 - float(np.median(v)),
        }  # fmt: skip
        for task, v in sorted(ratios.items())
    }


def load_run(path: Path) -> RunResult | None:
    """The run record at ``path`` (``.json``, or ``.json.gz`` as an archive holds it); None when absent."""
    import gzip

    if path.exists():
        data = path.read_bytes()
        return RunResult.from_json(json.loads(gzip.decompress(data) if path.suffix == ".gz" else data))
    return None


def _reach(run: RunResult, target: float) -> float:
    """PO tokens at which one run's own curve first reaches ``target`` (inf: never)."""
    return first_crossing([e.po_tokens for e in run.evals], [e.heldout_accuracy for e in run.evals], target)


def markdown(rows: Sequence[Row], estimator: str = VERDICT_ESTIMATOR) -> str:
    """One table per task: each claim's saving [95% CI] and verdict at each price, by ``estimator``, and the
    method to use at each price (:mod:`costaware.report.method_choice`)."""
    from costaware.report.method_choice import choices, task_sentence
    from costaware.report.verdicts import fmt

    lines: list[str] = []
    by_task: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.estimator == estimator:
            by_task[r.task].append(r)
    for task, trows in by_task.items():
        prices = sorted({r.generation_cost for r in trows})
        seeds = trows[0].estimate.seeds
        lines += [
            f"**{task}** ({seeds} seed{'s' if seeds != 1 else ''}, target {trows[0].target:.3f}, "
            f"estimator {estimator})",
            "",
        ]
        lines += ["| claim | " + " | ".join(f"g = {g:.3g}" for g in prices) + " |", "|---" * (len(prices) + 1) + "|"]
        for claim in dict.fromkeys(r.claim for r in trows):
            cells = {r.generation_cost: r for r in trows if r.claim == claim}
            lines.append(f"| {claim} | " + " | ".join(
                f"{fmt(cells[g].estimate)}, {verdict(cells[g].estimate).value}" for g in prices) + " |")  # fmt: skip
        lines += ["", task_sentence(task, choices(trows, estimator)), ""]
    return "\n".join(lines)


def summary(results: Sequence[RunResult], folder: Path | None = None, **kw: Any) -> dict[str, Any]:
    """What the repository records of a job: every row, the pairing, the time shares and, from the per-prompt
    logs in ``folder`` when given, J's prediction of p* against nonzero (JSON-ready)."""
    rows = settled_rows(results, **kw)
    return {
        "verdict_estimator": VERDICT_ESTIMATOR,
        "rows": [r.as_dict() for r in rows],
        "pairing": pairing(results),
        "time_shares": time_shares(results),
        "runs": len(results),
        "predicted": predicted_row_level(folder) if folder is not None else {},
        "seeds": {
            t: {k: [r.id.seed for r in v] for k, v in arms.items()} for t, arms in headline_arms(results).items()
        },
    }


BLOCK_START, BLOCK_END = "<!-- settled:start -->", "<!-- settled:end -->"


def quoted_block(record: dict[str, Any]) -> str:
    """What a page quotes of a recorded summary, between :data:`BLOCK_START` and :data:`BLOCK_END`: the tables
    of :func:`markdown` by the verdict estimator, the seeds behind them, and where the runs' time went."""
    rows = [_row(d) for d in record["rows"]]
    return (markdown(rows, record["verdict_estimator"]).strip() + "\n\n" + _time_line(record["time_shares"])).strip()


def _time_line(shares: dict[str, float]) -> str:
    """Where the recorded runs' time went, in one line ('' when the record has no timings)."""
    if not shares:
        return ""
    parts = ", ".join(f"{k} {round(100 * shares[k])}%" for k in ("generation", "evaluation", "rest"))
    return (
        f"Run time: {int(shares['runs'])} runs, {shares['wall_seconds'] / 3600:.1f} h summed over the runs ({parts}: "
        "PO steps, log-prob passes and diagnostics)."
    )


def replace_block(text: str, block: str, start: str = BLOCK_START, end: str = BLOCK_END) -> str:
    """``text`` with its quoted block (between ``start`` and ``end``) replaced by ``block`` (ValueError when it
    has none)."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"the page has no {start} ... {end} block")
    return text[: i + len(start)] + "\n" + block + "\n" + text[j:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m costaware.report.settled", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", help="a folder of run records (<out>/runs) or of their .json.gz archive")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--quote-in", nargs="*", default=(), help="pages whose settled block is rewritten from the summary")
    p.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="only the runs of these seeds (a perturbed job's seeds, to compare like with like)",
    )
    args = p.parse_args(argv)
    folder = Path(args.runs)
    if not folder.is_dir():
        print(f"settled: runs must be a folder of run records, got {str(folder)!r}", file=sys.stderr)
        return 2
    results = load_runs(folder)
    if args.seeds is not None:
        results = [r for r in results if r.id.seed in set(args.seeds)]
    if not results:
        seeds = "" if args.seeds is None else f" at seeds {args.seeds}"
        print(f"settled: no run record in {str(folder)!r}{seeds}", file=sys.stderr)
        return 2
    out = summary(results, folder)
    print("J predicts p* against nonzero:", json.dumps(out["predicted"]))
    print(markdown([_row(d) for d in out["rows"]]))
    print("pairing:", json.dumps(out["pairing"]))
    print("time shares:", json.dumps(out["time_shares"]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for page in map(Path, args.quote_in):
        page.write_text(replace_block(page.read_text(), quoted_block(json.loads(json.dumps(out)))))
    return 0


def load_runs(folder: Path) -> list[RunResult]:
    """Every run record in ``folder``: ``*.json`` files, or the ``*.json.gz`` an ``--archive`` holds."""
    paths = sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")])
    return [r for p in paths if (r := load_run(p)) is not None]


def estimate_of(d: dict[str, Any]) -> Estimate:
    """A recorded row's estimate (``Row.as_dict`` writes a missing interval as None)."""
    lo, hi = (math.nan if d[k] is None else d[k] for k in ("lo", "hi"))
    return Estimate(d["value"], lo, hi, d.get("undefined", 0.0), d.get("seeds"))


def _row(d: dict[str, Any]) -> Row:
    est = estimate_of(d)
    return Row(d["task"], d["claim"], d["control"], d["method"], d["generation_cost"], d["estimator"], est, d["target"])


if __name__ == "__main__":
    raise SystemExit(main())
