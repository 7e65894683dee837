"""Pure helpers for trainer v1, whose rows live in TransferQueue as jagged (nested) response tensors.

One TransferQueue read per rank feeds the actor update: each rank reads the rows its draws need once
and selects its draws from them (:func:`feed_plan`, :func:`fed_rows`).

>>> plan = feed_plan(["a", "b", "c"], [2, 0, 2, 2], dp=1, tag="s1", spare=[])
>>> plan.keys, plan.rows, plan.copies   # row c, drawn three times, is read once
(['c', 'a'], [[0, 1, 0, 0]], [])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from costaware.integrations.verl.config import PLAN_KEY


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


@dataclass(frozen=True)
class FeedPlan:
    """How trainer v1 feeds the draws: the keys the actor workers read and what each rank makes of them.

    ``keys``: rank-major, as many per rank (verl splits a batch's keys contiguously and evenly over the
    data-parallel ranks); ``rows[r]``: for each of rank r's draws, its row's position among rank r's keys;
    ``copies``: (caller row, new key) to copy before the update (a row another rank reads too, or padding
    when no unread row is left); ``sources``: the caller row of each key (whose tags it carries).
    """

    keys: list[str]
    rows: list[list[int]]
    copies: list[tuple[int, str]]
    sources: list[int]


def feed_plan(keys: list[str], drawn: list[int], dp: int, tag: str, spare: list[int]) -> FeedPlan:
    """Each rank reads every row its draws need once, under the caller's key; a row drawn again on the same
    rank is selected again inside the worker (:func:`fed_rows`), so nothing is copied for it. A row that a
    second rank needs too is copied to ``f"{key}#{tag}.{rank}"`` (TransferQueue keys are unique per batch).
    Ranks that need fewer rows are padded to the same count with rows no rank reads, taken from ``spare``
    in order (their values are read and dropped), or, when none is left, copies of the rank's first row.

    >>> plan = feed_plan(["a", "b", "c", "d"], [2, 0, 2, 2], dp=2, tag="s", spare=[3, 1])
    >>> plan.keys, plan.rows, plan.copies
    (['c', 'a', 'c#s.1', 'd'], [[0, 1], [0, 0]], [(2, 'c#s.1')])
    """
    if dp < 1 or len(drawn) % dp:
        raise ValueError(f"the draws ({len(drawn)}) must split evenly over dp={dp} ranks")
    if any(not 0 <= i < len(keys) for i in drawn):
        raise ValueError(f"drawn rows must lie in [0, {len(keys)}), got {sorted(set(drawn))}")
    share = len(drawn) // dp
    read: set[int] = set()
    per_rank: list[list[tuple[int, str]]] = []
    rows, copies = [], []
    for r in range(dp):
        unique = list(dict.fromkeys(drawn[r * share : (r + 1) * share]))
        own = []
        for i in unique:
            if i in read:  # another rank reads the caller's key
                own.append((i, f"{keys[i]}#{tag}.{r}"))
                copies.append(own[-1])
            else:
                own.append((i, keys[i]))
                read.add(i)
        position = {i: p for p, (i, _) in enumerate(own)}
        rows.append([position[i] for i in drawn[r * share : (r + 1) * share]])
        per_rank.append(own)
    width = max((len(own) for own in per_rank), default=0)
    pool = iter(i for i in dict.fromkeys(spare) if i not in read)
    for r, own in enumerate(per_rank):
        for k in range(width - len(own)):
            unread = next(pool, None)
            if unread is None:
                own.append((own[0][0], f"{keys[own[0][0]]}#{tag}.pad{r}.{k}"))
                copies.append(own[-1])
            else:
                own.append((unread, keys[unread]))
                read.add(unread)
    flat = [pair for own in per_rank for pair in own]
    return FeedPlan(keys=[k for _, k in flat], rows=rows, copies=copies, sources=[i for i, _ in flat])


def fed_rows(data: Any, rank: int) -> Any:
    """A worker's mini-batch rows from the rows it read (``data``, a TensorDict of verl's actor batch): the
    plan under :data:`PLAN_KEY` selects rank ``rank``'s draws (a row drawn twice appears twice) and sets
    ``rollout_is_weights`` to (the rows' own weights, or 1) x the draw's factor and ``cost_aware_weights``
    to the factor, on every response token. ``data`` without a plan is returned as it is."""
    from verl.utils import tensordict_utils as tu

    from costaware.integrations.verl.config import WEIGHTS_KEY

    plan = tu.pop(data, key=PLAN_KEY, default=None)
    if plan is None:
        return data
    rows, factors = plan["rows"][rank], torch.tensor(plan["factors"][rank], dtype=torch.float64)
    fed = tu.index_select_tensor_dict(data, rows)
    mask = fed["response_mask"]
    existing = fed["rollout_is_weights"] if "rollout_is_weights" in fed.keys() else None
    fed["rollout_is_weights"] = nested_scaled_weights(existing, mask, factors)
    fed[WEIGHTS_KEY] = nested_scaled_weights(None, mask, factors)
    return fed


def nested_filled(response_mask: torch.Tensor, value: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A jagged tensor shaped like ``response_mask`` holding ``value`` on every token."""
    _, offsets = _jagged_parts(response_mask, "response_mask")
    total = int(offsets[-1])
    return torch.nested.nested_tensor_from_jagged(torch.full((total,), value, dtype=dtype), offsets=offsets)
