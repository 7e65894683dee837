"""TRL's loss names, translated: the normaliser family each ``loss_type`` divides by, and its reduction.

Read from TRL 1.16 ``GRPOTrainer._compute_loss`` (train mode). The core knows only engine-neutral
families (:mod:`costaware.grpo.factors`); this table is the one place a TRL loss name meets them.

>>> TRL_LOSS_FAMILY["dapo"], TRL_LOSS_FAMILY["bnpo"], TRL_LOSS_FAMILY["grpo"]
('global_tokens', 'token_mean', 'row_mean')
"""

from __future__ import annotations

import torch

from costaware.grpo.losses import aggregate

__all__ = ["SUPPORTED_LOSS_TYPES", "TRL_LOSS_FAMILY", "reduce_like_trl"]

# loss_type -> (normaliser family of costaware.grpo.factors, reduction by costaware.grpo.losses.aggregate,
# what that reduction divides by): TRL's own formula for each, in the comment
_TRL_LOSSES: dict[str, tuple[str, str, str]] = {
    "grpo": ("row_mean", "seq-mean-token-mean", "rows"),  # ((l·m).sum(-1) / m.sum(-1)).mean()
    "sapo": ("row_mean", "seq-mean-token-mean", "rows"),
    "dr_grpo": ("row_mean", "token-mean", "rows_x_max_len"),  # (l·m).sum() / (B · max_len): constant per row
    "luspo": ("row_mean", "seq-mean-token-sum", "rows"),  # (l·m).sum(-1).mean()
    "bnpo": ("token_mean", "token-mean", "fed_tokens"),  # (l·m).sum() / m.sum()
    "dapo": ("global_tokens", "token-mean", "global_tokens"),  # (l·m).sum() / num_items_in_batch
    "cispo": ("global_tokens", "token-mean", "global_tokens"),
    "vespo": ("global_tokens", "token-mean", "global_tokens"),
}
TRL_LOSS_FAMILY: dict[str, str] = {name: family for name, (family, _, _) in _TRL_LOSSES.items()}
SUPPORTED_LOSS_TYPES = tuple(_TRL_LOSSES)


def reduce_like_trl(
    loss_type: str,
    per_token: torch.Tensor,
    mask: torch.Tensor,
    *,
    max_completion_length: int,
    grad_accum: float,
    num_items: torch.Tensor | None,
    num_processes: int,
    steps_per_generation: int,
    training: bool = True,
) -> torch.Tensor:
    """TRL's reduction of a per-token loss for ``loss_type``, by :func:`costaware.grpo.losses.aggregate`.

    ``grad_accum`` is the trainer's current gradient accumulation; ``num_items`` the micro-batch's
    ``num_items_in_batch`` (global-token losses only); outside ``training`` TRL divides by neither.
    """
    grad_accum = grad_accum if training else 1.0
    _, mode, divisor = _TRL_LOSSES[loss_type]
    rows = per_token.size(0)
    if divisor == "global_tokens":
        assert num_items is not None  # TRL passes num_items_in_batch with every global-token loss
        tokens = num_items.clamp(min=1.0) / num_processes
        if training:
            tokens = tokens * grad_accum / steps_per_generation
        return aggregate(per_token, mask, mode, num_tokens=tokens)
    if divisor == "fed_tokens":
        loss = aggregate(per_token, mask, mode, num_tokens=mask.sum().clamp(min=1.0))
    elif divisor == "rows_x_max_len":
        loss = aggregate(per_token, mask, mode, num_tokens=rows * max_completion_length)
    else:
        loss = aggregate(per_token, mask, mode, num_sequences=rows)
    return loss / grad_accum
