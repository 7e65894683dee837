"""The report of `costaware reproduce`, built from :class:`~costaware.records.RunResult` records.

It opens with a computed answer (what a user gains on each axis, and from which effect), then per
task and setting: the method table, the decomposition table, the verdict lines and the plateau
check, each in total cost first (generated tokens × generation_cost + PO tokens), with PO tokens,
generated tokens and generation rounds beside it; a prompt-stage section (``report.rollout``) adds
the issue-20 target verdict and the predictions from the runs' per-prompt logs (``report.predicted``);
one figure per axis; token shares, proxy fidelity, ablations and the run list. The metrics are in
``report.curves`` and ``report.evidence``; this file only lays them out (Markdown, HTML, JSON).
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from costaware.arms import Arm
from costaware.records import RunId, RunResult
from costaware.report import evidence as E
from costaware.report import predicted as P
from costaware.report import rollout as R
from costaware.report.curves import (
    AXES,
    DEFAULT_GENERATION_COST,
    area_under_curve,
    axis_values,
    bootstrap_ci,
    first_crossing,
    first_crossings,
    seed_curves,
)
from costaware.report.figures import AXIS_TITLES, plot_ablations, plot_axis
from costaware.report.labels import label
from costaware.report.md import code, escape, table

__all__ = ["write_report", "arm_stats", "fidelity_summary", "tokens_to_reach", "area_under_curve", "bootstrap_ci",
           "FIGURES", "FIDELITY_KEYS"]

tokens_to_reach = first_crossing  # the one first-crossing helper, under its old name
FIGURES = {axis: f"accuracy_vs_{axis}.png" for axis in AXES}  # total_cost, po_tokens, generated_tokens, rounds
FIDELITY_KEYS = ("pearson", "chi2", "j_vs_uniform")


def _fmt(v: float, axis: str) -> str:
    if not np.isfinite(v):
        return "not reached"
    return f"{v:.0f}" if axis == "rounds" else f"{v / 1e3:.1f}k"


def arm_stats(runs: Sequence[RunResult], target: float, upto: float, *,
              generation_cost: float = DEFAULT_GENERATION_COST, n_boot: int = 2000) -> dict[str, Any]:
    """One arm's numbers: peak of the seed-mean curve, x to ``target`` on each axis, AUC, PO seconds; 95% CIs."""
    picks = np.random.default_rng(0).integers(0, len(runs), size=(n_boot, len(runs)))
    c = seed_curves(runs, "po_tokens", generation_cost=generation_cost)
    boot = c.boot_means(picks).max(1)
    out: dict[str, Any] = {"seeds": len(runs), "peak": float(c.mean.max()),
                           "peak_ci": [float(q) for q in np.quantile(boot, [0.025, 0.975])]}
    for axis in AXES:
        c = seed_curves(runs, axis, generation_cost=generation_cost)
        t = first_crossings(c.grid, c.boot_means(picks), target)
        out[f"{axis}_to_target"] = float(first_crossings(c.grid, c.mean, target))
        out[f"{axis}_to_target_ci"] = [float(q) for q in np.quantile(t, [0.025, 0.975], method="inverted_cdf")]
    aucs = [area_under_curve(axis_values(r, "po_tokens"), [e.heldout_accuracy for e in r.evals], upto) for r in runs]
    out["auc"], out["auc_ci"] = float(np.mean(aucs)), list(bootstrap_ci(aucs))
    out["po_seconds"] = float(np.mean([r.evals[-1].po_seconds for r in runs]))
    return out


def _to_target(st: dict[str, Any], axis: str) -> str:
    lo, hi = st[f"{axis}_to_target_ci"]
    return f"{_fmt(st[f'{axis}_to_target'], axis)} [{_fmt(lo, axis)}, {_fmt(hi, axis)}]"


def _arm_row(name: str, st: dict[str, Any]) -> list[str]:
    cells = [name, str(st["seeds"]), f"{st['peak']:.3f} [{st['peak_ci'][0]:.3f}, {st['peak_ci'][1]:.3f}]"]
    return cells + [_to_target(st, axis) for axis in AXES] + [f"{st['auc']:.3f} [{st['auc_ci'][0]:.3f}, {st['auc_ci'][1]:.3f}]", f"{st['po_seconds']:.1f}"]


def _proxy_sentence(sec: E.Section) -> str:
    """Which gradient-norm proxy 'p*' used here: 'auto' resolves by the section's loss (grpo.config)."""
    from costaware.grpo.config import resolve_proxy

    losses = {r.id.loss_type for runs in sec.arms.values() for r in runs if r.id.method == "p_star" and r.id.proxy == "auto"}
    if len(losses) != 1:
        return ""
    loss = losses.pop()
    proxy, beta = resolve_proxy("auto", None, loss_type=loss, method="p_star")
    what = ("the paper's |A|" if proxy == "advantage" else
            f"{proxy} (β fitted online from the prior {beta:g}; this loss sums token losses)")
    return f" Under loss {code(loss)}, {escape(label(Arm('p_star')))} uses proxy 'auto' = {escape(what)}."


def _upto(ev: E.Evidence) -> float:
    return float(min(r.evals[-1].po_tokens for r in ev.section.arms[ev.baseline]))


def _all_stats(ev: E.Evidence) -> dict[E.Key, dict[str, Any]]:
    return {k: arm_stats(runs, ev.target, _upto(ev), generation_cost=ev.generation_cost)
            for k, runs in ev.section.arms.items()}


def _section_lines(ev: E.Evidence, baseline: Arm) -> list[str]:
    sec = ev.section
    upto = _upto(ev)
    controlled = all(r.po_seconds_controlled for runs in sec.arms.values() for r in runs)
    clock = "PO wall s (controlled)" if controlled else "PO wall s (contended)"
    lines = [f"## {escape(sec.task)} / {escape(sec.setting)}", "",
             f"Common target: **{ev.target:.3f}** ({100 * ev.target_fraction:.0f}% of the lowest seed-mean peak "
             f"among the methods compared). AUC is the mean accuracy over the first {upto / 1e3:.1f}k PO tokens. "
             f"Total cost = generated tokens × {ev.generation_cost:.3g} + PO tokens." + _proxy_sentence(sec), ""]
    order = sorted(sec.arms, key=lambda k: (k[0] != baseline, k[0], k[1]))
    stats = _all_stats(ev)
    lines += table(["method", "seeds", "peak [95% CI]", *(f"{E.AXIS_WORDS[a]} to target" for a in AXES), "AUC", clock],
                   [_arm_row(sec.name(k), stats[k]) for k in order])
    if not controlled:
        # true on any machine: with --jobs 1 no other run shares the CPU, but nothing controlled it either
        lines += ["", "The PO wall-clock column was not measured under control (contended: other runs of the job "
                  "or other processes may have shared the CPU): it is not a measurement of the time saved; "
                  "`benchmarks/` holds the controlled one."]
    rows = []
    for c in ev.decomposition:
        cells = [f"{E._pct(s.value)} [{E._pct(s.lo)}, {E._pct(s.hi)}]" for s in (c.savings[a] for a in AXES)]
        g = c.rounds_gap
        cells.append("–" if g is None else f"{g.value:+.3f} [{g.lo:+.3f}, {g.hi:+.3f}] at round {c.rounds_at:.0f}")
        rows.append([f"{c.name}: {sec.name(c.a)} → {sec.name(c.b)}", *cells])
    if not ev.decomposition:
        why = ("the target is not above the starting accuracy" if not ev.informative
               else "no pair of the decomposition was run")
        rows.append([f"(not computed: {why})", *["–"] * (len(AXES) + 1)])
    lines += ["", "### Decomposition: saving to the common target, by effect", ""]
    lines += table(["step", *(f"{E.AXIS_WORDS[a]} [95% CI]" for a in AXES), "Δ accuracy at equal rounds [95% CI]"], rows)
    lines += ["", "Saving = 1 − x(later)/x(earlier) to reach the target on each method's seed-mean curve; positive "
              "means the later method needs less. Δ accuracy at equal rounds is the later method's seed-mean "
              "accuracy minus the earlier one's at the last generation round both reached: the comparison at "
              "equal rollouts. CIs resample the seeds (paired when both ran the same seeds). "
              f"Tuned baseline: {escape(sec.name(ev.tuned)) if ev.tuned else 'none'} ({escape(ev.tuned_note)}). "
              f"Best cost-aware method: {escape(sec.name(ev.best)) if ev.best else 'none'}"
              + (f" ({escape(ev.best_note)})." if ev.best_note else "."), "", "### Verdicts", ""]
    lines += [E.verdict_line(claim, comp, why, target=ev.target) for claim, comp, why in ev.claims]
    lines += ["", f"A claim is **yes** only when the {E.AXIS_WORDS[E.HEADLINE_AXIS]} CI lies above zero, **no** when below, and "
              "**not shown** otherwise.", "", ev.plateau.text(label(baseline)), ""]
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
        rows.append([task, label(arm), st["seeds"], f"{st['peak']:.3f} [{st['peak_ci'][0]:.3f}, {st['peak_ci'][1]:.3f}]",
                     _to_target(st, "total_cost"), _to_target(st, "po_tokens"),
                     f"{st['auc']:.3f} [{st['auc_ci'][0]:.3f}, {st['auc_ci'][1]:.3f}]"])
    lines = table(["task", "arm", "seeds", "peak [95% CI]", "total cost to the headline target",
                   "PO tokens to the headline target", "AUC [95% CI]"], rows)
    return lines + ["", "Ablation runs use the ablation seeds; GRPO and p* rows are the headline runs of those seeds. "
                    "The target is the task's headline target.", ""]


def fidelity_summary(results: Sequence[RunResult]) -> dict[str, dict[Arm, dict[str, dict[str, float]]]]:
    """Per 'task/setting' and arm: mean, min, max over training of Pearson(|A|, G), χ² and J(p)/J(uniform)."""
    acc: dict[str, dict[Arm, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in results:
        for d in r.fidelity:
            for key in FIDELITY_KEYS:
                v = getattr(d, key)
                if v is not None:
                    acc[f"{r.id.task}/{r.id.setting}"][r.id.arm][key].append(float(v))
    return {s: {arm: {k: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v)), "n": len(v)}
                      for k, v in per.items()} for arm, per in by_arm.items()} for s, by_arm in acc.items()}


def _fidelity_lines(results: Sequence[RunResult]) -> list[str]:
    fid = fidelity_summary(results)
    if not fid:
        return []
    lines = ["## Proxy fidelity across training (paper Figure 3, G.8)", "",
             escape("Measured by the trainer on a random subset of each pool: the exact per-sequence gradient norm "
                    "G_i against the proxy |A_i|. J(p_|A|)/J(p*_true) = 1 + χ² (Theorem 4.2); J(p_|A|)/J(uniform) "
                    "< 1 means sampling by |A|/√c is predicted to cost less than uniform sampling."), ""]
    rows = []
    for s, by_arm in sorted(fid.items()):
        for arm, vals in sorted(by_arm.items()):
            rows.append([s, label(arm)] + [f"{vals[k]['mean']:.2f} [{vals[k]['min']:.2f}, {vals[k]['max']:.2f}]"
                                           if k in vals else "–" for k in FIDELITY_KEYS])
    lines += table(["task/setting", "method", "Pearson mean [min, max]", "χ² mean [min, max]",
                    "J(p)/J(uniform) mean [min, max]"], rows)
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
        rows.append([f"{task}/{setting}", label(arm), f"{lr:g}", f"{own / 1e3:.1f}k", f"{plain / 1e3:.1f}k",
                     f"{nz / 1e3:.1f}k", f"{own / plain:.2f}", f"{rounds:.0f}", f"{wall:.0f}", f"{po:.0f}"])
    lines = ["## Tokens per run, on the run's own pools (mean over seeds)", ""]
    lines += table(["task/setting", "method", "lr", "own PO tokens", "plain GRPO on the same pools",
                    "nonzero rows only", "own / plain", "generation rounds", "run wall s (median)",
                    f"PO s (median, {clock})"], rows)
    return lines + ["", *_generation_share_line([r for rs in by.values() for r in rs])]


def _generation_share_line(runs: Sequence[RunResult]) -> list[str]:
    """Generation's share of the runs' wall time (training rounds and evaluations), from the runs that record it."""
    timed = [r for r in runs if r.generation_seconds is not None and r.eval_seconds is not None and r.wall_seconds > 0]
    if not timed:
        return []
    wall = sum(r.wall_seconds for r in timed)
    gen, ev = sum(r.generation_seconds for r in timed) / wall, sum(r.eval_seconds for r in timed) / wall
    return [f"Generation's share of the run wall time ({len(timed)} runs, {wall:.0f} s): {100 * gen:.0f}% in the "
            f"training rounds' generation, {100 * ev:.0f}% in evaluations (sampling the held-out and validation sets), "
            f"{100 * (1 - gen - ev):.0f}% the rest (policy optimisation, log-prob passes, setup).", ""]


def _run_lines(results: Sequence[RunResult]) -> list[str]:
    rows = [[i.group, i.task, i.setting, label(i.arm), f"{i.learning_rate:g}", i.seed, i.loss_type,
             code(json.dumps(r.spec, sort_keys=True)), f"{r.wall_seconds:.0f}"]
            for i, r in sorted(((r.id, r) for r in results), key=lambda ir: (
                ir[0].group, ir[0].task, ir[0].setting, ir[0].arm, ir[0].learning_rate, ir[0].seed))]
    return ["## Runs", ""] + table(["group", "task", "setting", "method", "lr", "seed", "loss", "spec", "wall s"],
                                   rows) + [""]


def _cost_sentence(cost: float) -> str:
    return (f"Total cost counts one generated token as {cost:.3g} of a policy-optimisation token. "
            + ("The default, 1/3, assumes batched, compute-bound decoding: a decoded token costs ~2N FLOPs and a "
               "trained token's forward+backward ~6N. Decoding is usually memory-bound, so per token it costs "
               "more than that in wall-clock; a larger ratio moves the total-cost axis toward the rounds axis."
               if cost == DEFAULT_GENERATION_COST else "The ratio was set by the profile."))


def write_report(results: Sequence[RunResult], out: Path, *, command: str, profile: dict[str, Any] | None = None,
                 sft: dict[str, Any] | None = None, baseline: str | Arm = "none", candidate: str | Arm = "p_star",
                 generation_cost: float = DEFAULT_GENERATION_COST, target_fraction: float = 0.95,
                 notice: str | None = None, logs: Mapping[RunId, Path] | None = None) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``summary.json`` and the figures into ``out``; return their paths.

    ``notice``: a paragraph shown in bold above everything else (e.g. that a smoke profile's figures mean nothing).
    ``logs``: each run's per-prompt log (``runs/<run file stem>.prompts.jsonl``), by its ``RunId``; a run without
    one, or a path that does not exist, is said to have none. The predictions beside the measured savings
    (``report.predicted``) come from these.
    """
    if logs is not None and not isinstance(logs, Mapping):
        raise TypeError(f"logs must be a mapping from RunId to a log path, got {type(logs).__name__}")
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
    revs = {_sid(s): R.evaluate_rollout(s, baseline, target_fraction=target_fraction, generation_cost=generation_cost)
            for s in secs if R.is_rollout(s)}
    evs = [revs[_sid(s)].evidence if _sid(s) in revs else E.evaluate_section(
        s, baseline, candidate=candidate, target_fraction=target_fraction, generation_cost=generation_cost) for s in secs]
    preds = {_sid(s): P.predict(s, logs, generation_cost) for s in secs if _sid(s) in revs or s.setting == "grpo"}
    sft_runs = [r for r in results if r.id.method == "sft"]
    figures = {axis: out / name for axis, name in FIGURES.items()}
    for axis, path in figures.items():
        plot_axis(evs, axis, path, sft_runs)
    ablations = [r for r in results if r.id.group == "ablation"]
    abl_ref = [r for r in results if r.id.group == "headline" and r.id.arm in (baseline, candidate)
               and (r.id.task, r.id.seed) in {(a.id.task, a.id.seed) for a in ablations}]  # same seeds, for reference
    if ablations:
        figures["ablations"] = out / "ablations.png"
        plot_ablations(ablations + abl_ref, figures["ablations"])

    lines = ["# Cost-aware GRPO against GRPO: what a user gains, and from which effect", ""]
    lines += [f"**{notice}**", ""] if notice else []
    lines += [(R.answer(revs[_sid(ev.section)], baseline) if _sid(ev.section) in revs
               else E.answer_paragraph(ev, baseline, candidate)) + "\n" for ev in evs]
    lines += [f"Command: {code(command)}", ""]
    if sft:
        lines += [f"Policy: {sft.get('parameters', 0):,} parameters after SFT: greedy accuracy "
                  f"{sft.get('greedy_accuracy', float('nan')):.3f}, sampled {sft.get('sampled_accuracy', float('nan')):.3f}.", ""]
    if profile:
        lines += [f"Profile: {code(json.dumps(profile, default=str))}", ""]
    lines += [_cost_sentence(generation_cost), ""]
    for ev in evs:
        lines += _section_lines(ev, baseline)
        sid = _sid(ev.section)
        if sid in revs:
            lines += R.section_lines(revs[sid], preds[sid])
        elif sid in preds:  # the headline: the row level's prediction of p*'s edge over nonzero, beside the measured
            matched = next((c for c in ev.decomposition if c.effect is E.Effect.MATCHED_STEP), None)
            lines += [P.row_level_line(preds[sid], matched, ev.section), ""]
    lines += ["## Accuracy against each axis", ""]
    lines += [f"![accuracy vs {AXIS_TITLES[a]}]({FIGURES[a]})" + "\n" for a in AXES]
    lines += _token_share_lines(results)
    lines += _fidelity_lines(results)
    if ablations:
        lines += ["## Ablations", "", "![ablations](ablations.png)", ""]
        lines += _ablation_lines(ablations + abl_ref, evs, generation_cost)
    lines += _run_lines(results)
    md = "\n".join(lines)
    summary = {"baseline": baseline.key, "candidate": candidate.key, "generation_cost": generation_cost,
               "sections": [_summary(ev, revs.get(_sid(ev.section)), preds.get(_sid(ev.section))) for ev in evs], "command": command, "profile": profile, "sft": sft}
    paths = {"markdown": out / "report.md", "html": out / "report.html", "summary": out / "summary.json"}
    paths["markdown"].write_text(md)
    paths["summary"].write_text(json.dumps(summary, indent=2, default=str))
    _write_html(md, figures, paths["html"])
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
        return {"name": c.name, "from": _key(c.a), "to": _key(c.b), **{a: s.as_dict() for a, s in c.savings.items()},
                "rounds_at": c.rounds_at, "accuracy_gap_at_equal_rounds": c.rounds_gap.as_dict() if c.rounds_gap else None}

    return {"task": sec.task, "setting": sec.setting, "default_lr": sec.default_lr, "target": ev.target,
            "start": ev.start, "informative": ev.informative,
            "arms": {f"{a.key}@{lr:g}": st for (a, lr), st in _all_stats(ev).items()},
            "tuned": _key(ev.tuned) if ev.tuned else None, "tuned_note": ev.tuned_note,
            "best": _key(ev.best) if ev.best else None, "peaks": {f"{a.key}@{lr:g}": v for (a, lr), v in ev.peaks.items()},
            "decomposition": [comp(c) for c in ev.decomposition],
            "claims": [{"claim": n, **(comp(c) if c else {"absent": why})} for n, c, why in ev.claims],
            "plateau": _plateau_dict(ev.plateau),
            "tuned_plateau": None if ev.tuned_plateau is None else _plateau_dict(ev.tuned_plateau), **extra}


def _key(k: E.Key) -> list[Any]:
    """(arm, lr) as the summary's JSON writes it: [arm key, lr]."""
    return [k[0].key, k[1]]


def _plateau_dict(p: E.Plateau) -> dict[str, Any]:
    return {"plateaued": p.plateaued, "learning": p.learning, "start": p.start, "peak": p.peak, "peak_index": p.peak_index, "n_points": p.n_points, "peak_late": p.peak_late,
            "rise": p.rise.as_dict()}


def _write_html(md: str, figures: dict[str, Path], path: Path) -> None:
    import markdown

    body = markdown.markdown(md, extensions=["tables"])
    for f in figures.values():  # inline every figure: the page is one self-contained file
        data = base64.b64encode(f.read_bytes()).decode()
        body = body.replace(f'src="{f.name}"', f'src="data:image/png;base64,{data}" style="max-width:100%"')
    style = ("body{font-family:sans-serif;max-width:1400px;margin:auto;padding:0 1em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}")
    path.write_text(f"<!doctype html><meta charset='utf-8'><title>costaware reproduce</title>"
                    f"<style>{style}</style><body>{body}</body>")
