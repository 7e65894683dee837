"""Display names: the one place that turns an :class:`~costaware.arms.Arm` into a label. The report never
keys on a label; a label is derived from the arm's typed fields, never from its key.

A new method is one line in :data:`LABELS`; a new option value is one line in :data:`OPTIONS`.
"""

from __future__ import annotations

from costaware.arms import Arm

__all__ = ["LABELS", "OPTIONS", "label"]

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
    "rollout": {"greso": "GRESO skip, biased", "cost_aware_skip": "cost-aware skip, biased",
                "cost_aware": "cost-aware prompts", "dapo": "DAPO dynamic sampling"},
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
        raise TypeError(f"arm must be an Arm (costaware.arms), got {arm!r}")
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
