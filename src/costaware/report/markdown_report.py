"""The report's third stage: the Markdown, as named parts in reading order.

The parts join into ``report.md`` (:func:`markdown_text`); the HTML page (``report.html_page``) renders each part
and places it by name: the opening table in its own block, the run list folded under what ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costaware.experiments.records import RunId, RunResult
from costaware.report.claims import ReportClaims
from costaware.report.cost_structure import runs_cost_structure_section
from costaware.report.draw import ReportFigures
from costaware.report.markdown_appendix import appendix_markdown, key_arms_markdown
from costaware.report.markdown_front import (
    advice_markdown,
    command_markdown,
    opening_table_markdown,
    opening_text_markdown,
    title_markdown,
    what_ran_markdown,
)
from costaware.report.markdown_sections import section_markdown
from costaware.report.markdown_sweeps import price_markdown, target_markdown
from costaware.report.run_tables import RunTables
from costaware.report.step_errors import lines as step_error_lines
from costaware.report.tuned import lines as tuned_lines

__all__ = [
    "OPENING_TABLE",
    "WHAT_RAN",
    "TASK_SECTIONS",
    "MarkdownPart",
    "ReportContext",
    "markdown_parts",
    "markdown_text",
]

OPENING_TABLE, WHAT_RAN = "opening_table", "what_ran"  # the parts the HTML page places by name

# The task sections: each takes the runs and their per-prompt logs and returns Markdown lines (or none); the
# first says, per task, whether p* can choose between the responses of one group (their costs differ).
TASK_SECTIONS: list[Callable[[Sequence[RunResult], Mapping[RunId, Path] | None], list[str]]] = [
    runs_cost_structure_section,
]


@dataclass(frozen=True)
class MarkdownPart:
    """A run of whole Markdown blocks (it ends at a blank line), named for the HTML page."""

    name: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class ReportContext:
    """What the report states as it was given: the runs, the command, the profile, the policy and a notice."""

    results: tuple[RunResult, ...]
    command: str
    profile: Mapping[str, Any] | None = None
    sft: Mapping[str, Any] | None = None
    notice: str | None = None
    logs: Mapping[RunId, Path] | None = None


def _task_sections(context: ReportContext) -> list[str]:
    return [line for section in TASK_SECTIONS for line in section(context.results, context.logs)]


def markdown_parts(
    claims: ReportClaims, tables: RunTables, figures: ReportFigures, context: ReportContext
) -> tuple[MarkdownPart, ...]:
    """The report's Markdown in reading order: the front, the verdicts at other prices and targets, the task
    sections, each section, the key arms' accuracy and the appendix."""
    parts = [
        ("title", title_markdown(context.notice)),
        ("advice", advice_markdown(claims)),
        (OPENING_TABLE, opening_table_markdown(claims)),
        ("opening_text", opening_text_markdown(claims, with_waterfall="waterfall" in figures.paths)),
        (WHAT_RAN, what_ran_markdown(tables.what_ran)),
        ("command", command_markdown(context.command, context.sft)),
        ("prices", price_markdown(claims, with_figure="price_sweep" in figures.paths)),
        ("targets", target_markdown(claims)),
        ("task_sections", _task_sections(context)),
        *(("section", section_markdown(s, claims.baseline)) for s in claims.sections),
        ("tuned_lr", tuned_lines(claims.tuned)),
        ("key_arms", key_arms_markdown(figures)),
        ("step_errors", step_error_lines(context.results)),
        ("appendix", appendix_markdown(tables.token_shares, tables.fidelity, tables.ablations, context.profile)),
    ]
    return tuple(MarkdownPart(name, tuple(lines)) for name, lines in parts if lines)


def markdown_text(parts: Sequence[MarkdownPart]) -> str:
    """``report.md``: every part's lines, one after another."""
    return "\n".join(line for part in parts for line in part.lines)
