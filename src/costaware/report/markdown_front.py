"""The Markdown of the report's front: the title, the opening table of claims and its sentences, the verdict rule,
the target and the price of a token, the cost figures, what ran, the command and the policy.

Every number is read from :class:`~costaware.report.claims.ReportClaims` and
:class:`~costaware.report.run_tables.RunTables`; nothing is computed here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from costaware.experiments.records import RunResult
from costaware.report.advice import advice_sentence
from costaware.report.claims import ReportClaims
from costaware.report.curves import DEFAULT_GENERATION_COST, MIN_SEEDS_FOR_CI
from costaware.report.labels import label
from costaware.report.md import code, escape, table
from costaware.report.opening import opening_table, sentences, target_sentence
from costaware.report.run_tables import WhatRanRow
from costaware.report.verdicts import RULE

__all__ = [
    "TITLE",
    "SPECS_MARKER",
    "RUN_HEADER",
    "title_markdown",
    "advice_markdown",
    "opening_table_markdown",
    "opening_text_markdown",
    "what_ran_markdown",
    "command_markdown",
    "run_list_markdown",
]

TITLE = "# Cost-aware GRPO against GRPO: what a user gains, and from which effect"
RUN_HEADER = ["group", "task", "setting", "method", "lr", "seed", "loss", "spec", "wall s"]
SPECS_MARKER = "Run specifications (every run, its spec and wall time): `summary.json`, key `runs`."


def title_markdown(notice: str | None) -> list[str]:
    """The title, and ``notice`` in bold under it."""
    return [TITLE, ""] + ([f"**{notice}**", ""] if notice else [])


def advice_markdown(claims: ReportClaims) -> list[str]:
    """The method to use at the job's price and at g = 1 and g = 3, in one sentence (``report.advice``)."""
    sentence = advice_sentence(claims.advice, claims.generation_cost)
    return [sentence, ""] if sentence else []


def opening_table_markdown(claims: ReportClaims) -> list[str]:
    return opening_table(claims.opening_rows) + [""]


def _opening_sentences(claims: ReportClaims) -> list[str]:
    """The headline section's sentences, then each prompt-stage section's with its target's verdict."""
    lines = []
    for i, section in enumerate(claims.sections):
        ev = section.evidence
        if section.rollout is not None:
            candidate = section.rollout.candidates[0][0]
            own_rows = [r for r in claims.opening_rows if r.section == section.id]
            said = sentences(ev, claims.baseline, candidate, target_sentence(own_rows, ev.section.name))
            lines += [f"**{escape(ev.section.task)} / {escape(ev.section.setting)}:** " + said, ""]
        elif i == 0:
            lines += [sentences(ev, claims.baseline, claims.candidate), ""]
    return lines


def _cost_sentence(cost: float) -> str:
    return f"Total cost counts one generated token as {cost:.3g} of a policy-optimisation token. " + (
        "The default, 1/3, assumes batched, compute-bound decoding: a decoded token costs ~2N FLOPs and a "
        "trained token's forward+backward ~6N. Decoding is usually memory-bound, so per token it costs "
        "more than that in wall-clock; the verdicts at other prices are below."
        if cost == DEFAULT_GENERATION_COST
        else "The ratio was set by the profile."
    )


def _cost_figures(with_waterfall: bool) -> list[str]:
    lines = [
        "![total cost to the target, per arm](cost_to_target.png)",
        "",
        "Total cost to each section's target accuracy, per key arm: the dot on the seed-mean curve, the whisker "
        f"its 95% CI over seeds (none below {MIN_SEEDS_FOR_CI} seeds); the dotted line is GRPO's.",
        "",
    ]
    if with_waterfall:
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
    return lines


def opening_text_markdown(claims: ReportClaims, *, with_waterfall: bool) -> list[str]:
    """Under the opening table: its sentences, the verdict rule, the target and the price, the cost figures."""
    lines = _opening_sentences(claims) + [RULE, ""]
    lines += [
        f"Target accuracy of a section: {100 * claims.target_fraction:.0f}% of the lowest seed-mean peak among the "
        "methods it compares, so that every seed-mean curve reaches it. Saving = 1 − cost(later)/cost(earlier) "
        "to reach it; positive: the later method needs less. " + _cost_sentence(claims.generation_cost),
        "",
    ]
    return lines + _cost_figures(with_waterfall)


def _what_ran_cells(row: WhatRanRow) -> list[Any]:
    names = ", ".join(dict.fromkeys(label(a, learning_rate=lr, default_lr=row.default_lr) for a, lr in row.arms))
    return [
        row.group,
        row.task,
        row.setting,
        names,
        ", ".join(f"{v:g}" for v in row.learning_rates),
        ", ".join(map(str, row.seeds)),
        row.runs,
        f"{row.minutes:.1f}",
    ]


def what_ran_markdown(rows: Sequence[WhatRanRow]) -> list[str]:
    """A short table of what ran: one row per group, task and setting, with its arms and seeds."""
    return (
        ["## What ran", ""]
        + table(
            ["group", "task", "setting", "methods", "lr", "seeds", "runs", "run minutes"],
            [_what_ran_cells(r) for r in rows],
        )
        + ["", SPECS_MARKER, ""]
    )


def command_markdown(command: str, sft: Mapping[str, Any] | None) -> list[str]:
    """The command that ran the job, and the policy after SFT."""
    lines = [f"Command: {code(command)}", ""]
    if sft:
        lines += [
            f"Policy: {sft.get('parameters', 0):,} parameters after SFT: greedy accuracy "
            f"{sft.get('greedy_accuracy', float('nan')):.3f}, sampled {sft.get('sampled_accuracy', float('nan')):.3f}.",
            "",
        ]
    return lines


def run_list_markdown(results: Sequence[RunResult]) -> list[str]:
    """Every run with its specification and wall time, sorted: the HTML folds it under :data:`SPECS_MARKER`."""
    ordered = sorted(
        results, key=lambda r: (r.id.group, r.id.task, r.id.setting, r.id.arm, r.id.learning_rate, r.id.seed)
    )
    return table(
        RUN_HEADER,
        [
            [
                r.id.group,
                r.id.task,
                r.id.setting,
                label(r.id.arm),
                f"{r.id.learning_rate:g}",
                r.id.seed,
                r.id.loss_type,
                code(json.dumps(r.spec, sort_keys=True)),
                f"{r.wall_seconds:.0f}",
            ]
            for r in ordered
        ],
    )
