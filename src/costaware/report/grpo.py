"""The report of `costaware reproduce`, built from :class:`~costaware.experiments.records.RunResult` records.

:func:`write_report` runs a pipeline of small stages, each reading only what the one before returned:

1. compute (``report.claims``, ``report.run_tables``): every number the report states, into frozen records:
   per section the evidence (``report.evidence``; a prompt-stage section through ``report.rollout``), the
   arms' statistics (``report.arm_stats``), the verdicts at other prices and targets (``report.sweeps``),
   the predictions from the per-prompt logs (``report.predicted``); the opening table's rows
   (``report.opening``); what ran, the tokens per run, the proxy's fidelity and the ablations;
2. draw (``report.draw``): the figures, into the report's folder;
3. write Markdown (``report.markdown_report``, from ``markdown_front``, ``markdown_sweeps``,
   ``markdown_sections``, ``markdown_appendix``): named parts that join into ``report.md``;
4. render HTML (``report.html_page``): the parts through a Jinja2 template, every figure inlined;
5. ``summary.json`` (``report.summary_json``): the same numbers as JSON.

The report opens with one table of the headline claims and a few sentences generated from the same comparisons,
the verdict rule (``report.verdicts``), the cost to target per arm and the decomposition as figures, and a short
table of what ran. Then the verdicts at other prices of a generated token and at other targets, the task
sections (:data:`TASK_SECTIONS`), and per task and setting: the method table, the decomposition, the verdict
lines and the plateau check, each in total cost first (generated tokens × generation_cost + PO tokens); a
prompt-stage section adds its target's verdict and the predictions from the runs' per-prompt logs. The accuracy
curves of the key arms follow; the appendix holds every arm's curves, token shares, proxy fidelity, ablations
and the run list (the run specifications are in ``summary.json`` and a collapsed block of the HTML).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costaware._checks import generation_cost as check_generation_cost
from costaware.experiments.arms import Arm
from costaware.experiments.records import RunId, RunResult
from costaware.report.arm_stats import ArmStats, arm_stats
from costaware.report.claims import compute_claims, key_arms
from costaware.report.curves import DEFAULT_GENERATION_COST, area_under_curve, bootstrap_ci, first_crossing
from costaware.report.draw import FIGURES, draw_figures
from costaware.report.evidence import as_arm
from costaware.report.html_page import render_html
from costaware.report.markdown_front import run_list_markdown
from costaware.report.markdown_report import TASK_SECTIONS, ReportContext, markdown_parts, markdown_text
from costaware.report.run_tables import FIDELITY_KEYS, compute_run_tables, fidelity_summary
from costaware.report.summary_json import summary

__all__ = [
    "write_report",
    "arm_stats",
    "ArmStats",
    "fidelity_summary",
    "key_arms",
    "tokens_to_reach",
    "area_under_curve",
    "bootstrap_ci",
    "FIGURES",
    "FIDELITY_KEYS",
    "TASK_SECTIONS",
]

tokens_to_reach = first_crossing  # the one first-crossing helper, under its old name


def _checked_results(results: Sequence[RunResult], logs: Mapping[RunId, Path] | None) -> tuple[RunResult, ...]:
    if logs is not None and not isinstance(logs, Mapping):
        raise TypeError(f"logs must be a mapping from RunId to a log path, got {type(logs).__name__}")
    if not results:
        raise ValueError("results must not be empty: no run has finished")
    bad = [r for r in results if not isinstance(r, RunResult)]
    if bad:
        raise ValueError(f"results must be RunResult records, got {type(bad[0]).__name__}")
    return tuple(results)


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
    check_generation_cost(generation_cost)  # before any folder or figure: 1e308 a token overflows the plots
    runs = _checked_results(results, logs)
    baseline_arm, candidate_arm = as_arm(baseline, "baseline"), as_arm(candidate, "candidate")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    claims = compute_claims(
        runs,
        baseline=baseline_arm,
        candidate=candidate_arm,
        generation_cost=generation_cost,
        target_fraction=target_fraction,
        logs=logs,
    )
    tables = compute_run_tables(runs, claims)
    figures = draw_figures(claims, runs, tables.ablations, out)
    context = ReportContext(runs, command, profile, sft, notice, logs)
    parts = markdown_parts(claims, tables, figures, context)
    paths = {"markdown": out / "report.md", "html": out / "report.html", "summary": out / "summary.json"}
    paths["markdown"].write_text(markdown_text(parts))
    document = summary(claims, runs, command=command, profile=profile, sft=sft)
    paths["summary"].write_text(json.dumps(document, indent=2, default=str))
    paths["html"].write_text(render_html(parts, figures, run_list_markdown(runs)))
    return {**paths, **figures.paths}
