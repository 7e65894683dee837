"""Row subsets within GRPO groups: PODS (max reward variance) and cost-aware PODS (variance per PO token).

PODS (Xu et al. 2025, arXiv 2504.13818) generates M responses per prompt and trains on ``keep`` of them,
the subset whose rewards vary most. Cost-aware PODS applies the paper's Appendix C subset selection to
the same choice: it keeps, per group, the ``keep`` rows that carry the most reward variation per token
spent on them (:func:`cost_pods_select` states the objective). Both are biased estimators of the group's
gradient (rows outside the subset are dropped, and the advantages are recomputed over the kept rows).
Kernels for checked inputs: ``plan_minibatches`` checks rewards, costs, group size and ``keep`` once.

>>> import torch
>>> r = torch.tensor([1.0, 0.0, 1.0, 0.0])
>>> pods_select(r, 4, 2).tolist()                       # one 1 and one 0: the largest variance
[True, False, False, True]
>>> cost_pods_select(r, torch.tensor([9.0, 9.0, 1.0, 1.0]), 4, 2).tolist()   # the same, on the cheap rows
[False, False, True, True]
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations
from typing import Any

import numpy as np
import torch

from costaware._checks import integer, positive_vector, same_length
from costaware.grpo.advantages import group_advantages, rewards_vector

__all__ = [
    "MAX_SUBSETS",
    "pods_select",
    "cost_pods_select",
    "pods_advantages",
    "pods_select_kernel",
    "cost_pods_select_kernel",
]

# Cost-aware PODS searches every keep-subset of a group: C(M, keep) of them. 2**16 covers every keep
# for groups of up to 18 rows (C(18, 9) = 48,620); a larger search is refused rather than run for minutes.
MAX_SUBSETS = 1 << 16
_CHUNK = 1 << 22  # subset entries evaluated at once (groups × subsets × keep): ~32 MB of float64


def _checked(rewards: Any, group_size: Any, keep: Any) -> tuple[torch.Tensor, int, int]:
    r = rewards_vector(rewards)
    m = integer(group_size, "group_size", minimum=1, maximum=max(r.numel(), 1))
    if r.numel() == 0 or r.numel() % m:
        raise ValueError(f"rewards must hold whole groups of group_size={m}, got {r.numel()} rows")
    return r, m, integer(keep, "keep", minimum=1, maximum=m)


def pods_select(rewards: Any, group_size: int, keep: int) -> torch.Tensor:
    """:func:`pods_select_kernel` on checked arguments (rewards (N,), groups of ``group_size``,
    1 <= keep <= group_size)."""
    return pods_select_kernel(*_checked(rewards, group_size, keep))


def cost_pods_select(rewards: Any, costs: Any, group_size: int, keep: int) -> torch.Tensor:
    """:func:`cost_pods_select_kernel` on checked arguments (costs (N,) > 0, as many as rewards)."""
    r, m, k = _checked(rewards, group_size, keep)
    c = positive_vector(costs, "costs")
    same_length(rewards=r.numpy(), costs=c)
    return cost_pods_select_kernel(r, torch.from_numpy(c), m, k)


def pods_select_kernel(rewards: torch.Tensor, group_size: int, keep: int) -> torch.Tensor:
    """PODS max-variance down-sampling: per group, the ``keep`` rows whose rewards vary most.

    For sorted rewards the max-variance subset of size m takes the k largest and the m−k smallest
    for some k (Xu et al. 2025, Lemma 1); k is searched for all groups at once. Each group is first
    divided by its largest |reward| (the argmax of a variance is scale-free), so rewards near the
    float range (1e300) cannot overflow the squares. Returns a boolean mask over rows.
    """
    g = rewards.reshape(-1, group_size).to(torch.float64)
    scale = g.abs().amax(1, keepdim=True)
    g = g / torch.where(scale > 0, scale, torch.ones_like(scale))
    order = torch.argsort(g, dim=1, descending=True, stable=True)
    s = torch.gather(g, 1, order)  # descending
    m = keep
    zero = torch.zeros(g.shape[0], 1, dtype=g.dtype)
    top = torch.cat([zero, s.cumsum(1)], 1)  # top[:, k] = sum of the k largest
    top2 = torch.cat([zero, (s * s).cumsum(1)], 1)
    rs = s.flip(1)  # ascending
    bot = torch.cat([zero, rs.cumsum(1)], 1)
    bot2 = torch.cat([zero, (rs * rs).cumsum(1)], 1)
    k = torch.arange(m + 1)
    total = top[:, k] + bot[:, m - k]
    total2 = top2[:, k] + bot2[:, m - k]
    var = total2 / m - (total / m) ** 2
    best_k = var.argmax(1, keepdim=True)  # (groups, 1)
    pos = torch.arange(group_size).unsqueeze(0)
    keep_sorted = (pos < best_k) | (pos >= group_size - (m - best_k))
    mask = torch.zeros_like(keep_sorted)
    mask.scatter_(1, order, keep_sorted)
    return mask.reshape(-1)


@lru_cache(maxsize=32)
def _subsets(group_size: int, keep: int) -> np.ndarray:
    """(C(M, keep), keep) every keep-subset of range(M), in lexicographic order."""
    return np.array(list(combinations(range(group_size), keep)), dtype=np.int64).reshape(-1, keep)


def check_subset_search(group_size: int, keep: int) -> None:
    """ValueError when cost-aware PODS would search more than :data:`MAX_SUBSETS` subsets per group."""
    count = math.comb(group_size, keep)
    if count > MAX_SUBSETS:
        raise ValueError(
            f"cost_pods searches every keep-subset of a group: group_size={group_size}, keep={keep} gives "
            f"C({group_size}, {keep}) = {count:,} subsets, more than MAX_SUBSETS = {MAX_SUBSETS:,}; use a smaller keep "
            "(or 'pods', whose search is linear)"
        )


def cost_pods_select_kernel(rewards: torch.Tensor, costs: torch.Tensor, group_size: int, keep: int) -> torch.Tensor:
    """Cost-aware PODS: per group, the ``keep`` rows with the most reward variation per PO token.

    For group g with rewards r_i and costs c_i (prompt + completion tokens), the kept set is

        S_g = argmax_{S ⊆ g, |S| = keep}  Σ_{i∈S} (r_i − r̄_S)² / Σ_{i∈S} c_i ,   r̄_S = mean of r over S,

    i.e. keep·Var(r_S) (PODS's objective, the signal the group's update carries) per token the plan
    spends on running S once. Why this form, from the paper's Appendix C: there, subset selection keeps
    the components with the most gradient mass per unit of cost (the knapsack's density ρ_i = G_i/(G_i√c_i));
    here the subset's rows are run once each, unweighted, so the cost of S is Σ c_i (not the √c of
    sampling p* within S), and its value is PODS's keep·Var(r_S). The knapsack form with G_i = |A_i|
    needs a bias budget Γ and advantages that do not depend on S, while PODS recomputes A over S and
    fixes |S| = keep; the ratio keeps both. With equal costs the denominator is keep·c for every S, so
    the choice is PODS's max-variance subset (:func:`pods_select`).

    Exact: every keep-subset is scored (at most :data:`MAX_SUBSETS` per group), vectorised over groups in
    chunks of bounded memory; ties go to the first subset in lexicographic order. Rewards are divided
    by each group's largest |reward| first (the argmax is scale-free), so the squares cannot overflow.
    Returns a boolean mask over rows.
    """
    check_subset_search(group_size, keep)
    r = rewards.detach().to(torch.float64).reshape(-1, group_size).numpy()
    c = costs.detach().to(torch.float64).reshape(-1, group_size).numpy()
    scale = np.abs(r).max(1, keepdims=True)
    r = r / np.where(scale > 0, scale, 1.0)
    subsets = _subsets(group_size, keep)
    groups = r.shape[0]
    best = np.empty(groups, dtype=np.int64)
    step = max(1, _CHUNK // (subsets.size or 1))
    for lo in range(0, groups, step):  # chunks of groups, not rows: memory stays bounded
        rs = r[lo : lo + step][:, subsets]  # (g, subsets, keep)
        dev = rs - rs.mean(-1, keepdims=True)
        value = (dev * dev).sum(-1)
        best[lo : lo + step] = np.argmax(value / c[lo : lo + step][:, subsets].sum(-1), axis=1)
    mask = np.zeros((groups, group_size), dtype=bool)
    mask[np.arange(groups)[:, None], subsets[best]] = True
    return torch.from_numpy(mask.reshape(-1))


def pods_advantages(rewards: torch.Tensor, group_size: int, mask: torch.Tensor) -> torch.Tensor:
    """GRPO advantages recomputed over the kept rows of each group, TRL's convention (unbiased std,
    eps = 1e-4), by :func:`costaware.grpo.advantages.group_advantages`; dropped rows get 0.
    Every group must keep the same number of rows (PODS and cost-aware PODS do)."""
    keep = int(mask[:group_size].sum())
    kept = rewards.reshape(-1, group_size)[mask.reshape(-1, group_size)]
    adv = group_advantages(kept, keep, eps=1e-4).to(torch.float64)
    if not torch.isfinite(adv).all():
        i = int(torch.nonzero(~torch.isfinite(adv))[0])
        raise ValueError(
            f"rewards give a non-finite PODS advantage at kept row {i} (rewards too large to centre "
            f"and scale, e.g. {float(kept[i])!r}); rescale the rewards"
        )
    out = torch.zeros(rewards.numel(), dtype=torch.float64)
    out[mask] = adv
    return out.to(torch.float32)
