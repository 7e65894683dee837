"""The report of `costaware reproduce`: accuracy against policy-optimisation tokens, method by method.

Pure functions for the metrics (tokens to reach a target, area under the curve, bootstrap CI) and
one writer that draws the figures and writes Markdown plus a self-contained HTML page.
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def tokens_to_reach(tokens: Any, accuracy: Any, target: float) -> float:
    """Tokens at which the curve first reaches ``target``, linearly interpolated; inf if it never does.

    >>> tokens_to_reach([0, 100, 200], [0.2, 0.4, 0.6], 0.5)
    150.0
    """
    x, y = np.asarray(tokens, float), np.asarray(accuracy, float)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"tokens and accuracy must be non-empty and equal in shape, got {x.shape}, {y.shape}")
    hit = np.flatnonzero(y >= target)
    if hit.size == 0:
        return float("inf")
    j = int(hit[0])
    if j == 0:
        return float(x[0])
    frac = (target - y[j - 1]) / (y[j] - y[j - 1])
    return float(x[j - 1] + frac * (x[j] - x[j - 1]))


def area_under_curve(tokens: Any, accuracy: Any, upto: float) -> float:
    """Mean accuracy over [0, upto] tokens (trapezoids; the curve is held flat past its last point).

    >>> area_under_curve([0, 100], [0.0, 1.0], 100)
    0.5
    """
    x, y = np.asarray(tokens, float), np.asarray(accuracy, float)
    if not upto > 0:
        raise ValueError(f"upto must be > 0, got {upto!r}")
    grid = np.linspace(0.0, upto, 512)
    vals = np.interp(grid, x, y)
    return float(np.sum((vals[1:] + vals[:-1]) / 2 * np.diff(grid)) / upto)


def bootstrap_ci(values: Any, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean across seeds (inf values propagate as 'not reached')."""
    v = np.asarray(values, float)
    if v.size == 0:
        raise ValueError("values must not be empty")
    if v.size == 1:
        return float(v[0]), float(v[0])
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _curve(run: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    ev = run["evals"]
    return np.array([e["tokens"] for e in ev], float), np.array([e["accuracy"] for e in ev], float)


def mean_curve(runs: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """The seed-mean curve: at each evaluation, mean tokens and mean accuracy over the runs.

    Runs of one method evaluate at the same steps; a shorter run (interrupted or smaller) truncates
    the curve to the evaluations every run has.
    """
    if not runs:
        raise ValueError("runs must not be empty")
    curves = [_curve(r) for r in runs]
    n = min(len(x) for x, _ in curves)
    return (np.mean([x[:n] for x, _ in curves], axis=0), np.mean([y[:n] for _, y in curves], axis=0))


def _quantiles(v: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    lo, hi = np.quantile(v, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")  # no inf - inf
    return float(lo), float(hi)


def bootstrap_curve_stats(
    runs: list[dict[str, Any]], targets: dict[str, float], *, n_boot: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Peak of the seed-mean curve and tokens for it to reach each target, with seed-bootstrap CIs.

    Resamples the seeds with replacement, rebuilds the mean curve and recomputes both statistics;
    a resample that never reaches a target counts as +inf tokens, so the CI says so.
    """
    x, y = mean_curve(runs)
    out: dict[str, Any] = {"peak": float(y.max()), "seeds": len(runs)}
    for name, t in targets.items():
        out[f"tokens_to_{name}"] = tokens_to_reach(x, y, t)
    if len(runs) == 1:
        out["peak_ci"] = (out["peak"], out["peak"])
        for name in targets:
            out[f"tokens_to_{name}_ci"] = (out[f"tokens_to_{name}"],) * 2
        return out
    rng = np.random.default_rng(seed)
    n = min(len(_curve(r)[0]) for r in runs)
    X = np.stack([_curve(r)[0][:n] for r in runs])
    Y = np.stack([_curve(r)[1][:n] for r in runs])
    picks = rng.integers(0, len(runs), size=(n_boot, len(runs)))
    bx, by = X[picks].mean(1), Y[picks].mean(1)  # (n_boot, n) resampled mean curves
    out["peak_ci"] = _quantiles(by.max(1))
    for name, t in targets.items():
        out[f"tokens_to_{name}_ci"] = _quantiles(np.array([tokens_to_reach(a, b, t) for a, b in zip(bx, by, strict=True)]))
    return out


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (setting, label): peak of the seed-mean curve, tokens to the GRPO peak (100/95/90 %), AUC.

    The target is the peak of the baseline's seed-mean curve (the paper's "best averaged checkpoint"),
    and each method's tokens are read off its own seed-mean curve: the mean of per-seed peaks would be
    a target that the baseline's own mean curve cannot reach.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["setting"] if r["spec"]["method"] != "sft" else "GRPO", r["label"])].append(r)
    summary: dict[str, Any] = {}
    for setting in sorted({s for s, _ in groups}):
        base = groups.get((setting, "GRPO"))
        if not base:
            continue
        base_curve = mean_curve(base)[1]
        base_peak = float(base_curve.max())
        upto = float(min(_curve(r)[0].max() for r in base))
        targets = {"100": base_peak, "95": 0.95 * base_peak, "90": 0.9 * base_peak}
        rows = {}
        for (s, label), runs in groups.items():
            if s != setting:
                continue
            row = bootstrap_curve_stats(runs, targets)
            aucs = [area_under_curve(*_curve(r), upto) for r in runs]
            row["auc"], row["auc_ci"] = float(np.mean(aucs)), bootstrap_ci(aucs)
            row["po_seconds"] = float(np.mean([r["po_seconds"] for r in runs]))
            row["tokens_final"] = float(np.mean([_curve(r)[0].max() for r in runs]))
            rows[label] = row
        b = rows["GRPO"]
        for row in rows.values():
            for frac in (100, 95, 90):
                t, tb = row[f"tokens_to_{frac}"], b[f"tokens_to_{frac}"]
                row[f"saving_{frac}"] = (1 - t / tb) if np.isfinite(t) and np.isfinite(tb) and tb > 0 else None
        summary[setting] = {"baseline_peak": base_peak, "auc_upto_tokens": upto, "methods": rows,
                            "baseline_peak_at_end": bool(np.argmax(base_curve) == base_curve.size - 1)}
    return summary


FIDELITY_KEYS = ("pearson", "chi2", "j_vs_uniform")


def fidelity_summary(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per setting and method: mean, min and max over training of Pearson(|A|, G), χ² and J(p*)/J(uniform).

    Each run's ``diagnostics`` hold the values the trainer measured on its own pools; runs without
    them (the SFT control) are left out.
    """
    acc: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in results:
        for d in r.get("diagnostics") or []:
            for key in FIDELITY_KEYS:
                if key in d and np.isfinite(d[key]):
                    acc[r["setting"]][r["label"]][key].append(float(d[key]))
    return {
        setting: {label: {key: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v)),
                                "n": len(v)} for key, v in per.items()}
                  for label, per in by_label.items()}
        for setting, by_label in acc.items()
    }


def _plot_fidelity(results: list[dict[str, Any]], path: Path) -> bool:
    """Pearson, χ² and J(p*)/J(uniform) against cumulative tokens, mean over seeds, headline runs only.

    Fifteen single-seed series are unreadable on one axis; the table of the report has every run.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in results if r.get("diagnostics") and r["spec"]["group"] == "headline"]
    if not runs:
        return False
    titles = {"pearson": "Pearson(|A|, ‖∇ℓ_i‖)", "chi2": "cost-biased χ²(p*_true ‖ p_|A|)",
              "j_vs_uniform": "J(p_|A|) / J(uniform)"}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by[f"{r['setting']}: {r['label']}"].append(r)
    for ax, key in zip(axes, FIDELITY_KEYS, strict=True):
        for name, rs in sorted(by.items()):
            by_step: dict[int, list[tuple[float, float]]] = defaultdict(list)
            for r in rs:
                for d in r["diagnostics"]:
                    if key in d and np.isfinite(d[key]):
                        by_step[d["step"]].append((d["tokens"], d[key]))
            if by_step:  # mean over seeds at each logged step
                xy = np.array([np.mean(by_step[st], axis=0) for st in sorted(by_step)])
                ax.plot(xy[:, 0], xy[:, 1], marker=".", label=f"{name} (n={len(rs)})")
        if key == "j_vs_uniform":
            ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_title(titles[key])
        ax.set_xlabel("cumulative policy-optimisation tokens")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot(results: list[dict[str, Any]], settings: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4.2), squeeze=False)
    for ax, setting in zip(axes[0], settings, strict=True):
        by_label: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in results:
            if r["setting"] == setting or (r["spec"]["method"] == "sft" and setting == "GRPO"):
                by_label[r["label"]].append(r)
        for label, runs in sorted(by_label.items()):
            xmax = min(_curve(r)[0].max() for r in runs)
            grid = np.linspace(0, xmax, 50)
            ys = np.stack([np.interp(grid, *_curve(r)) for r in runs])
            style = "--" if label == "SFT continuation" else "-"
            (line,) = ax.plot(grid, ys.mean(0), style, label=f"{label} (n={len(runs)})")
            if len(runs) > 1:
                ax.fill_between(grid, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.15)
        ax.set_title(f"{setting}: held-out mean@k")
        ax.set_xlabel("cumulative policy-optimisation tokens")
        ax.set_ylabel("accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _target_lines(setting_summary: dict[str, Any]) -> list[str]:
    """The issue's target, checked on the numbers above: p* reaches the GRPO peak with ≥25% fewer tokens."""
    row = setting_summary["methods"].get("p*")
    if row is None:
        return []
    caveat = []
    if setting_summary.get("baseline_peak_at_end"):
        caveat = ["GRPO's seed-mean curve peaks at its last evaluation: it was still improving when the token "
                  "budget ran out, so its peak is a lower bound on the plateau it would reach, and "
                  "the tokens to reach it say how much sooner a method gets as far as GRPO did.", ""]
    base = setting_summary["methods"]["GRPO"]
    saving = row["saving_100"]
    fewer = saving is not None and saving >= 0.25
    not_below = row["peak"] >= base["peak"]
    verdict = "met" if fewer and not_below else "**not met**"
    said = "not reached by every seed" if saving is None else f"{100 * saving:+.0f}%"
    return [f"Target (p* reaches the GRPO peak with ≥25% fewer tokens, and its peak is not below GRPO's): "
            f"{verdict}. Saving to the GRPO peak: {said}; peak {row['peak']:.3f} against {base['peak']:.3f}.", "",
            *caveat]


def _token_share_lines(results: list[dict[str, Any]]) -> list[str]:
    """Every step logs three token counts: the method's own, plain GRPO's on the same pools, nonzero rows only."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        if r.get("state"):
            by[(r["setting"], r["label"])].append(r)
    if not by:
        return []
    lines = ["## Tokens per run, on the run's own pools (mean over seeds)", "",
             "| setting | method | own tokens | plain GRPO on the same pools | nonzero rows only | own / plain | "
             "rows fed / drawn | skipped pools |", "|---|---|---|---|---|---|---|---|"]
    for (setting, label), rs in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1] != "GRPO", kv[0][1])):
        st = {k: float(np.mean([r["state"][k] for r in rs])) for k in
              ("tokens", "tokens_plain", "tokens_nonzero", "rows_fed", "rows_drawn", "skipped")}
        lines.append(f"| {setting} | {label} | {_fmt_tokens(st['tokens'])} | {_fmt_tokens(st['tokens_plain'])} | "
                     f"{_fmt_tokens(st['tokens_nonzero'])} | {st['tokens'] / st['tokens_plain']:.2f} | "
                     f"{st['rows_fed'] / max(st['rows_drawn'], 1):.2f} | {st['skipped']:.1f} |")
    return lines + [""]


def _run_lines(results: list[dict[str, Any]]) -> list[str]:
    """Every run with its exact specification, so that each number above can be traced to one."""
    lines = ["## Runs", "", "Each run's full result (evaluations, diagnostics, TRL log) is `runs/<file>.json`; "
             "the profile above plus the spec below is its whole configuration.", "",
             "| group | setting | method | seed | spec | wall s |", "|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r["spec"]["group"], r["setting"], r["label"], r["spec"]["seed"])):
        spec = {k: v for k, v in r["spec"].items() if k not in ("group", "seed")}
        if spec.get("loss_type") == "profile":  # resolved by the run itself
            spec["loss_type"] = r.get("loss_type", "profile")
        lines.append(f"| {r['spec']['group']} | {r['setting']} | {r['label']} | {r['spec']['seed']} | "
                     f"`{json.dumps(spec)}` | {r.get('wall_seconds', float('nan')):.0f} |")
    return lines + [""]


def _fmt_tokens(t: float) -> str:
    return "not reached" if not np.isfinite(t) else f"{t / 1e3:.1f}k"


def write_report(
    results: list[dict[str, Any]], out: Path, *, profile: dict[str, Any], sft: dict[str, Any], command: str
) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``summary.json`` and the figures into ``out``."""
    if not results:
        raise ValueError("results must not be empty: no run has finished")
    out = Path(out)
    summary = summarise(results)
    settings = [s for s in ("GRPO", "GRPO+ZVF", "CISPO") if s in summary]
    head = [r for r in results if r["spec"]["group"] in ("headline", "zvf", "cispo", "control")]
    abl = [r for r in results if r["spec"]["group"] == "ablation" or
           (r["spec"]["group"] == "headline" and r["spec"]["method"] in ("none", "p_star")
            and r["spec"]["seed"] in {a["spec"]["seed"] for a in results if a["spec"]["group"] == "ablation"})]
    figures = {"curves": out / "accuracy_vs_tokens.png"}
    _plot(head, settings, figures["curves"])
    if any(r["spec"]["group"] == "ablation" for r in results):
        figures["ablations"] = out / "ablations.png"
        _plot([{**r, "setting": "ablations"} for r in abl], ["ablations"], figures["ablations"])

    if _plot_fidelity(results, out / "proxy_fidelity.png"):
        figures["fidelity"] = out / "proxy_fidelity.png"
    fidelity = fidelity_summary(results)

    lines = ["# Cost-Aware GRPO against GRPO: accuracy against policy-optimisation tokens", ""]
    lines += [f"Command: `{command}`", "",
              f"Policy: tiny Qwen2 ({sft['parameters']:,} parameters) after SFT on demonstrations with injected "
              f"mistakes: greedy accuracy {sft['greedy_accuracy']:.3f}, sampled (T=1) {sft['sampled_accuracy']:.3f}.",
              "", "Profile: `" + json.dumps(profile) + "`", ""]
    labels = sorted({lab for st in settings for lab in summary[st]["methods"]}, key=lambda x: x != "GRPO")
    lines += ["## Best checkpoint accuracy (the paper's Table 1 form: peak of the seed-mean curve)", "",
              "| method | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
    for label in labels:
        cells = [f"{summary[st]['methods'][label]['peak']:.3f}" if label in summary[st]["methods"] else "–"
                 for st in settings]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for setting in settings:
        s = summary[setting]
        lines += [f"## {setting}", "",
                  f"Baseline (GRPO) peak of the seed-mean curve: **{s['baseline_peak']:.3f}**. "
                  f"AUC is the mean accuracy over the first {s['auc_upto_tokens'] / 1e3:.1f}k tokens.", "",
                  "| method | seeds | peak acc. [95% CI] | tokens to GRPO peak [95% CI] | saving | tokens to 95% | saving | "
                  "tokens to 90% | saving | AUC [95% CI] | PO wall s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, row in sorted(s["methods"].items(), key=lambda kv: kv[0] != "GRPO"):
            def sv(v):
                return "–" if v is None else f"{100 * v:+.0f}%"
            def tk(frac, row=row):
                lo, hi = row[f"tokens_to_{frac}_ci"]
                return f"{_fmt_tokens(row[f'tokens_to_{frac}'])} [{_fmt_tokens(lo)}, {_fmt_tokens(hi)}]"
            lines.append(
                f"| {label} | {row['seeds']} | {row['peak']:.3f} [{row['peak_ci'][0]:.3f}, {row['peak_ci'][1]:.3f}] | "
                f"{tk(100)} | {sv(row['saving_100'])} | {tk(95)} | {sv(row['saving_95'])} | "
                f"{tk(90)} | {sv(row['saving_90'])} | "
                f"{row['auc']:.3f} [{row['auc_ci'][0]:.3f}, {row['auc_ci'][1]:.3f}] | {row['po_seconds']:.0f} |")
        lines.append("")
        lines += _target_lines(s)
    lines += ["Savings are 1 − tokens(method)/tokens(GRPO) to reach the same accuracy; positive means fewer tokens. "
              "Peaks and tokens are read off each method's seed-mean curve; CIs resample the seeds "
              "(a CI bound 'not reached' means some resamples never reach the target). "
              "The SFT-continuation control's x-axis is SFT tokens.", "",
              "![accuracy vs tokens](accuracy_vs_tokens.png)", ""]
    lines += _token_share_lines(results)
    if fidelity:
        lines += ["## Proxy fidelity across training (paper Figure 3, G.8)", "",
                  "Measured by the trainer on a random subset of each pool: the exact per-sequence gradient norm "
                  "G_i of the loss as configured, against the proxy |A_i|. χ² is D_χ²(p̃*_true ‖ p̃_|A|) between "
                  "cost-biased distributions, so J(p_|A|)/J(p*_true) = 1 + χ² (Theorem 4.2); "
                  "J(p_|A|)/J(uniform) < 1 means sampling by |A|/√c is predicted to cost less than uniform "
                  "sampling for the same gradient variance. The figure draws the headline runs.", "",
                  "| setting | method | Pearson mean [min, max] | χ² mean [min, max] | J(p)/J(uniform) mean [min, max] |",
                  "|---|---|---|---|---|"]
        for setting, by_label in sorted(fidelity.items()):
            for label, vals in sorted(by_label.items(), key=lambda kv: kv[0] != "GRPO"):
                cells = [f"{vals[k]['mean']:.2f} [{vals[k]['min']:.2f}, {vals[k]['max']:.2f}]" if k in vals else "–"
                         for k in FIDELITY_KEYS]
                lines.append(f"| {setting} | {label} | " + " | ".join(cells) + " |")
        lines += ["", "![proxy fidelity](proxy_fidelity.png)", ""]
    if "ablations" in figures:
        lines += ["## Ablations (proxy noise, G ≡ 1, α)", "", "![ablations](ablations.png)", ""]
    lines += _run_lines(results)
    md = "\n".join(lines)
    paths = {"markdown": out / "report.md", "html": out / "report.html", "summary": out / "summary.json"}
    paths["markdown"].write_text(md)
    paths["summary"].write_text(json.dumps({"summary": summary, "profile": profile, "sft": sft, "command": command},
                                           indent=2, default=str))
    import markdown

    body = markdown.markdown(md, extensions=["tables"])
    for f in figures.values():  # inline every figure: the page is one self-contained file
        data = base64.b64encode(f.read_bytes()).decode()
        body = body.replace(f'src="{f.name}"', f'src="data:image/png;base64,{data}" style="max-width:100%"')
    style = ("body{font-family:sans-serif;max-width:1400px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}")
    paths["html"].write_text(f"<!doctype html><meta charset='utf-8'><title>costaware reproduce</title>"
                             f"<style>{style}</style><body>{body}</body>")
    return {**paths, **figures}
