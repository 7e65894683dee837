"""DAPO zero-variance filtering (ZVF): drop groups whose rewards are all equal, regenerate until full.

A group whose M rewards are all equal has zero advantages everywhere, so it contributes no policy
gradient. DAPO (and verl's ``algorithm.filter_groups``) keeps only groups with non-constant rewards
and generates more rollouts until the batch holds the target number of groups.

>>> import torch
>>> nonzero_variance_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), group_size=2)
tensor([False, False,  True,  True])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from costaware._checks import integer
from costaware.grpo.advantages import check_group_size, rewards_vector

__all__ = ["nonzero_variance_groups", "FillReport", "FillResult", "fill_batch"]

# Bounds on fill_batch's counts (a huge count is a ValueError, not a hang): groups per batch or per
# call of ``generate``, and calls of ``generate``
MAX_GROUPS = 2**20
MAX_ROUNDS = 2**16


def nonzero_variance_groups(rewards: Any, group_size: int) -> torch.Tensor:
    """Bool (N,) row mask: True for rows whose group's rewards are not all equal."""
    r = rewards_vector(rewards)
    m = check_group_size(r.numel(), group_size)
    grouped = r.view(-1, m)
    keep = grouped.amax(dim=1) > grouped.amin(dim=1)
    return keep.repeat_interleave(m)


@dataclass(frozen=True)
class FillReport:
    """What :func:`fill_batch` did: rounds of generation, groups generated and kept."""

    rounds: int
    groups_generated: int
    groups_kept: int  # non-constant groups found (before truncation to the target)
    target_groups: int
    filled: bool  # True when the target was reached

    @property
    def fill_fraction(self) -> float:
        """Fraction of the target the returned batch holds (1.0 when filled)."""
        return min(self.groups_kept, self.target_groups) / self.target_groups

    @property
    def keep_rate(self) -> float:
        """Fraction of generated groups that had non-constant rewards."""
        return self.groups_kept / self.groups_generated if self.groups_generated else 0.0


@dataclass(frozen=True)
class FillResult:
    batch: dict[str, torch.Tensor]  # per-row tensors of the kept groups, group rows contiguous
    rewards: torch.Tensor  # (rows,) rewards of the kept rows
    report: FillReport


def _check_round(batch: Any, rewards: Any, num_groups: int, group_size: int) -> tuple[dict, torch.Tensor]:
    if not isinstance(batch, Mapping):
        raise ValueError(f"generate must return (dict of per-row tensors, rewards), got batch {type(batch).__name__}")
    r = rewards_vector(rewards)
    rows = num_groups * group_size
    if r.numel() != rows:
        raise ValueError(f"generate({num_groups}) returned {r.numel()} rewards, expected {rows} (groups x group_size)")
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.ndim == 0 or value.shape[0] != rows:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"batch[{key!r}] must be a tensor with {rows} rows, got {shape}")
    return dict(batch), r


def fill_batch(
    generate: Callable[[int], tuple[Mapping[str, torch.Tensor], Any]],
    target_groups: int,
    group_size: int,
    max_rounds: int = 4,
    *,
    groups_per_round: int | None = None,
) -> FillResult:
    """Generate until ``target_groups`` groups with non-constant rewards are collected.

    Args:
        generate: ``generate(num_groups) -> (batch, rewards)``; ``batch`` maps names to tensors with
            ``num_groups * group_size`` rows (groups contiguous), ``rewards`` is (rows,).
        target_groups: groups the filled batch must hold.
        group_size: M, responses per prompt.
        max_rounds: calls of ``generate`` before giving up.
        groups_per_round: groups requested per call; default the number still missing. Use
            ``target_groups`` for DAPO's fixed-size generation batches.

    Returns:
        A :class:`FillResult`. Kept groups keep their generation order; the surplus of the last
        round is dropped. When ``max_rounds`` runs out, the batch holds the groups found so far and
        ``report.filled`` is False (``report.fill_fraction`` says how full it is).

    >>> def gen(k):
    ...     r = torch.tensor([0.0, 1.0] * k)
    ...     return {"x": torch.arange(2 * k)}, r
    >>> out = fill_batch(gen, target_groups=3, group_size=2)
    >>> out.batch["x"].tolist(), out.report.rounds, out.report.filled
    ([0, 1, 2, 3, 4, 5], 1, True)
    """
    target_groups = integer(target_groups, "target_groups", minimum=1, maximum=MAX_GROUPS)
    max_rounds = integer(max_rounds, "max_rounds", minimum=1, maximum=MAX_ROUNDS)
    group_size = check_group_size(group_size, group_size)
    if groups_per_round is not None:
        groups_per_round = integer(groups_per_round, "groups_per_round", minimum=1, maximum=MAX_GROUPS)

    pieces: list[dict[str, torch.Tensor]] = []
    reward_pieces: list[torch.Tensor] = []
    kept = generated = rounds = 0
    keys: set[str] | None = None
    last: dict[str, torch.Tensor] = {}
    while kept < target_groups and rounds < max_rounds:
        ask = groups_per_round if groups_per_round is not None else target_groups - kept
        batch, r = _check_round(*generate(ask), ask, group_size)
        if keys is None:
            keys = set(batch)
        elif set(batch) != keys:
            raise ValueError(f"generate returned keys {sorted(batch)} in round {rounds}, expected {sorted(keys)}")
        rounds += 1
        generated += ask
        keep = nonzero_variance_groups(r, group_size)
        n_keep = int(keep.sum()) // group_size
        if n_keep:
            pieces.append({k: v[keep] for k, v in batch.items()})
            reward_pieces.append(r[keep])
        kept += n_keep
        last = batch
    rows = min(kept, target_groups) * group_size
    if pieces:
        out = {k: torch.cat([p[k] for p in pieces])[:rows] for k in pieces[0]}
        rewards = torch.cat(reward_pieces)[:rows]
    else:
        # empty slices keep each field's dtype and trailing shape
        out = {k: v[:0] for k, v in last.items()}
        rewards = torch.zeros(0)
    report = FillReport(
        rounds=rounds,
        groups_generated=generated,
        groups_kept=kept,
        target_groups=target_groups,
        filled=kept >= target_groups,
    )
    return FillResult(batch=out, rewards=rewards, report=report)
