"""Display names: the one table that turns arm ids into labels. The report never keys on a label."""

from __future__ import annotations

__all__ = ["LABELS", "label"]

LABELS = {
    "none": "GRPO",
    "nonzero": "nonzero",
    "p_star": "p*",
    "p_smooth": "p*_smooth(0.01)",
    "pods": "PODS",
    "inv_sqrt_cost": "1/√c",
    "variance": "p ∝ |A|",
    "uniform": "uniform",
    "sft": "SFT continuation",
}
_OPTIONS = {"raw": "raw weights", "tokens": "tokens/step matched", "advantage": "paper's proxy |A|",
            "calibrated": "calibrated proxy", "length_aware": "length-aware proxy"}


def label(arm: str, *, learning_rate: float | None = None, default_lr: float | None = None) -> str:
    """Label of an arm id (``RunId.arm``), with the LR when it is not the default one.

    >>> label("p_star:raw")
    'p* (raw weights)'
    >>> label("p_smooth:a0.05")
    'p*_smooth(0.05)'
    >>> label("none", learning_rate=4e-4, default_lr=1e-4)
    'GRPO (lr ×4)'
    """
    method, *opts = arm.split(":")
    name, extra = LABELS.get(method, method), []
    for o in opts:
        if o.startswith("a") and method == "p_smooth":
            name = f"p*_smooth({o[1:]})"
        elif o.startswith("noise"):
            extra.append(f"σ²={o[5:]}")
        else:
            extra.append(_OPTIONS.get(o, o))
    if learning_rate is not None and default_lr is not None and learning_rate != default_lr:
        extra.append(f"lr ×{learning_rate / default_lr:.3g}")
    return name + (f" ({', '.join(extra)})" if extra else "")
