"""The gap between J and practice: for each ablation, J's predicted saving of p* over `nonzero` beside the
measured one, and how much of the reference's gap the ablation closes.

Each ablation (:data:`ABLATIONS`) is one arm pair, `nonzero` → p*, read from one profile's runs (the ``gap``
profiles of ``costaware reproduce``). For each, at the seeds where every run it needs finished:

- **predicted**: 1 − (closed-form step error × PO tokens per step of p*) / (the same of `nonzero`), from the
  runs' own step errors (``report.step_errors``): J's cost to equal variance, with the pool as the dataset;
- **step error, measured**: the same ratio from the measured step errors ‖ĝ_s − ḡ‖²;
- **measured**: the saving in PO tokens to the common target, by the band estimator of the settled record
  (``report.curves.band_saving``, paired bootstrap over seeds): what the training curves show;
- **gap**: predicted − measured, and against the reference (the main job's setting at the same seeds), the
  points of the reference's gap the ablation closes, with a paired bootstrap CI of the difference of the two
  measured savings (the seeds pair both).

An ablation that tunes the LR puts each arm at the LR of its highest peak seed-mean validation accuracy
(``report.tuned.pick_lr``; the held-out set never enters), at the seeds every LR of both arms ran.

    python -m costaware.report.gap EVIDENCE_DIR [--json OUT.json] [--quote-in docs/design.md]

EVIDENCE_DIR holds one folder per profile (``gap/runs``, ``gap-sgd/runs``, ...), as ``--archive`` writes them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from costaware.experiments.arms import Arm
from costaware.experiments.records import RunId, RunResult
from costaware.report.curves import (
    Estimate,
    SeedCurves,
    band_levels,
    band_saving,
    band_saving_samples,
    percentile_ci,
    seed_curves,
)
from costaware.report.labels import label
from costaware.report.md import escape
from costaware.report.step_errors import arm_step_errors
from costaware.report.tuned import pick_lr
from costaware.report.verdicts import fmt, verdict

__all__ = ["ABLATIONS", "Ablation", "GapRow", "gap_rows", "markdown", "summary", "main"]


@dataclass(frozen=True)
class Ablation:
    """One arm pair of the gap table: `nonzero` against ``p_star``, read from ``profile``'s runs."""

    key: str
    label: str
    profile: str
    p_star: Arm = Arm("p_star")
    tuned: bool = False  # each arm at its validation-chosen LR (else the profile's LR, x1)


REFERENCE = "reference"
ABLATIONS: tuple[Ablation, ...] = (
    Ablation(REFERENCE, "reference: the main job's setting (AdamW at GRPO's LR)", "gap"),
    Ablation("sgd", "(a) SGD, LR tuned per arm", "gap-sgd", tuned=True),
    Ablation("adamw-tuned", "(b) AdamW, LR tuned per arm", "gap", tuned=True),
    Ablation("pool4x", "(c) a pool 4x larger per round", "gap-pool4x"),
    Ablation("oracle", "(d) the oracle proxy: each row's gradient norm", "gap", p_star=Arm("p_star", proxy="oracle")),
)
if len({a.key for a in ABLATIONS}) != len(ABLATIONS):
    raise ValueError("ABLATIONS has a duplicate key")

NONZERO = Arm("nonzero")


@dataclass(frozen=True)
class GapRow:
    """One ablation's predicted and measured saving of p* over `nonzero` (fractions; None where not measured)."""

    ablation: Ablation
    seeds: tuple[int, ...]
    nonzero_lr: float
    p_star_lr: float
    predicted_abs: float | None  # the paper's J with |A| as the bound, from nonzero's pools (None: no logs)
    predicted: float | None
    step_error_measured: float | None
    measured: Estimate
    target: float
    against_reference: Estimate | None  # measured saving of this pair minus the reference's (None: the reference)
    validation: dict[str, dict[float, float]] = field(default_factory=dict)  # tuned: arm key → LR → peak accuracy

    @property
    def gap(self) -> float:
        return math.nan if self.predicted is None else self.predicted - self.measured.value

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.ablation.key,
            "label": self.ablation.label,
            "profile": self.ablation.profile,
            "p_star": self.ablation.p_star.key,
            "seeds": list(self.seeds),
            "nonzero_lr": self.nonzero_lr,
            "p_star_lr": self.p_star_lr,
            "predicted_abs": self.predicted_abs,
            "predicted": self.predicted,
            "step_error_measured": self.step_error_measured,
            "measured": self.measured.as_dict(),
            "verdict": verdict(self.measured).value,
            "target": self.target,
            "gap": None if math.isnan(self.gap) else self.gap,
            "against_reference": None if self.against_reference is None else self.against_reference.as_dict(),
            "validation": {k: {f"{lr:g}": v for lr, v in d.items()} for k, d in self.validation.items()},
        }


def _by_arm_lr(results: Sequence[RunResult]) -> dict[tuple[Arm, float], dict[int, RunResult]]:
    """The headline and LR-sweep runs of ``results``, by (arm, LR) and seed."""
    by: dict[tuple[Arm, float], dict[int, RunResult]] = defaultdict(dict)
    for r in results:
        if r.id.group in ("headline", "lr_sweep"):
            by[(r.id.arm, r.id.learning_rate)][r.id.seed] = r
    return by


@dataclass(frozen=True)
class _Pair:
    seeds: tuple[int, ...]
    nonzero: list[RunResult]
    p_star: list[RunResult]
    validation: dict[str, dict[float, float]] = field(default_factory=dict)  # tuned: arm key → LR → peak


def _pair(ab: Ablation, results: Sequence[RunResult]) -> _Pair | None:
    """The ablation's two arms at their LRs and their common seeds (None: an arm has no finished run)."""
    by = _by_arm_lr(results)
    lrs = {arm: sorted(lr for a, lr in by if a == arm) for arm in (NONZERO, ab.p_star)}
    if not all(lrs.values()):
        return None
    headline = {r.id.learning_rate for r in results if r.id.group == "headline"}
    used = {arm: v if ab.tuned else [lr for lr in v if lr in headline] for arm, v in lrs.items()}
    if not all(used.values()) or (ab.tuned and min(map(len, used.values())) < 2):
        return None  # a tuned pair needs each arm's sweep
    seeds = sorted(set.intersection(*(set(by[(arm, lr)]) for arm, v in used.items() for lr in v)))
    if len(seeds) < 2:
        return None
    chosen, validation = {}, {}
    for arm, v in used.items():
        if ab.tuned:  # each arm's LR on the validation split, at the seeds every LR of both arms ran
            val = {lr: float(seed_curves([by[(arm, lr)][s] for s in seeds], "po_tokens", metric="validation")
                             .mean.max()) for lr in v}  # fmt: skip
            chosen[arm], validation[arm.key] = pick_lr(val), val
        else:
            chosen[arm] = v[0]
    return _Pair(
        tuple(seeds),
        [by[(NONZERO, chosen[NONZERO])][s] for s in seeds],
        [by[(ab.p_star, chosen[ab.p_star])][s] for s in seeds],
        validation,
    )


def _step_error_savings(pair: _Pair) -> tuple[float | None, float | None]:
    """1 − p*'s cost to equal variance over `nonzero`'s, in closed form and measured (None: not recorded)."""
    rows = {a.arm: a for a in arm_step_errors([*pair.nonzero, *pair.p_star])}
    nz, ps = rows.get(NONZERO), rows.get(pair.p_star[0].id.arm)
    if nz is None or ps is None:
        return None, None
    pred = None
    if nz.cost_predicted and ps.cost_predicted is not None:
        pred = 1.0 - ps.cost_predicted / nz.cost_predicted
    meas = 1.0 - ps.cost_measured / nz.cost_measured if nz.cost_measured > 0 else None
    return pred, meas


@dataclass(frozen=True)
class _Measured:
    levels: np.ndarray
    target: float
    curves: tuple[SeedCurves, SeedCurves]


def _measure(pair: _Pair, target_fraction: float) -> _Measured | None:
    a, b = seed_curves(pair.nonzero, "po_tokens"), seed_curves(pair.p_star, "po_tokens")
    target = target_fraction * min(float(a.mean.max()), float(b.mean.max()))
    start = max(float(a.mean[0]), float(b.mean[0]))
    if not target > start:
        return None
    return _Measured(band_levels(target, start), target, (a, b))


def _saving(m: _Measured, picks: np.ndarray | None = None) -> np.ndarray:
    return band_saving_samples(*m.curves, m.levels, picks)


def gap_rows(
    runs: Mapping[str, Sequence[RunResult]],
    logs: Mapping[RunId, Path] | None = None,
    *,
    target_fraction: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[GapRow]:
    """One row per ablation of :data:`ABLATIONS` whose profile's runs are in ``runs`` (profile → its runs);
    ``logs``: each run's per-prompt log, for the paper's J from |A| (``report.settled.row_level_ratio``)."""
    from costaware.report.settled import row_level_ratio

    ratio_of: dict[Path, float] = {}

    def predicted_abs(pair: _Pair) -> float | None:
        paths = [logs[r.id] for r in pair.nonzero if logs is not None and r.id in logs]
        for path in paths:
            if path not in ratio_of:
                ratio_of[path] = row_level_ratio(path)
        return 1.0 - float(np.median([ratio_of[p] for p in paths])) if paths else None

    pairs = {ab.key: _pair(ab, runs.get(ab.profile, ())) for ab in ABLATIONS}
    ref = pairs.get(REFERENCE)
    out = []
    for ab in ABLATIONS:
        pair = pairs[ab.key]
        if pair is None:
            continue
        m = _measure(pair, target_fraction)
        if m is None:
            continue
        measured = band_saving(*m.curves, m.levels, n_boot=n_boot, seed=seed)  # paired: the arms share seeds
        against = None
        if ab.key != REFERENCE and ref is not None:
            against = _against(pair, ref, target_fraction, n_boot, seed)
        pred, meas = _step_error_savings(pair)
        out.append(GapRow(ab, pair.seeds, pair.nonzero[0].id.learning_rate, pair.p_star[0].id.learning_rate,
                          predicted_abs(pair), pred, meas, measured, m.target, against, pair.validation))  # fmt: skip
    return out


def _against(pair: _Pair, ref: _Pair, target_fraction: float, n_boot: int, seed: int) -> Estimate | None:
    """The ablation's measured saving minus the reference's, bootstrapped over the seeds both ran (paired)."""
    seeds = sorted(set(pair.seeds) & set(ref.seeds))
    if len(seeds) < 2:
        return None

    def at(p: _Pair) -> _Measured | None:
        keep = [i for i, s in enumerate(p.seeds) if s in seeds]
        return _measure(_Pair(tuple(seeds), [p.nonzero[i] for i in keep], [p.p_star[i] for i in keep]),
                        target_fraction)  # fmt: skip

    ma, mr = at(pair), at(ref)
    if ma is None or mr is None:
        return None
    picks = np.random.default_rng(seed).integers(0, len(seeds), size=(n_boot, len(seeds)))
    lo, hi, undefined = percentile_ci(_saving(ma, picks) - _saving(mr, picks), 0.95)
    return Estimate(float(_saving(ma) - _saving(mr)), lo, hi, undefined, len(seeds))


def _pct(v: float | None) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{100 * v:+.0f}%"


def _points(v: float) -> str:
    return "–" if not np.isfinite(v) else f"{100 * v:+.0f} points"


def _signed(v: float) -> str:
    return "–" if not np.isfinite(v) else f"{100 * v:+.0f}"


def _share(part: float, whole: float) -> str:
    return "–" if not (np.isfinite(part) and np.isfinite(whole) and whole != 0) else f"{part / whole:.0%}"


def markdown(rows: Sequence[GapRow]) -> str:
    """The table of predicted and measured savings, and one computed line per ablation on the gap it closes."""
    if not rows:
        return "No ablation has finished runs yet."
    lines = [
        "| ablation | seeds | LR: `nonzero` / p\\* | predicted: J from \\|A\\| | predicted: J exact "
        "| step error, measured | measured saving [95% CI] | verdict | gap (J exact − measured) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.ablation.label} | {len(r.seeds)} | {r.nonzero_lr:g} / {r.p_star_lr:g} | {_pct(r.predicted_abs)} | "
            f"{_pct(r.predicted)} | "
            f"{_pct(r.step_error_measured)} | {fmt(r.measured)} | {verdict(r.measured).value} | {_points(r.gap)} |"
        )
    ref = next((r for r in rows if r.ablation.key == REFERENCE), None)
    lines.append("")
    for r in rows:
        if r.against_reference is None or ref is None:
            continue
        d = r.against_reference
        shown = "shown" if d.excludes_zero else "not shown"
        lines.append(
            f"- {r.ablation.label}: its measured saving minus the reference's, at the {d.seeds} seeds both ran, "
            f"is {_points(d.value)} [{_signed(d.lo)}, {_signed(d.hi)}] (a change {shown}): "
            f"{_share(d.value, ref.gap)} of the reference's gap of {_points(ref.gap)}."
        )
    for r in rows:
        if r.validation:
            names = {NONZERO.key: "nonzero", r.ablation.p_star.key: escape(label(r.ablation.p_star))}
            picks = "; ".join(
                f"{names.get(k, k)} " + ", ".join(f"{lr:g}: {v:.3f}" for lr, v in sorted(d.items()))
                for k, d in r.validation.items()
            )
            lines.append(f"- {r.ablation.label}, peak seed-mean validation accuracy by LR: {picks}.")
    return "\n".join(lines).strip()


def summary(
    runs: Mapping[str, Sequence[RunResult]], logs: Mapping[RunId, Path] | None = None, **kw: Any
) -> dict[str, Any]:
    """The recorded form: every row, and the runs read per profile (JSON-ready)."""
    from costaware.report import step_errors

    return {
        "rows": [r.as_dict() for r in gap_rows(runs, logs, **kw)],
        "step_errors": {
            p: [
                {**d, "label": label(a.arm)}
                for d, a in zip(step_errors.summary(v), step_errors.arm_step_errors(v), strict=True)
            ]  # fmt: skip
            for p, v in sorted(runs.items())
        },
        "runs": {p: len(v) for p, v in sorted(runs.items())},
    }


BLOCK_START, BLOCK_END = "<!-- gap:start -->", "<!-- gap:end -->"


def quoted_block(record: dict[str, Any]) -> str:
    """What a page quotes of a recorded summary, between :data:`BLOCK_START` and :data:`BLOCK_END`: the table of
    :func:`markdown` and, under it, every profile's step errors (:func:`step_error_table`)."""
    return (markdown([_row(d) for d in record["rows"]]) + "\n\n" + step_error_table(record)).strip()


def step_error_table(record: dict[str, Any]) -> str:
    """Each profile's arms (and LRs): step error measured and in closed form, and the cost to equal step error
    against `nonzero`'s at the same LR, measured and in closed form (``report.step_errors``)."""

    def num(v: float | None, f: str = ".3g") -> str:
        return "–" if v is None or not math.isfinite(v) else format(v, f)

    rows = [(p, d) for p, ds in record.get("step_errors", {}).items() for d in ds]
    if not rows:
        return ""
    lines = [
        "| profile | arm | LR | seeds | rounds measured | step error measured | closed form | measured / closed form "
        "| PO tokens per step | cost vs `nonzero`, measured | closed form |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p, d in rows:
        ratio = d["measured"] / d["predicted"] if d["predicted"] else None
        cells = [p, escape(d["label"]), f"{d['learning_rate']:g}", str(d["seeds"]), str(d["points"]),
                 num(d["measured"]), num(d["predicted"]), num(ratio, ".2f"), num(d["tokens_per_step"], ".0f"),
                 num(d["cost_vs_nonzero_measured"], ".2f"), num(d["cost_vs_nonzero_predicted"], ".2f")]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _estimate(d: dict[str, Any]) -> Estimate:
    from costaware.report.settled import estimate_of

    return estimate_of(d)


def _row(d: dict[str, Any]) -> GapRow:
    ab = next(a for a in ABLATIONS if a.key == d["key"])
    against = None if d["against_reference"] is None else _estimate(d["against_reference"])
    return GapRow(ab, tuple(d["seeds"]), d["nonzero_lr"], d["p_star_lr"], d["predicted_abs"], d["predicted"],
                  d["step_error_measured"],
                  _estimate(d["measured"]), d["target"], against,
                  {k: {float(lr): v for lr, v in x.items()} for k, x in d.get("validation", {}).items()})  # fmt: skip


def load_profiles(evidence: Path) -> tuple[dict[str, list[RunResult]], dict[RunId, Path]]:
    """Each ablation profile's archived runs under ``evidence`` (``<profile>/runs``), where they exist, and
    each run's per-prompt log beside it."""
    from costaware.report.settled import load_run

    runs: dict[str, list[RunResult]] = {}
    logs: dict[RunId, Path] = {}
    for profile in dict.fromkeys(a.profile for a in ABLATIONS):
        folder = evidence / profile / "runs"
        if not folder.is_dir():
            continue
        runs[profile] = []
        for path in sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")]):
            if (r := load_run(path)) is None:
                continue
            runs[profile].append(r)
            log = path.with_name(path.name.replace(".json", ".prompts.jsonl"))
            if log.exists():
                logs[r.id] = log
    return runs, logs


def main(argv: list[str] | None = None) -> int:
    from costaware.report.settled import replace_block

    p = argparse.ArgumentParser(prog="python -m costaware.report.gap", description=__doc__.split("\n\n")[0])
    p.add_argument("evidence", help="a folder with one folder per ablation profile (gap/runs, gap-sgd/runs, ...)")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--quote-in", nargs="*", default=(), help="pages whose gap block is rewritten from the summary")
    args = p.parse_args(argv)
    evidence = Path(args.evidence)
    runs, logs = load_profiles(evidence) if evidence.is_dir() else ({}, {})
    if not runs:
        print(f"gap: evidence must be a folder holding <profile>/runs of the gap profiles, got {str(evidence)!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    out = summary(runs, logs)
    print(quoted_block(json.loads(json.dumps(out))))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for page in map(Path, args.quote_in):
        page.write_text(replace_block(page.read_text(), quoted_block(json.loads(json.dumps(out))), BLOCK_START,
                                      BLOCK_END))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
