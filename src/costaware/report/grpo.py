"""The report of `costaware reproduce`: accuracy against policy-optimisation tokens, method by method.

Pure functions for the metrics (tokens to reach a target, area under the curve, bootstrap CI) and
one writer that draws the figures and writes Markdown plus a self-contained HTML page.
"""

from __future__ import annotations

import base64
import html
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


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (setting, label): peak accuracy, tokens to reach the setting's GRPO peak (100/95/90 %), AUC."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["setting"] if r["spec"]["method"] != "sft" else "GRPO", r["label"])].append(r)
    summary: dict[str, Any] = {}
    for setting in sorted({s for s, _ in groups}):
        base = groups.get((setting, "GRPO"))
        if not base:
            continue
        base_peak = float(np.mean([_curve(r)[1].max() for r in base]))
        upto = float(min(_curve(r)[0].max() for r in base))
        rows = {}
        for (s, label), runs in groups.items():
            if s != setting:
                continue
            peaks = [float(_curve(r)[1].max()) for r in runs]
            row: dict[str, Any] = {"seeds": len(runs), "peak": float(np.mean(peaks)), "peak_ci": bootstrap_ci(peaks)}
            for frac in (1.0, 0.95, 0.9):
                t = [tokens_to_reach(*_curve(r), frac * base_peak) for r in runs]
                reached = [x for x in t if np.isfinite(x)]
                row[f"tokens_to_{int(frac * 100)}"] = float(np.mean(reached)) if len(reached) == len(t) else float("inf")
                row[f"tokens_to_{int(frac * 100)}_ci"] = bootstrap_ci(t) if len(reached) == len(t) else None
                row[f"reached_{int(frac * 100)}"] = f"{len(reached)}/{len(t)}"
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
        summary[setting] = {"baseline_peak": base_peak, "auc_upto_tokens": upto, "methods": rows}
    return summary


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

    lines = ["# Cost-Aware GRPO against GRPO: accuracy against policy-optimisation tokens", ""]
    lines += [f"Command: `{command}`", "",
              f"Policy: tiny Qwen2 ({sft['parameters']:,} parameters) after SFT on demonstrations with injected "
              f"mistakes: greedy accuracy {sft['greedy_accuracy']:.3f}, sampled (T=1) {sft['sampled_accuracy']:.3f}.",
              "", "Profile: `" + json.dumps(profile) + "`", ""]
    labels = sorted({lab for st in settings for lab in summary[st]["methods"]}, key=lambda x: x != "GRPO")
    lines += ["## Best checkpoint accuracy (the paper's Table 1 form; mean over seeds)", "",
              "| method | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
    for label in labels:
        cells = [f"{summary[st]['methods'][label]['peak']:.3f}" if label in summary[st]["methods"] else "–"
                 for st in settings]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for setting in settings:
        s = summary[setting]
        lines += [f"## {setting}", "",
                  f"Baseline (GRPO) peak accuracy, mean over seeds: **{s['baseline_peak']:.3f}**. "
                  f"AUC is the mean accuracy over the first {s['auc_upto_tokens'] / 1e3:.1f}k tokens.", "",
                  "| method | seeds | peak acc. [95% CI] | tokens to GRPO peak | saving | tokens to 95% | saving | "
                  "tokens to 90% | saving | AUC [95% CI] | PO wall s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, row in sorted(s["methods"].items(), key=lambda kv: kv[0] != "GRPO"):
            def sv(v):
                return "–" if v is None else f"{100 * v:+.0f}%"
            lines.append(
                f"| {label} | {row['seeds']} | {row['peak']:.3f} [{row['peak_ci'][0]:.3f}, {row['peak_ci'][1]:.3f}] | "
                f"{_fmt_tokens(row['tokens_to_100'])} ({row['reached_100']}) | {sv(row['saving_100'])} | "
                f"{_fmt_tokens(row['tokens_to_95'])} | {sv(row['saving_95'])} | "
                f"{_fmt_tokens(row['tokens_to_90'])} | {sv(row['saving_90'])} | "
                f"{row['auc']:.3f} [{row['auc_ci'][0]:.3f}, {row['auc_ci'][1]:.3f}] | {row['po_seconds']:.0f} |")
        lines.append("")
    lines += ["Savings are 1 − tokens(method)/tokens(GRPO) to reach the same accuracy; positive means fewer tokens. "
              "`(k/n)`: seeds that reached the target (a mean is given only when all did). "
              "The SFT-continuation control's x-axis is SFT tokens.", "",
              "Proxy-fidelity curves (Pearson of |A| against true per-sequence gradient norms, cost-biased χ²) "
              "are not part of this report yet: the trainer does not compute the diagnostics.", "",
              "![accuracy vs tokens](accuracy_vs_tokens.png)", ""]
    if "ablations" in figures:
        lines += ["## Ablations (proxy noise, G ≡ 1, α)", "", "![ablations](ablations.png)", ""]
    md = "\n".join(lines)
    paths = {"markdown": out / "report.md", "html": out / "report.html", "summary": out / "summary.json"}
    paths["markdown"].write_text(md)
    paths["summary"].write_text(json.dumps({"summary": summary, "profile": profile, "sft": sft, "command": command},
                                           indent=2, default=str))
    body = html.escape(md).replace("\n", "<br>\n")
    for name, f in figures.items():
        data = base64.b64encode(f.read_bytes()).decode()
        body = body.replace(html.escape(f"![{'accuracy vs tokens' if name == 'curves' else name}]({f.name})"),
                            f'<img alt="{name}" src="data:image/png;base64,{data}">')
    paths["html"].write_text(f"<!doctype html><meta charset='utf-8'><title>costaware reproduce</title>"
                             f"<body style='font-family:sans-serif;max-width:1400px'>{body}</body>")
    return {**paths, **figures}
