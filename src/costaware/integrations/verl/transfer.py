"""Pure helpers for trainer v1, whose rows live in TransferQueue as jagged (nested) response tensors.

>>> import torch
>>> keys, rounds = duplicate_key_plan(["a", "b", "c"], torch.tensor([2, 0, 2, 2]), tag="s1")
>>> keys   # a row's first draw runs under its own key; only repeats are copied
['c', 'a', 'c#s1.1', 'c#s1.2']
>>> [(src, dst) for src, dst, _ in rounds]
[(['c'], ['c#s1.1']), (['c'], ['c#s1.2'])]
"""

from __future__ import annotations

import torch


def _jagged_parts(nested: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not getattr(nested, "is_nested", False):
        raise ValueError(f"{name} must be a jagged nested tensor (TransferQueue layout), got a dense tensor")
    values, offsets = nested.values(), nested.offsets()  # type: ignore[attr-defined]  # jagged only: not in torch's stubs
    if values.dim() != 1:
        raise ValueError(f"{name} must hold one value per response token, got values of shape {tuple(values.shape)}")
    return values, offsets


def nested_row_means(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-row masked mean of jagged advantages (bs,): A_i for GRPO, 0 for rows without response tokens."""
    adv, adv_offsets = _jagged_parts(advantages, "advantages")
    mask, mask_offsets = _jagged_parts(response_mask, "response_mask")
    if not torch.equal(adv_offsets, mask_offsets):
        raise ValueError("advantages and response_mask must have the same row lengths")
    rows = adv_offsets.numel() - 1
    row_of = torch.repeat_interleave(torch.arange(rows), adv_offsets.diff())
    m = mask.to(torch.float64)
    a = adv.to(torch.float64)
    if not torch.isfinite(a[m > 0]).all():
        raise ValueError("advantages contain NaN or inf on response tokens")
    total = torch.zeros(rows, dtype=torch.float64).index_add_(0, row_of, a * m)
    count = torch.zeros(rows, dtype=torch.float64).index_add_(0, row_of, m)
    return torch.where(count > 0, total / count.clamp(min=1.0), torch.zeros_like(total))


def nested_row_sums(response_mask: torch.Tensor) -> torch.Tensor:
    """Response tokens per row (bs,) of a jagged ``response_mask``."""
    mask, offsets = _jagged_parts(response_mask, "response_mask")
    rows = offsets.numel() - 1
    row_of = torch.repeat_interleave(torch.arange(rows), offsets.diff())
    return torch.zeros(rows, dtype=torch.float64).index_add_(0, row_of, mask.to(torch.float64))


def nested_scaled_weights(
    existing: torch.Tensor | None, response_mask: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Jagged ``rollout_is_weights``: existing (or 1) times the row's importance weight on every token."""
    _, offsets = _jagged_parts(response_mask, "response_mask")
    lengths = offsets.diff()
    if weights.shape != (lengths.numel(),):
        raise ValueError(f"weights must have shape ({lengths.numel()},), got {tuple(weights.shape)}")
    per_token = torch.repeat_interleave(weights.to(torch.float32), lengths)
    if existing is not None:
        values, existing_offsets = _jagged_parts(existing, "rollout_is_weights")
        if not torch.equal(existing_offsets, offsets):
            raise ValueError("rollout_is_weights and response_mask must have the same row lengths")
        per_token = values * per_token.to(values.dtype)
    return torch.nested.nested_tensor_from_jagged(per_token, offsets=offsets)


def duplicate_key_plan(
    keys: list[str], indices: torch.Tensor, tag: str
) -> tuple[list[str], list[tuple[list[str], list[str], list[int]]]]:
    """The key each draw runs under: a row's first draw under its own key, the r-th repeat (r = 1, 2, ...)
    under a fresh ``f"{key}#{tag}.{r}"`` (TransferQueue keys are unique per batch, so a row fed twice needs a
    second key). Returns the key of every draw (in draw order) and, per repeat round r >= 1, (source keys,
    new keys, source rows) to copy: within one round every source key is distinct, so one batched get/put
    copies it. Without repeats (merged duplicates in a single mini-batch) nothing is copied.
    """
    idx = indices.to(torch.int64)
    if idx.dim() != 1 or (idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= len(keys))):
        raise ValueError(f"indices must be a 1-D tensor of rows in [0, {len(keys)}), got {indices!r}")
    # occurrence number of each draw among the draws of the same row, in draw order
    order = torch.argsort(idx, stable=True)
    sorted_idx = idx[order]
    run_start = torch.ones_like(sorted_idx, dtype=torch.bool)
    run_start[1:] = sorted_idx[1:] != sorted_idx[:-1]
    position = torch.arange(idx.numel())
    start_of_run = torch.cummax(torch.where(run_start, position, torch.zeros_like(position)), 0).values
    occurrence = torch.empty_like(idx)
    occurrence[order] = position - start_of_run
    rows, occ = idx.tolist(), occurrence.tolist()
    new_keys = [keys[i] if r == 0 else f"{keys[i]}#{tag}.{r}" for i, r in zip(rows, occ, strict=True)]
    rounds = []
    for r in range(1, int(occurrence.max()) + 1 if occurrence.numel() else 0):
        draws = torch.nonzero(occurrence == r).flatten().tolist()
        sources = [rows[d] for d in draws]
        rounds.append(([keys[i] for i in sources], [new_keys[d] for d in draws], sources))
    return new_keys, rounds


def nested_select(nested: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """The jagged rows ``rows`` of ``nested``, in that order."""
    values, offsets = _jagged_parts(nested, "nested")
    parts = [values[int(offsets[i]) : int(offsets[i + 1])] for i in rows]
    return torch.nested.as_nested_tensor(parts, layout=torch.jagged)


def nested_filled(response_mask: torch.Tensor, value: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A jagged tensor shaped like ``response_mask`` holding ``value`` on every token."""
    _, offsets = _jagged_parts(response_mask, "response_mask")
    total = int(offsets[-1])
    return torch.nested.nested_tensor_from_jagged(torch.full((total,), value, dtype=dtype), offsets=offsets)
