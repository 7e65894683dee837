"""The report of `costaware reproduce`, built from :class:`~costaware.experiments.records.RunResult` records.

It opens with one table of the headline claims and a few sentences generated from the same comparisons
(``report.opening``), the verdict rule (``report.verdicts``), the cost to target per arm and the
decomposition as figures (``report.charts``) and a short table of what ran. Then the verdicts at other
prices of a generated token and at other targets (``report.sweeps``), the task sections (a slot for
more, :data:`TASK_SECTIONS`), and per task and setting: the method table, the decomposition, the
verdict lines and the plateau check, each in total cost first (generated tokens × generation_cost + PO
tokens); a prompt-stage section (``report.rollout``) adds its target's verdict and the predictions
from the runs' per-prompt logs (``report.predicted``). The accuracy curves of the key arms follow;
the appendix holds every arm's curves, token shares, proxy fidelity, ablations and the run list (the
run specifications are in ``summary.json`` and a collapsed block of the HTML). The metrics are in
``report.curves`` and ``report.evidence``; this file only lays them out (Markdown, HTML, JSON).
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from costaware._checks import generation_cost as check_generation_cost
from costaware.experiments.arms import Arm
from costaware.experiments.records import RunId, RunResult
from costaware.report import evidence as E
from costaware.report import opening as O
from costaware.report import predicted as P
from costaware.report import rollout as R
from costaware.report import step_errors as SE
from costaware.report import sweeps as S
from costaware.report import tuned as T
from costaware.report.charts import plot_cost_to_target, plot_price_sweep, plot_waterfall
from costaware.report.cost_structure import runs_cost_structure_section
from costaware.report.curves import (
    AXES,
    DEFAULT_GENERATION_COST,
    MIN_SEEDS_FOR_CI,
    Estimate,
    area_under_curve,
    axis_values,
    bootstrap_ci,
    first_crossing,
    first_crossings,
    seed_curves,
)
from costaware.report.figures import AXIS_TITLES, X_STRETCH, plot_ablations, plot_axis
from costaware.report.labels import label
from costaware.report.md import Md, code, escape, table
from costaware.report.verdicts import RULE, fmt, no_interval, pct, verdict

__all__ = [
    "write_report",
    "arm_stats",
    "fidelity_summary",
    "tokens_to_reach",
    "area_under_curve",
    "bootstrap_ci",
    "FIGURES",
    "FIDELITY_KEYS",
]

tokens_to_reach = first_crossing  # the one first-crossing helper, under its old name
FIGURES = {axis: f"accuracy_vs_{axis}.png" for axis in AXES}  # total_cost, po_tokens, generated_tokens, rounds
FIDELITY_KEYS = ("pearson", "chi2", "j_vs_uniform")


def _fmt(v: float, axis: str) -> str:
    if not np.isfinite(v):
        return "not reached"
    return f"{v:.0f}" if axis == "rounds" else f"{v / 1e3:.1f}k"


def arm_stats(
    runs: Sequence[RunResult],
    target: float,
    upto: float,
    *,
    generation_cost: float = DEFAULT_GENERATION_COST,
    n_boot: int = 2000,
) -> dict[str, Any]:
    """One arm's numbers: peak of the seed-mean curve, x to ``target`` on each axis, AUC, PO seconds; 95% CIs."""
    picks = np.random.default_rng(0).integers(0, len(runs), size=(n_boot, len(runs)))
    c = seed_curves(runs, "po_tokens", generation_cost=generation_cost)
    boot = c.boot_means(picks).max(1)
    out: dict[str, Any] = {
        "seeds": len(runs),
        "peak": float(c.mean.max()),
        "peak_ci": [float(q) for q in np.quantile(boot, [0.025, 0.975])],
    }
    for axis in AXES:
        c = seed_curves(runs, axis, generation_cost=generation_cost)
        t = first_crossings(c.grid, c.boot_means(picks), target)
        out[f"{axis}_to_target"] = float(first_crossings(c.grid, c.mean, target))
        out[f"{axis}_to_target_ci"] = [float(q) for q in np.quantile(t, [0.025, 0.975], method="inverted_cdf")]
    aucs = [area_under_curve(axis_values(r, "po_tokens"), [e.heldout_accuracy for e in r.evals], upto) for r in runs]
    out["auc"], out["auc_ci"] = float(np.mean(aucs)), list(bootstrap_ci(aucs))
    out["po_seconds"] = float(np.mean([r.evals[-1].po_seconds for r in runs]))
    return out


def _interval(st: dict[str, Any], v: str, lo: str, hi: str) -> str:
    """``v [lo, hi]``, or ``v`` alone where the arm has too few seeds for an interval."""
    return f"{v} [{lo}, {hi}]" if st["seeds"] >= MIN_SEEDS_FOR_CI else v


def _to_target(st: dict[str, Any], axis: str) -> str:
    lo, hi = st[f"{axis}_to_target_ci"]
    return _interval(st, _fmt(st[f"{axis}_to_target"], axis), _fmt(lo, axis), _fmt(hi, axis))


def _peak_cell(st: dict[str, Any]) -> str:
    return _interval(st, f"{st['peak']:.3f}", f"{st['peak_ci'][0]:.3f}", f"{st['peak_ci'][1]:.3f}")


def _auc_cell(st: dict[str, Any]) -> str:
    return _interval(st, f"{st['auc']:.3f}", f"{st['auc_ci'][0]:.3f}", f"{st['auc_ci'][1]:.3f}")


def _arm_row(name: str, st: dict[str, Any]) -> list[str]:
    cells = [name, str(st["seeds"]), _peak_cell(st)]
    return cells + [_to_target(st, axis) for axis in AXES] + [_auc_cell(st), f"{st['po_seconds']:.1f}"]


def _proxy_sentence(sec: E.Section) -> str:
    """Which gradient-norm proxy 'p*' used here: 'auto' resolves by the section's loss (grpo.config)."""
    from costaware.grpo.config import resolve_proxy

    losses = {
        r.id.loss_type for runs in sec.arms.values() for r in runs if r.id.method == "p_star" and r.id.proxy == "auto"
    }
    if len(losses) != 1:
        return ""
    loss = losses.pop()
    proxy, beta = resolve_proxy("auto", None, loss_type=loss, method="p_star")
    what = (
        "the paper's |A|"
        if proxy == "advantage"
        else f"{proxy} (β fitted online from the prior {beta:g}; this loss sums token losses)"
    )
    return f" Under loss {code(loss)}, {escape(label(Arm('p_star')))} uses proxy 'auto' = {escape(what)}."


def _upto(ev: E.Evidence) -> float:
    return float(min(r.evals[-1].po_tokens for r in ev.section.arms[ev.baseline]))


def _all_stats(ev: E.Evidence) -> dict[E.Key, dict[str, Any]]:
    return {
        k: arm_stats(runs, ev.target, _upto(ev), generation_cost=ev.generation_cost)
        for k, runs in ev.section.arms.items()
    }


def _section_lines(ev: E.Evidence, baseline: Arm) -> list[str]:
    sec = ev.section
    upto = _upto(ev)
    controlled = all(r.po_seconds_controlled for runs in sec.arms.values() for r in runs)
    clock = "PO wall s (controlled)" if controlled else "PO wall s (contended)"
    lines = [
        f"## {escape(sec.task)} / {escape(sec.setting)}",
        "",
        f"Common target: **{ev.target:.3f}** ({100 * ev.target_fraction:.0f}% of the lowest seed-mean peak "
        f"among the methods compared). AUC is the mean accuracy over the first {upto / 1e3:.1f}k PO tokens. "
        f"Total cost = generated tokens × {ev.generation_cost:.3g} + PO tokens." + _proxy_sentence(sec),
        "",
    ]
    order = sorted(sec.arms, key=lambda k: (k[0] != baseline, k[0], k[1]))
    stats = _all_stats(ev)
    lines += table(
        ["method", "seeds", "peak [95% CI]", *(f"{E.AXIS_WORDS[a]} to target" for a in AXES), "AUC", clock],
        [_arm_row(sec.name(k), stats[k]) for k in order],
    )
    if not controlled:
        # true on any machine: with --jobs 1 no other run shares the CPU, but nothing controlled it either
        lines += [
            "",
            "The PO wall-clock column was not measured under control (contended: other runs of the job "
            "or other processes may have shared the CPU): it is not a measurement of the time saved; "
            "`benchmarks/` holds the controlled one.",
        ]
    rows = []
    for c in ev.decomposition:
        cells = [fmt(c.savings[a]) for a in AXES]
        g = c.rounds_gap
        cells.append(
            "–"
            if g is None
            else (
                f"{g.value:+.3f} [{g.lo:+.3f}, {g.hi:+.3f}]"
                if g.has_interval
                else f"{g.value:+.3f} ({no_interval(g.seeds)})"
            )
            + f" at round {c.rounds_at:.0f}"
        )
        rows.append([f"{c.name}: {sec.name(c.a)} → {sec.name(c.b)}", *cells])
    if not ev.decomposition:
        why = (
            "the target is not above the starting accuracy"
            if not ev.informative
            else "no pair of the decomposition was run"
        )
        rows.append([f"(not computed: {why})", *["–"] * (len(AXES) + 1)])
    lines += ["", "### Decomposition: saving to the common target, by effect", ""]
    lines += table(
        ["step", *(f"{E.AXIS_WORDS[a]} [95% CI]" for a in AXES), "Δ accuracy at equal rounds [95% CI]"], rows
    )
    lines += [
        "",
        "Saving = 1 − x(later)/x(earlier) to reach the target on each method's seed-mean curve; positive "
        "means the later method needs less. Δ accuracy at equal rounds is the later method's seed-mean "
        "accuracy minus the earlier one's at the last generation round both reached: the comparison at "
        "equal rollouts. CIs resample the seeds (paired when both ran the same seeds). "
        f"Tuned baseline: {escape(sec.name(ev.tuned)) if ev.tuned else 'none'} ({escape(ev.tuned_note)}). "
        f"Best cost-aware method: {escape(sec.name(ev.best)) if ev.best else 'none'}"
        + (f" ({escape(ev.best_note)})." if ev.best_note else "."),
        "",
        "### Verdicts",
        "",
    ]
    lines += [E.verdict_line(claim, comp, why, target=ev.target) for claim, comp, why in ev.claims]
    lines += ["", "(Verdicts by the rule at the top.)", "", ev.plateau.text(label(baseline)), ""]
    if ev.tuned_plateau is not None and ev.tuned is not None:
        lines += [ev.tuned_plateau.text(sec.name(ev.tuned)), ""]
    return lines


def _ablation_lines(runs: Sequence[RunResult], evs: Sequence[E.Evidence], generation_cost: float) -> list[str]:
    """Each ablation arm (and GRPO and p* on the same seeds, for reference) against its task's headline target."""
    targets = {ev.section.task: ev.target for ev in evs if ev.section.setting == "grpo"}
    by: dict[tuple[str, Arm], list[RunResult]] = defaultdict(list)
    for r in runs:
        if r.id.task in targets and r.id.method != "sft":
            by[(r.id.task, r.id.arm)].append(r)
    if not by:
        return []
    rows = []
    for (task, arm), rs in sorted(by.items()):
        upto = float(min(r.evals[-1].po_tokens for r in rs))
        st = arm_stats(rs, targets[task], upto, generation_cost=generation_cost)
        rows.append(
            [
                task,
                label(arm),
                st["seeds"],
                _peak_cell(st),
                _to_target(st, "total_cost"),
                _to_target(st, "po_tokens"),
                _auc_cell(st),
            ]
        )
    lines = table(
        [
            "task",
            "arm",
            "seeds",
            "peak [95% CI]",
            "total cost to the headline target",
            "PO tokens to the headline target",
            "AUC [95% CI]",
        ],
        rows,
    )
    return lines + [
        "",
        "Ablation runs use the ablation seeds; GRPO and p* rows are the headline runs of those seeds. "
        "The target is the task's headline target.",
        "",
    ]


def fidelity_summary(results: Sequence[RunResult]) -> dict[str, dict[Arm, dict[str, dict[str, float]]]]:
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


def _fidelity_lines(results: Sequence[RunResult]) -> list[str]:
    fid = fidelity_summary(results)
    if not fid:
        return []
    lines = [
        "## Proxy fidelity across training (paper Figure 3, G.8)",
        "",
        escape(
            "Measured by the trainer on a random subset of each pool: the exact per-sequence gradient norm "
            "G_i against the proxy |A_i|. J(p_|A|)/J(p*_true) = 1 + χ² (Theorem 4.2); J(p_|A|)/J(uniform) "
            "< 1 means sampling by |A|/√c is predicted to cost less than uniform sampling."
        ),
        "",
    ]
    rows = []
    for s, by_arm in sorted(fid.items()):
        for arm, vals in sorted(by_arm.items()):
            rows.append(
                [s, label(arm)]
                + [
                    f"{vals[k]['mean']:.2f} [{vals[k]['min']:.2f}, {vals[k]['max']:.2f}]" if k in vals else "–"
                    for k in FIDELITY_KEYS
                ]
            )
    lines += table(
        ["task/setting", "method", "Pearson mean [min, max]", "χ² mean [min, max]", "J(p)/J(uniform) mean [min, max]"],
        rows,
    )
    return lines + [""]


def _token_share_lines(results: Sequence[RunResult]) -> list[str]:
    """The method's own PO tokens against plain GRPO's and the nonzero rows' on the same pools."""
    by: dict[tuple[str, str, Arm, float], list[RunResult]] = defaultdict(list)
    for r in results:
        last = r.evals[-1]
        if last.po_tokens_plain and last.po_tokens_nonzero is not None and r.id.method != "sft":
            by[(r.id.task, r.id.setting, r.id.arm, r.id.learning_rate)].append(r)
    if not by:
        return []
    clock = "controlled" if all(r.po_seconds_controlled for rs in by.values() for r in rs) else "contended"
    rows = []
    for (task, setting, arm, lr), rs in sorted(by.items()):
        own = np.mean([r.evals[-1].po_tokens for r in rs])
        plain = np.mean([r.evals[-1].po_tokens_plain for r in rs])
        nz = np.mean([r.evals[-1].po_tokens_nonzero for r in rs])
        rounds = np.mean([r.evals[-1].rounds for r in rs])
        wall = np.median([r.wall_seconds for r in rs])
        po = np.median([r.counters.get("po_seconds", np.nan) for r in rs])
        rows.append(
            [
                f"{task}/{setting}",
                label(arm),
                f"{lr:g}",
                f"{own / 1e3:.1f}k",
                f"{plain / 1e3:.1f}k",
                f"{nz / 1e3:.1f}k",
                f"{own / plain:.2f}",
                f"{rounds:.0f}",
                f"{wall:.0f}",
                f"{po:.0f}",
            ]
        )
    lines = ["## Tokens per run, on the run's own pools (mean over seeds)", ""]
    lines += table(
        [
            "task/setting",
            "method",
            "lr",
            "own PO tokens",
            "plain GRPO on the same pools",
            "nonzero rows only",
            "own / plain",
            "generation rounds",
            "run wall s (median)",
            f"PO s (median, {clock})",
        ],
        rows,
    )
    return lines + ["", *_generation_share_line([r for rs in by.values() for r in rs])]


def _generation_share_line(runs: Sequence[RunResult]) -> list[str]:
    """Generation's share of the runs' wall time (training rounds and evaluations), from the runs that record it."""
    timed = [r for r in runs if r.generation_seconds is not None and r.eval_seconds is not None and r.wall_seconds > 0]
    if not timed:
        return []
    wall = sum(r.wall_seconds for r in timed)
    gen, ev = (
        sum(r.generation_seconds or 0.0 for r in timed) / wall,
        sum(r.eval_seconds or 0.0 for r in timed) / wall,
    )  # each set
    return [
        f"Generation's share of the run wall time ({len(timed)} runs, {wall:.0f} s): {100 * gen:.0f}% in the "
        f"training rounds' generation, {100 * ev:.0f}% in evaluations (sampling the held-out and validation sets), "
        f"{100 * (1 - gen - ev):.0f}% the rest (policy optimisation, log-prob passes, setup).",
        "",
    ]


def _run_rows(results: Sequence[RunResult]) -> list[list[Any]]:
    return [
        [
            i.group,
            i.task,
            i.setting,
            label(i.arm),
            f"{i.learning_rate:g}",
            i.seed,
            i.loss_type,
            code(json.dumps(r.spec, sort_keys=True)),
            f"{r.wall_seconds:.0f}",
        ]
        for i, r in sorted(
            ((r.id, r) for r in results),
            key=lambda ir: (ir[0].group, ir[0].task, ir[0].setting, ir[0].arm, ir[0].learning_rate, ir[0].seed),
        )
    ]


RUN_HEADER = ["group", "task", "setting", "method", "lr", "seed", "loss", "spec", "wall s"]
SPECS_MARKER = "Run specifications (every run, its spec and wall time): `summary.json`, key `runs`."


def _what_ran(results: Sequence[RunResult]) -> list[str]:
    """A short table of what ran: one row per group, task and setting, with its arms and seeds."""
    by: dict[tuple[str, str, str], list[RunResult]] = defaultdict(list)
    for r in results:
        by[(r.id.group, r.id.task, r.id.setting)].append(r)
    rows = []
    for (group, task, setting), rs in sorted(by.items()):
        arms = sorted({(r.id.arm, r.id.learning_rate) for r in rs})
        lrs = [lr for _, lr in arms]
        default = max(set(lrs), key=lambda v: (lrs.count(v), -v))
        names = ", ".join(dict.fromkeys(label(a, learning_rate=lr, default_lr=default) for a, lr in arms))
        seeds = sorted({r.id.seed for r in rs})
        rows.append(
            [
                group,
                task,
                setting,
                names,
                ", ".join(f"{v:g}" for v in sorted(set(lrs))),
                ", ".join(map(str, seeds)),
                len(rs),
                f"{sum(r.wall_seconds for r in rs) / 60:.1f}",
            ]
        )
    return (
        ["## What ran", ""]
        + table(["group", "task", "setting", "methods", "lr", "seeds", "runs", "run minutes"], rows)
        + ["", SPECS_MARKER, ""]
    )


def _cost_sentence(cost: float) -> str:
    return f"Total cost counts one generated token as {cost:.3g} of a policy-optimisation token. " + (
        "The default, 1/3, assumes batched, compute-bound decoding: a decoded token costs ~2N FLOPs and a "
        "trained token's forward+backward ~6N. Decoding is usually memory-bound, so per token it costs "
        "more than that in wall-clock; the verdicts at other prices are below."
        if cost == DEFAULT_GENERATION_COST
        else "The ratio was set by the profile."
    )


# The task sections: each takes the runs and their per-prompt logs and returns Markdown lines (or none); the
# first says, per task, whether p* can choose between the responses of one group (their costs differ).
TASK_SECTIONS: list[Callable[[Sequence[RunResult], Mapping[RunId, Path] | None], list[str]]] = [
    runs_cost_structure_section,
]


def key_arms(ev: E.Evidence, stats: Mapping[E.Key, Mapping[str, Any]], candidates: Sequence[E.Key]) -> list[E.Key]:
    """The arms a reader compares first: GRPO, nonzero, the candidate(s), and the best peer (the one of PODS,
    cost-aware PODS, GRESO's skip, DAPO's sampling with the lowest total cost to the target)."""
    sec, lr = ev.section, ev.section.default_lr
    out = [ev.baseline, (Arm("nonzero"), lr), *candidates]
    peers = [k for k in sec.arms if k[1] == lr and R.is_peer(k[0])]
    if peers:
        out.append(min(peers, key=lambda k: (stats[k]["total_cost_to_target"], k)))
    return [k for k in dict.fromkeys(out) if k in sec.arms]


def _cell(s: Estimate | None, points: bool) -> Md:
    """A saving and its verdict; only the point where the whole table has no intervals (said above it)."""
    if s is None:
        return Md("– (not above the start)")
    return Md(escape(pct(s.value))) if points else Md(escape(f"{fmt(s)}, {verdict(s).value}"))


def _points_only(ests: Sequence[Estimate | None]) -> str:
    """The line above a table whose savings all lack an interval, else ''."""
    seeds = {e.seeds for e in ests if e is not None}
    if not seeds or any(e is not None and e.has_interval for e in ests):
        return ""
    return f"Point estimates ({no_interval(min(s for s in seeds if s is not None))}; no verdict)."


def _price_lines(ev: E.Evidence, rows: Sequence[S.PriceRow]) -> list[str]:
    if not rows:
        return []
    sec = ev.section
    points = _points_only([s for r in rows for s in r.savings])
    lines = [f"### {escape(sec.task)} / {escape(sec.setting)}", ""] + ([points, ""] if points else [])
    lines += table(
        ["claim", *(f"g = {_g(g)}" for g in S.PRICES), "note"],
        [
            [
                r.claim,
                *(_cell(s, bool(points)) for s in r.savings),
                "the verdict depends on the price" if r.depends_on_price else "",
            ]
            for r in rows
        ],
    )
    return lines + [""]


def _g(g: float) -> str:
    return "1/3" if abs(g - 1 / 3) < 1e-12 else f"{g:g}"


def _target_lines(ev: E.Evidence, rows: Sequence[S.TargetRow]) -> list[str]:
    if not rows:
        return []
    sec = ev.section
    lowest = min(ev.peaks.values())
    points = _points_only([s for r in rows for s in r.savings])
    lines = [f"### {escape(sec.task)} / {escape(sec.setting)} (lowest seed-mean peak {lowest:.3f})", ""]
    lines += [points, ""] if points else []
    lines += table(
        ["claim", *(f"{100 * f:.0f}%: {f * lowest:.3f}" for f in S.TARGET_FRACTIONS), "note"],
        [[r.claim, *(_cell(s, bool(points)) for s in r.savings), r.note] for r in rows],
    )
    return lines + [""]


def write_report(
    results: Sequence[RunResult],
    out: Path,
    *,
    command: str,
    profile: dict[str, Any] | None = None,
    sft: dict[str, Any] | None = None,
    baseline: str | Arm = "none",
    candidate: str | Arm = "p_star",
    generation_cost: float = DEFAULT_GENERATION_COST,
    target_fraction: float = 0.95,
    notice: str | None = None,
    logs: Mapping[RunId, Path] | None = None,
) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``summary.json`` and the figures into ``out``; return their paths.

    ``notice``: a paragraph shown in bold above everything else (e.g. that a smoke profile's figures mean nothing).
    ``logs``: each run's per-prompt log (``runs/<run file stem>.prompts.jsonl``), by its ``RunId``; a run without
    one, or a path that does not exist, is said to have none. The predictions beside the measured savings
    (``report.predicted``) come from these.
    """
    if logs is not None and not isinstance(logs, Mapping):
        raise TypeError(f"logs must be a mapping from RunId to a log path, got {type(logs).__name__}")
    check_generation_cost(generation_cost)  # before any section is judged or figure drawn
    if not results:
        raise ValueError("results must not be empty: no run has finished")
    bad = [r for r in results if not isinstance(r, RunResult)]
    if bad:
        raise ValueError(f"results must be RunResult records, got {type(bad[0]).__name__}")
    baseline, candidate = E.as_arm(baseline, "baseline"), E.as_arm(candidate, "candidate")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    secs = E.sections(results, baseline)
    if not secs:
        raise ValueError(f"baseline {baseline.key!r} has no runs: arms are {sorted({r.id.arm.key for r in results})}")
    # by (task, setting): a prompt-stage section has its own candidate, peers and target; it and the headline
    # get the predictions from the logs
    revs = {
        _sid(s): R.evaluate_rollout(s, baseline, target_fraction=target_fraction, generation_cost=generation_cost)
        for s in secs
        if R.is_rollout(s)
    }
    evs = [
        revs[_sid(s)].evidence
        if _sid(s) in revs
        else E.evaluate_section(
            s, baseline, candidate=candidate, target_fraction=target_fraction, generation_cost=generation_cost
        )
        for s in secs
    ]
    preds = {_sid(s): P.predict(s, logs, generation_cost) for s in secs if _sid(s) in revs or s.setting == "grpo"}
    stats = {_sid(ev.section): _all_stats(ev) for ev in evs}
    cands = {
        _sid(ev.section): (
            revs[_sid(ev.section)].candidates if _sid(ev.section) in revs else ((candidate, ev.section.default_lr),)
        )
        for ev in evs
    }
    keys = {sid: key_arms(ev, stats[sid], cands[sid]) for ev in evs for sid in (_sid(ev.section),)}
    prices = [S.price_claims(ev) for ev in evs]
    targets = [S.target_claims(ev) for ev in evs]
    sweep = [
        (
            ev,
            {
                k: S.price_savings(ev.section, ev.baseline, k, ev.target, S.SWEEP)
                for k in keys[_sid(ev.section)]
                if k != ev.baseline
            },
        )
        for ev in evs
        if ev.informative
    ]
    cpu = S.measured_ratio([r for r in results if r.id.method != "sft"])

    sft_runs = [r for r in results if r.id.method == "sft"]
    figures = {axis: out / name for axis, name in FIGURES.items()}
    cut = {}
    for axis, path in figures.items():
        cut[axis] = plot_axis(evs, axis, path, sft_runs, keys)
    figures["all_arms"] = out / "accuracy_all_arms.png"
    plot_axis(evs, "total_cost", figures["all_arms"], sft_runs, title="every arm")
    figures["cost_to_target"] = out / "cost_to_target.png"
    plot_cost_to_target(evs, stats, keys, figures["cost_to_target"])
    figures["waterfall"] = out / "waterfall.png"
    if not plot_waterfall(evs, stats, figures["waterfall"]):
        del figures["waterfall"]
    if sweep:
        figures["price_sweep"] = out / "price_sweep.png"
        plot_price_sweep(
            sweep, S.SWEEP, figures["price_sweep"], cpu_ratio=cpu, gpu_range=(min(S.GPU_RATIO), max(S.GPU_RATIO))
        )
    ablations = [r for r in results if r.id.group == "ablation"]
    abl_ref = [
        r
        for r in results
        if r.id.group == "headline"
        and r.id.arm in (baseline, candidate)
        and (r.id.task, r.id.seed) in {(a.id.task, a.id.seed) for a in ablations}
    ]  # same seeds, for reference
    if ablations:
        figures["ablations"] = out / "ablations.png"
        plot_ablations(ablations + abl_ref, figures["ablations"])

    lines = ["# Cost-aware GRPO against GRPO: what a user gains, and from which effect", ""]
    lines += [f"**{notice}**", ""] if notice else []
    opening_rows = O.rows(evs)
    lines += O.opening_table(opening_rows) + [""]
    for ev in evs:
        sid = _sid(ev.section)
        if sid in revs:
            rev = revs[sid]
            text = (
                f"{R.TARGET_WORDS[0].upper()}{R.TARGET_WORDS[1:]}: "
                + "; ".join(
                    f"{escape(ev.section.name(t.candidate))}: **{'met' if t.met else 'not met'}**" for t in rev.targets
                )
                + " (its section says why)."
            )
            lines += [
                f"**{escape(ev.section.task)} / {escape(ev.section.setting)}:** "
                + O.sentences(ev, baseline, rev.candidates[0][0], text),
                "",
            ]
        elif ev is evs[0]:
            lines += [O.sentences(ev, baseline, candidate), ""]
    lines += [RULE, ""]
    lines += [
        f"Target accuracy of a section: {100 * target_fraction:.0f}% of the lowest seed-mean peak among the "
        "methods it compares, so that every seed-mean curve reaches it. Saving = 1 − cost(later)/cost(earlier) "
        "to reach it; positive: the later method needs less. " + _cost_sentence(generation_cost),
        "",
    ]
    lines += [
        "![total cost to the target, per arm](cost_to_target.png)",
        "",
        "Total cost to each section's target accuracy, per key arm: the dot on the seed-mean curve, the whisker "
        f"its 95% CI over seeds (none below {MIN_SEEDS_FOR_CI} seeds); the dotted line is GRPO's.",
        "",
    ]
    if "waterfall" in figures:
        lines += [
            "![the saving by effect: GRPO → nonzero → p*](waterfall.png)",
            "",
            "The saving by effect: GRPO's total cost to the target, the change from dropping the zero-advantage "
            "rows (GRPO → nonzero), the change from cost-aware sampling "
            + escape("(nonzero → p*), p*'s cost")
            + "; green "
            "lowers the cost, red raises it, each step labelled with its saving.",
            "",
        ]
    lines += _what_ran(results)
    lines += [f"Command: {code(command)}", ""]
    if sft:
        lines += [
            f"Policy: {sft.get('parameters', 0):,} parameters after SFT: greedy accuracy "
            f"{sft.get('greedy_accuracy', float('nan')):.3f}, sampled {sft.get('sampled_accuracy', float('nan')):.3f}.",
            "",
        ]

    lines += [
        "## Verdicts at other prices of a generated token",
        "",
        "Total cost = generated tokens × g + PO tokens, recomputed from the same runs at each price g with the "
        "same paired bootstrap as the verdicts. At g = 0 it is the PO-token saving; as g grows it tends to the "
        "generated-token saving. g = 1/3 is the FLOP ratio (compute-bound decoding)"
        + (
            f"; on the machine that ran these runs (a CPU), generation took {cpu:.2f}× the seconds per token of "
            "policy optimisation (training generation seconds per generated token over PO seconds per PO token, "
            "from the runs' own timings)"
            if cpu is not None
            else ""
        )
        + ". On GPUs decoding is memory-bound: published timings put generation at "
        + " and ".join(f"{100 * share:.0f}%" for _, share in S.GPU_SOURCES)
        + " of an RL step's wall time ("
        + "; ".join(src for src, _ in S.GPU_SOURCES)
        + "). When every generated "
        "token is also trained on, and responses make most of the PO tokens, a share s gives g ≈ s/(1 − s): "
        f"about {min(S.GPU_RATIO):.1f} to {max(S.GPU_RATIO):.0f}, the shaded band of the figure. The figure "
        "draws a saving below −100% (more than twice the cost, or never reaching the target) at −100%.",
        "",
    ]
    if "price_sweep" in figures:
        lines += ["![total-cost saving over GRPO against the price of a generated token](price_sweep.png)", ""]
    for ev, rows in zip(evs, prices, strict=True):
        lines += _price_lines(ev, rows)
    lines += [
        "## Verdicts at other targets",
        "",
        "The same claims at 90%, 95% and 98% of the lowest seed-mean peak (at the job's price); a saving that "
        "holds at only one target says so.",
        "",
    ]
    for ev, target_rows in zip(evs, targets, strict=True):
        lines += _target_lines(ev, target_rows)
    for section in TASK_SECTIONS:
        lines += section(results, logs)

    tuned = T.evaluate(evs, target_fraction=target_fraction)  # each swept arm at its own LR (none: nothing)
    for ev in evs:
        lines += _section_lines(ev, baseline)
        sid = _sid(ev.section)
        if sid in revs:
            lines += R.section_lines(revs[sid], preds[sid])
        elif sid in preds:  # the headline: the row level's prediction of p*'s edge over nonzero, beside the measured
            matched = next((c for c in ev.decomposition if c.effect is E.Effect.MATCHED_STEP), None)
            lines += [P.row_level_line(preds[sid], matched, ev.section), ""]
    lines += T.lines(tuned)
    lines += [
        "## Accuracy of the key arms",
        "",
        "GRPO, nonzero, the candidate and the best peer, with 95% bands over seeds (none below "
        f"{MIN_SEEDS_FOR_CI} seeds); the dotted line is the section's target accuracy. Each x-axis ends at the "
        f"longest curve or at {X_STRETCH:g}× the median curve's end, whichever is nearer, so that one long arm "
        "does not squeeze the rest"
        + (
            ". Cut here: " + escape("; ".join(sorted(set(cut["rounds"] + cut["total_cost"]))))
            if cut["rounds"] or cut["total_cost"]
            else ""
        )
        + ".",
        "",
    ]
    lines += [f"![accuracy vs {AXIS_TITLES[a]}]({FIGURES[a]})" + "\n" for a in ("total_cost", "rounds")]
    lines += ["## Appendix", "", "### Every arm", "", "![accuracy of every arm](accuracy_all_arms.png)", ""]
    lines += [
        f"![accuracy vs {AXIS_TITLES[a]}]({FIGURES[a]})" + "\n" for a in AXES if a not in ("total_cost", "rounds")
    ]
    lines += ["#" + line if line.startswith("## ") else line for line in _token_share_lines(results)]
    lines += ["#" + line if line.startswith("## ") else line for line in _fidelity_lines(results)]
    lines += SE.lines(results)
    if ablations:
        lines += ["### Ablations", "", "![ablations](ablations.png)", ""]
        lines += _ablation_lines(ablations + abl_ref, evs, generation_cost)
    if profile:
        lines += ["### Profile", "", code(json.dumps(profile, default=str)), ""]
    md = "\n".join(lines)
    summary = {
        "baseline": baseline.key,
        "candidate": candidate.key,
        "generation_cost": generation_cost,
        "verdict_rule": RULE,
        "min_seeds_for_ci": MIN_SEEDS_FOR_CI,
        "opening": [
            {
                "section": list(r.section),
                "claim": r.claim,
                "absent": r.absent or None,
                "saving": None if r.comparison is None else r.comparison.savings[E.HEADLINE_AXIS].as_dict(),
                "verdict": None if r.comparison is None else verdict(r.comparison.savings[E.HEADLINE_AXIS]).value,
            }
            for r in opening_rows
        ],
        "price": {
            "measured_ratio_cpu": cpu,
            "gpu_ratio_range": list(S.GPU_RATIO),
            "gpu_sources": [src for src, _ in S.GPU_SOURCES],
            "sweep": list(S.SWEEP),
        },
        "sections": [
            {
                **_summary(ev, revs.get(_sid(ev.section)), preds.get(_sid(ev.section))),
                "key_arms": [_key(k) for k in keys[_sid(ev.section)]],
                "prices": [
                    {"claim": r.claim, **{_g(g): s.as_dict() for g, s in zip(S.PRICES, r.savings, strict=True)}}
                    for r in pr
                ],
                "price_sweep": {
                    f"{k[0].key}@{k[1]:g}": [e.as_dict() for e in v]
                    for k, v in dict(next((c for e2, c in sweep if e2 is ev), {})).items()
                },
                "targets": [
                    {
                        "claim": r.claim,
                        "note": r.note,
                        **{
                            f"{f:g}": None if s is None else s.as_dict()
                            for f, s in zip(S.TARGET_FRACTIONS, r.savings, strict=True)
                        },
                    }
                    for r in tg
                ],
            }
            for ev, pr, tg in zip(evs, prices, targets, strict=True)
        ],
        **({"tuned_lr": T.summary(tuned)} if tuned else {}),
        **({"step_errors": errors} if (errors := SE.summary(results)) else {}),
        "command": command,
        "profile": profile,
        "sft": sft,
        "runs": [
            {"id": r.id.as_dict(), "arm": r.id.arm.key, "spec": r.spec, "wall_seconds": r.wall_seconds} for r in results
        ],
    }
    paths = {"markdown": out / "report.md", "html": out / "report.html", "summary": out / "summary.json"}
    paths["markdown"].write_text(md)
    paths["summary"].write_text(json.dumps(summary, indent=2, default=str))
    _write_html(md, figures, paths["html"], table(RUN_HEADER, _run_rows(results)))
    return {**paths, **figures}


def _sid(sec: E.Section) -> tuple[str, str]:
    return sec.task, sec.setting


def _summary(ev: E.Evidence, rev: R.RolloutEvidence | None, pred: P.Predictions | None) -> dict[str, Any]:
    sec = ev.section
    extra: dict[str, Any] = {}
    if rev is not None and pred is not None:
        extra["rollout"] = R.summary(rev, pred)
    elif pred is not None:
        extra["predicted"] = pred.as_dict()

    def comp(c: E.Comparison) -> dict[str, Any]:
        return {
            "name": c.name,
            "from": _key(c.a),
            "to": _key(c.b),
            **{a: s.as_dict() for a, s in c.savings.items()},
            "rounds_at": c.rounds_at,
            "accuracy_gap_at_equal_rounds": c.rounds_gap.as_dict() if c.rounds_gap else None,
        }

    return {
        "task": sec.task,
        "setting": sec.setting,
        "default_lr": sec.default_lr,
        "target": ev.target,
        "start": ev.start,
        "informative": ev.informative,
        "arms": {f"{a.key}@{lr:g}": st for (a, lr), st in _all_stats(ev).items()},
        "tuned": _key(ev.tuned) if ev.tuned else None,
        "tuned_note": ev.tuned_note,
        "best": _key(ev.best) if ev.best else None,
        "peaks": {f"{a.key}@{lr:g}": v for (a, lr), v in ev.peaks.items()},
        "decomposition": [comp(c) for c in ev.decomposition],
        "claims": [
            {
                "claim": n,
                **(comp(c) if c else {"absent": why}),
                "verdict": None if c is None else verdict(c.savings[E.HEADLINE_AXIS]).value,
            }
            for n, c, why in ev.claims
        ],
        "plateau": _plateau_dict(ev.plateau),
        "tuned_plateau": None if ev.tuned_plateau is None else _plateau_dict(ev.tuned_plateau),
        **extra,
    }


def _key(k: E.Key) -> list[Any]:
    """(arm, lr) as the summary's JSON writes it: [arm key, lr]."""
    return [k[0].key, k[1]]


def _plateau_dict(p: E.Plateau) -> dict[str, Any]:
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


STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:0 1em;line-height:1.4}"
    "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
    "#opening table td,#opening table th{font-size:15px;padding:4px 10px}"
    "h1{font-size:1.6em;margin:0.5em 0}details{margin:1em 0}summary{cursor:pointer;font-weight:bold}"
)


def _write_html(md: str, figures: dict[str, Path], path: Path, run_table: Sequence[str]) -> None:
    import markdown

    body = markdown.markdown(md, extensions=["tables"])
    for f in figures.values():  # inline every figure: the page is one self-contained file
        data = base64.b64encode(f.read_bytes()).decode()
        body = body.replace(f'src="{f.name}"', f'src="data:image/png;base64,{data}" style="max-width:100%"')
    # the opening table gets an id (the first table of the page); the run list folds under the specs line
    body = body.replace("<table>", "<div id='opening'><table>", 1).replace("</table>", "</table></div>", 1)
    runs = markdown.markdown("\n".join(run_table), extensions=["tables"])
    marker = markdown.markdown(SPECS_MARKER)
    body = body.replace(
        marker, marker + f"\n<details><summary>Every run, with its specification</summary>{runs}</details>", 1
    )
    path.write_text(
        f"<!doctype html><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
        f"<title>costaware reproduce</title><style>{STYLE}</style><body>{body}</body>"
    )
