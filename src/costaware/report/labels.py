"""Display names: the one place that turns an :class:`~costaware.experiments.arms.Arm` into a label. The report
never keys on a label; a label is derived from the arm's typed fields, never from its key.

A new method is one line in :data:`LABELS`; a new option value is one line in :data:`OPTIONS`.
The figures draw a method in one fixed colour and marker (:data:`STYLES`, :func:`style`), whatever else a
report holds, so that a method looks the same in every panel and every report.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from costaware.experiments.arms import Arm

__all__ = ["LABELS", "OPTIONS", "STYLES", "Style", "label", "style"]

LABELS = {
    "none": "GRPO",
    "nonzero": "nonzero",
    "p_star": "p*",
    "p_smooth": "p*_smooth(0.01)",
    "pods": "PODS",
    "cost_pods": "cost-aware PODS (biased)",
    "inv_sqrt_cost": "1/√c",
    "variance": "p ∝ |A|",
    "uniform": "uniform",
    "sft": "SFT continuation",
}
# An option's words in parentheses after the name, by field and value (a value not listed shows as itself).
OPTIONS: dict[str, dict[object, str]] = {
    "weights": {"raw": "raw weights"},
    "step_budget": {"tokens": "tokens/step matched", "support": "nonzero's rows/step"},
    "proxy": {"advantage": "paper's proxy |A|", "calibrated": "calibrated proxy", "length_aware": "length-aware proxy"},
    "rollout": {
        "greso": "GRESO skip, biased",
        "cost_aware_skip": "cost-aware skip, biased",
        "cost_aware": "cost-aware prompts",
        "dapo": "DAPO dynamic sampling",
    },
}


def label(arm: Arm, *, learning_rate: float | None = None, default_lr: float | None = None) -> str:
    """Label of an arm, with the LR multiple when ``learning_rate`` is not ``default_lr``.

    >>> label(Arm("p_star", weights="raw"))
    'p* (raw weights)'
    >>> label(Arm("p_smooth", alpha=0.05))
    'p*_smooth(0.05)'
    >>> label(Arm("p_star", proxy_noise=0.1, step_budget="tokens"))
    'p* (σ²=0.1, tokens/step matched)'
    >>> label(Arm("none"), learning_rate=4e-4, default_lr=1e-4)
    'GRPO (lr ×4)'
    """
    if not isinstance(arm, Arm):
        raise TypeError(f"arm must be an Arm (costaware.experiments.arms), got {arm!r}")
    name, extra = LABELS.get(arm.method, arm.method), []
    for field, value in arm.options():
        if field == "alpha":  # the method's own parameter: in its name
            name = f"p*_smooth({value:g})"
        elif field == "proxy_noise":
            extra.append(f"σ²={value:g}")
        else:
            extra.append(OPTIONS.get(field, {}).get(value, str(value)))
    if learning_rate is not None and default_lr is not None and learning_rate != default_lr:
        extra.append(f"lr ×{learning_rate / default_lr:.3g}")
    return name + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class Style:
    """How a figure draws one arm: colour, marker, line style."""

    colour: str
    marker: str
    linestyle: str = "-"


# One colour and marker per method (Okabe-Ito and tab10 hues, distinct in print and for colour-blind readers);
# the comparison that matters, GRPO → nonzero → p*, gets black, blue and orange.
STYLES = {
    "none": Style("#000000", "o"),
    "nonzero": Style("#0072B2", "s"),
    "p_star": Style("#E69F00", "D"),
    "p_smooth": Style("#CC79A7", "v"),
    "pods": Style("#009E73", "^"),
    "cost_pods": Style("#56B4E9", "<"),
    "inv_sqrt_cost": Style("#D55E00", ">"),
    "variance": Style("#8C564B", "p"),
    "uniform": Style("#7F7F7F", "h"),
    "sft": Style("#444444", "x", "--"),
}
# A prompt stage or a peer's own sampling changes what the arm is: its own colour, whatever its row method.
ROLLOUT_STYLES = {
    "greso": Style("#9467BD", "P"),
    "dapo": Style("#BCBD22", "X"),
    "cost_aware_skip": Style("#D62728", "*"),
    "cost_aware": Style("#FF7F0E", "*", "--"),
}
_ALT_MARKERS = "os^vD<>ph8*PX"
_ALT_LINES = ("--", "-.", ":")


def style(arm: Arm, lr_multiple: float = 1.0) -> Style:
    """The arm's fixed style: its method's (or prompt stage's) colour; a variant of a method (other options,
    another LR) keeps the colour, with a line style and marker fixed by its key, never by what else is drawn.

    >>> style(Arm("nonzero")) == style(Arm("nonzero"))
    True
    >>> style(Arm("p_star", weights="raw")).colour == style(Arm("p_star")).colour
    True
    """
    if not isinstance(arm, Arm):
        raise TypeError(f"arm must be an Arm (costaware.experiments.arms), got {arm!r}")
    base = ROLLOUT_STYLES.get(arm.rollout) or STYLES.get(arm.method)
    if base is None:  # a method with no entry: a colour fixed by its name
        h = zlib.crc32(arm.method.encode())
        base = Style(f"#{(h & 0x7F7F7F) + 0x202020:06x}", _ALT_MARKERS[h % len(_ALT_MARKERS)])
    variant = arm.key != Arm(arm.method, rollout=arm.rollout).key or lr_multiple != 1.0
    if not variant:
        return base
    h = zlib.crc32(f"{arm.key}@{lr_multiple:g}".encode())
    return Style(base.colour, _ALT_MARKERS[h % len(_ALT_MARKERS)], _ALT_LINES[h % len(_ALT_LINES)])
