"""The Markdown of the report's end: the accuracy of the key arms, then the appendix (every arm's curves, the tokens
each run fed, the proxy's fidelity, the ablations and the profile).

Every number is read from :class:`~costaware.report.run_tables.RunTables`; nothing is computed here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from costaware.report.curves import AXES, MIN_SEEDS_FOR_CI
from costaware.report.draw import FIGURES, ReportFigures
from costaware.report.figures import AXIS_TITLES, X_STRETCH
from costaware.report.labels import label
from costaware.report.markdown_sections import auc_cell, peak_cell, to_target_cell
from costaware.report.md import code, escape, table
from costaware.report.run_tables import FIDELITY_KEYS, Ablations, FidelitySummary, GenerationShare, TokenShares

__all__ = ["key_arms_markdown", "appendix_markdown", "generation_share_lines"]

_FIRST_AXES = ("total_cost", "rounds")  # the key arms' figures; the other axes are in the appendix


def key_arms_markdown(figures: ReportFigures) -> list[str]:
    """The accuracy of the key arms on total cost and rounds, and which long curves the x-axes cut."""
    cut = sorted(set(list(figures.cut["rounds"]) + list(figures.cut["total_cost"])))
    lines = [
        "## Accuracy of the key arms",
        "",
        "GRPO, nonzero, the candidate and the best peer, with 95% bands over seeds (none below "
        f"{MIN_SEEDS_FOR_CI} seeds); the dotted line is the section's target accuracy. Each x-axis ends at the "
        f"longest curve or at {X_STRETCH:g}× the median curve's end, whichever is nearer, so that one long arm "
        "does not squeeze the rest" + (". Cut here: " + escape("; ".join(cut)) if cut else "") + ".",
        "",
    ]
    return lines + [f"![accuracy vs {AXIS_TITLES[a]}]({FIGURES[a]})" + "\n" for a in _FIRST_AXES]


def generation_share_lines(share: GenerationShare | None) -> list[str]:
    """Generation's share of the runs' wall time (training rounds and evaluations), where the runs record it."""
    if share is None:
        return []
    gen, evaluation = share.generation, share.evaluation
    return [
        f"Generation's share of the run wall time ({share.runs} runs, {share.wall_seconds:.0f} s): {100 * gen:.0f}% "
        f"in the training rounds' generation, {100 * evaluation:.0f}% in evaluations (sampling the held-out and "
        f"validation sets), {100 * (1 - gen - evaluation):.0f}% the rest (policy optimisation, log-prob passes, "
        "setup).",
        "",
    ]


def _token_share_lines(shares: TokenShares) -> list[str]:
    """The method's own PO tokens against plain GRPO's and the nonzero rows' on the same pools."""
    rows = [
        [
            f"{r.task}/{r.setting}",
            label(r.arm),
            f"{r.learning_rate:g}",
            f"{r.own_po_tokens / 1e3:.1f}k",
            f"{r.plain_po_tokens / 1e3:.1f}k",
            f"{r.nonzero_po_tokens / 1e3:.1f}k",
            f"{r.own_po_tokens / r.plain_po_tokens:.2f}",
            f"{r.rounds:.0f}",
            f"{r.wall_seconds:.0f}",
            f"{r.po_seconds:.0f}",
        ]
        for r in shares.rows
    ]
    header = ["task/setting", "method", "lr", "own PO tokens", "plain GRPO on the same pools", "nonzero rows only"]
    header += ["own / plain", "generation rounds", "run wall s (median)"]
    header.append(f"PO s (median, {'controlled' if shares.controlled else 'contended'})")
    lines = ["### Tokens per run, on the run's own pools (mean over seeds)", ""] + table(header, rows)
    return lines + ["", *generation_share_lines(shares.generation)]


def _fidelity_lines(fidelity: FidelitySummary) -> list[str]:
    lines = [
        "### Proxy fidelity across training (paper Figure 3, G.8)",
        "",
        escape(
            "Measured by the trainer on a random subset of each pool: the exact per-sequence gradient norm "
            "G_i against the proxy |A_i|. J(p_|A|)/J(p*_true) = 1 + χ² (Theorem 4.2); J(p_|A|)/J(uniform) "
            "< 1 means sampling by |A|/√c is predicted to cost less than uniform sampling."
        ),
        "",
    ]
    rows = []
    for s, by_arm in sorted(fidelity.items()):
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


def _ablation_lines(ablations: Ablations) -> list[str]:
    """Each ablation arm (and GRPO and p* on the same seeds, for reference) against its task's headline target."""
    lines = ["### Ablations", "", "![ablations](ablations.png)", ""]
    if not ablations.rows:
        return lines
    rows = [
        [
            r.task,
            label(r.arm),
            r.stats.seeds,
            peak_cell(r.stats),
            to_target_cell(r.stats, "total_cost"),
            to_target_cell(r.stats, "po_tokens"),
            auc_cell(r.stats),
        ]
        for r in ablations.rows
    ]
    header = ["task", "arm", "seeds", "peak [95% CI]", "total cost to the headline target"]
    lines += table(header + ["PO tokens to the headline target", "AUC [95% CI]"], rows)
    return lines + [
        "",
        "Ablation runs use the ablation seeds; GRPO and p* rows are the headline runs of those seeds. "
        "The target is the task's headline target.",
        "",
    ]


def appendix_markdown(
    token_shares: TokenShares | None,
    fidelity: FidelitySummary,
    ablations: Ablations | None,
    profile: Mapping[str, Any] | None,
) -> list[str]:
    """Every arm's curves, the tokens per run, the proxy's fidelity, the ablations, the profile."""
    lines = ["## Appendix", "", "### Every arm", "", "![accuracy of every arm](accuracy_all_arms.png)", ""]
    lines += [f"![accuracy vs {AXIS_TITLES[a]}]({FIGURES[a]})" + "\n" for a in AXES if a not in _FIRST_AXES]
    lines += _token_share_lines(token_shares) if token_shares is not None else []
    lines += _fidelity_lines(fidelity) if fidelity else []
    lines += _ablation_lines(ablations) if ablations is not None else []
    if profile:
        lines += ["### Profile", "", code(json.dumps(profile, default=str)), ""]
    return lines
