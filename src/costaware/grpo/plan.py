"""The policy-optimisation plan of Cost-Aware GRPO (paper §5, Algorithm 2).

After a generation batch (the *pool* of N rollouts) is scored, the baseline splits it into
``num_minibatches`` shuffled chunks. Cost-Aware GRPO instead fills each of those mini-batches with
rows drawn i.i.d. from p ∝ |A_i|/√c_i, with replacement, and multiplies each drawn row's loss by
its importance weight. This module turns (advantages, costs) into that list of mini-batches; it is
pure torch and imports no engine, so TRL, verl and hand-written loops share it.

>>> import torch
>>> adv = torch.tensor([1.0, -1.0, 0.0, 0.5])
>>> cost = torch.tensor([100, 400, 250, 100])
>>> plan = plan_minibatches(adv, cost, num_minibatches=2, generator=torch.Generator().manual_seed(0))
>>> len(plan.minibatches), plan.rows_drawn
(2, 4)
>>> bool((plan.probs[2] == 0).item())        # a zero-advantage row is never drawn
True

Estimator convention: with ``weights="raw"``, ``(1/m) Σ_j mb.weights[j] ∇ℓ[mb.indices[j]]`` is an
unbiased estimate of the pool-mean gradient ``(1/N) Σ_i ∇ℓ_i`` (m = ``mb.num_draws``). The default
``"centred"`` weights are the raw ones times N/n_supp, so that E_p[w] = 1 (paper §G.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from costaware import distributions as dist
from costaware.alias import build_alias

__all__ = ["METHODS", "SamplingConfig", "MiniBatch", "Plan", "plan_minibatches", "pods_select"]

METHODS = ("none", "p_star", "p_smooth", "inv_sqrt_cost", "variance", "uniform", "nonzero", "pods")
# Methods that draw i.i.d. from a distribution p with replacement and apply importance weights.
_DRAWING = ("p_star", "p_smooth", "inv_sqrt_cost", "variance", "uniform")


@dataclass(frozen=True)
class SamplingConfig:
    """How a pool of rollouts is turned into policy-optimisation mini-batches.

    Attributes:
        method: one of :data:`METHODS`. ``none`` is plain GRPO; ``p_star`` the paper's method.
        alpha: ``p_smooth`` mixing weight, (1−α)p* + α·uniform.
        proxy_noise: σ² of zero-mean Gaussian noise added to |A| before p is formed (ablation).
        weights: ``"centred"`` (1/(n_supp p_i), E_p[w] = 1) or ``"raw"`` (1/(n p_i)).
        merge_duplicates: a row drawn k times into one mini-batch runs once with weight k·w.
        budget: ``"rows"`` draws as many rows per step as the baseline runs; ``"tokens"`` draws
            until the baseline's tokens (Σ c_i over the pool) are matched: the tokens drawn, or
            with ``merge_duplicates`` the tokens fed, mini-batch by mini-batch. The stopping rule
            depends only on past draws, so Σ w·g stays unbiased up to the constant E[draws]
            (Wald's identity).
        pods_keep: PODS, rows kept per group (default: half the group).
    """

    method: str = "p_star"
    alpha: float = 0.01
    proxy_noise: float = 0.0
    weights: str = "centred"
    merge_duplicates: bool = True
    budget: str = "rows"
    pods_keep: int | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha!r}")
        if not (isinstance(self.proxy_noise, (int, float)) and math.isfinite(self.proxy_noise)) or (
            self.proxy_noise < 0
        ):
            raise ValueError(f"proxy_noise must be a finite variance >= 0, got {self.proxy_noise!r}")
        if self.weights not in ("centred", "raw"):
            raise ValueError(f"weights must be 'centred' or 'raw', got {self.weights!r}")
        if self.budget not in ("rows", "tokens"):
            raise ValueError(f"budget must be 'rows' or 'tokens', got {self.budget!r}")
        if self.pods_keep is not None and (int(self.pods_keep) != self.pods_keep or self.pods_keep < 1):
            raise ValueError(f"pods_keep must be a positive integer or None, got {self.pods_keep!r}")


@dataclass(frozen=True)
class MiniBatch:
    """One optimiser step's rows.

    ``indices`` are rows of the pool (unique within the mini-batch when merged), ``weights`` the
    per-row loss multiplier (importance weight × ``counts``), ``counts`` how many draws each row
    stands for, ``num_draws`` = Σ counts, and ``tokens`` the tokens actually fed (Σ c over indices).
    """

    indices: torch.Tensor
    weights: torch.Tensor
    counts: torch.Tensor
    num_draws: int
    tokens: int


@dataclass(frozen=True)
class Plan:
    """The mini-batches of one generation batch, with the token accounting around them."""

    minibatches: tuple[MiniBatch, ...]
    method: str
    probs: torch.Tensor | None
    advantages: torch.Tensor
    skipped: str | None
    tokens_plain: int
    tokens_nonzero: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Tokens fed to forward/backward over the whole plan (the x-axis of the paper's plots)."""
        return sum(mb.tokens for mb in self.minibatches)

    @property
    def rows_drawn(self) -> int:
        return sum(mb.num_draws for mb in self.minibatches)

    @property
    def rows_fed(self) -> int:
        """Rows run through forward/backward (fewer than drawn when duplicates are merged)."""
        return sum(int(mb.indices.numel()) for mb in self.minibatches)

    @property
    def rows_unique(self) -> int:
        """Distinct pool rows used anywhere in the plan."""
        if not self.minibatches:
            return 0
        return int(torch.unique(torch.cat([mb.indices for mb in self.minibatches])).numel())


def _as_vector(x: Any, name: str, dtype: torch.dtype) -> torch.Tensor:
    t = torch.as_tensor(x).detach().cpu()
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per row), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} must not be empty")
    t = t.to(dtype)
    if dtype.is_floating_point:
        bad = ~torch.isfinite(t)
        if bad.any():
            i = int(torch.nonzero(bad)[0])
            raise ValueError(f"{name} must be finite, got {t[i].item()} at row {i}")
    return t


def pods_select(rewards: torch.Tensor, group_size: int, keep: int) -> torch.Tensor:
    """PODS max-variance down-sampling: per group, the ``keep`` rows whose rewards vary most.

    For sorted rewards the max-variance subset of size m takes the k largest and the m−k smallest
    for some k (Xu et al. 2025, arXiv 2504.13818, Lemma 1); k is searched for all groups at once.
    Returns a boolean mask over rows.
    """
    g = rewards.reshape(-1, group_size).to(torch.float64)
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


def _group_advantages_masked(rewards: torch.Tensor, group_size: int, mask: torch.Tensor) -> torch.Tensor:
    """GRPO advantages recomputed over the kept rows of each group (TRL's std convention)."""
    r = rewards.reshape(-1, group_size).to(torch.float64)
    k = mask.reshape(-1, group_size).to(torch.float64)
    n = k.sum(1, keepdim=True)
    mean = (r * k).sum(1, keepdim=True) / n
    var = (((r - mean) ** 2) * k).sum(1, keepdim=True) / (n - 1).clamp(min=1)
    adv = (r - mean) / (var.sqrt() + 1e-4)
    return (adv * k).reshape(-1).to(torch.float32)


def _draw_until_tokens(p: np.ndarray, costs: torch.Tensor, budget: int, gen: torch.Generator | None):
    """i.i.d. draws from p until their summed cost first reaches ``budget``."""
    per_draw = float(p @ costs.double().numpy())
    out: list[torch.Tensor] = []
    spent = 0
    while spent < budget:
        n = max(16, int(1.2 * (budget - spent) / per_draw) + 16)
        d = _alias_draws(p, n, gen)
        cum = costs[d].cumsum(0) + spent
        hit = torch.nonzero(cum >= budget)
        if hit.numel():
            d = d[: int(hit[0]) + 1]
        out.append(d)
        spent = int(cum[d.numel() - 1])
    return torch.cat(out)


def _draw_until_fed_tokens(
    p: np.ndarray, costs: torch.Tensor, budget: int, num_minibatches: int, gen: torch.Generator | None
) -> tuple[torch.Tensor, list[int]]:
    """Per mini-batch, i.i.d. draws from p until its *distinct* rows hold ``budget / num_minibatches`` tokens.

    With duplicates merged, a mini-batch feeds each distinct row once, so this matches the tokens
    actually fed (not the drawn ones) to the baseline's. A mini-batch whose support holds fewer
    tokens than its share stops once it has every row of the support. Returns the draws and the
    number of draws of each mini-batch.
    """
    c = costs.numpy()
    support = np.flatnonzero(p > 0)
    share = budget / num_minibatches
    reachable = min(share, float(c[support].sum()))
    per_draw = float(p @ c)
    out: list[torch.Tensor] = []
    sizes: list[int] = []
    for _ in range(num_minibatches):
        seen = np.zeros(p.size, dtype=bool)
        spent, taken = 0.0, 0
        while spent < reachable:
            k = max(16, int(1.5 * (reachable - spent) / per_draw) + 16)
            d = _alias_draws(p, k, gen).numpy()
            _, first = np.unique(d, return_index=True)
            first = first[~seen[d[first]]]  # first draws of rows this mini-batch has not fed yet
            gain = np.zeros(k)
            gain[first] = c[d[first]]
            cum = np.cumsum(gain) + spent
            hit = np.flatnonzero(cum >= reachable)
            if hit.size:
                d = d[: hit[0] + 1]
            seen[d] = True
            spent = float(cum[d.size - 1])
            out.append(torch.from_numpy(d))
            taken += d.size
        sizes.append(taken)
    return torch.cat(out), sizes


def _alias_draws(p: np.ndarray, size: int, gen: torch.Generator | None) -> torch.Tensor:
    """``size`` i.i.d. draws from p: Walker's alias table fed by the torch generator.

    About 6x faster than ``torch.multinomial`` with replacement at N = 65,536, and deterministic
    for a given generator state.
    """
    prob, alias_ = (torch.from_numpy(a) for a in build_alias(p))
    x = torch.rand(size, generator=gen, dtype=torch.float64) * p.size
    j = x.long().clamp_(max=p.size - 1)
    return torch.where(x - j < prob[j], j, alias_[j])


def _split_weighted(
    draws: torch.Tensor, w: torch.Tensor, costs: torch.Tensor, num_minibatches: int, merge: bool, n: int,
    sizes_given: list[int] | None = None,
) -> tuple[MiniBatch, ...]:
    if sizes_given is not None:
        sizes = torch.tensor(sizes_given)
    else:
        sizes = torch.tensor([c.numel() for c in draws.tensor_split(num_minibatches)])
    sizes = sizes[sizes > 0]
    if merge:  # one int32 sort for all mini-batches, keyed by (mini-batch, row)
        # numpy's integer sort is several times faster than torch's here
        chunk = np.repeat(np.arange(sizes.numel(), dtype=np.int64), sizes.numpy())
        keys = np.sort(chunk * n + draws.numpy())
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        counts = torch.from_numpy(np.diff(np.r_[first, keys.size]))
        keys = keys[first]
        rows = torch.from_numpy(keys % n)
        per_chunk = np.bincount(keys // n, minlength=sizes.numel()).tolist()
    else:
        rows, counts, per_chunk = draws, torch.ones_like(draws), sizes.tolist()
    weights = (w[rows] * counts).to(torch.float32)
    tokens = torch.zeros(len(per_chunk), dtype=torch.int64).index_add_(
        0, torch.repeat_interleave(torch.arange(len(per_chunk)), torch.tensor(per_chunk)), costs[rows]
    )
    return tuple(
        MiniBatch(indices=i, weights=wt, counts=c, num_draws=int(m), tokens=int(t))
        for i, wt, c, m, t in zip(
            rows.split(per_chunk), weights.split(per_chunk), counts.split(per_chunk), sizes.tolist(),
            tokens.tolist(), strict=True,
        )
    )


def _split_unweighted(rows: torch.Tensor, costs: torch.Tensor, num_minibatches: int) -> tuple[MiniBatch, ...]:
    return tuple(
        MiniBatch(
            indices=c,
            weights=torch.ones(c.numel(), dtype=torch.float32),
            counts=torch.ones_like(c),
            num_draws=int(c.numel()),
            tokens=int(costs[c].sum()),
        )
        for c in rows.tensor_split(num_minibatches)
        if c.numel()
    )


def plan_minibatches(
    advantages: Any,
    costs: Any,
    *,
    num_minibatches: int,
    minibatch_size: int | None = None,
    config: SamplingConfig | None = None,
    rewards: Any | None = None,
    group_size: int | None = None,
    generator: torch.Generator | None = None,
) -> Plan:
    """Build the policy-optimisation mini-batches for one pool of rollouts.

    Args:
        advantages: (N,) per-sequence advantages A_i.
        costs: (N,) per-sequence costs c_i > 0, in tokens (prompt + response).
        num_minibatches: optimiser steps the baseline takes on this pool.
        minibatch_size: draws per mini-batch; defaults to N // num_minibatches (the baseline's).
        config: the sampling method and its options.
        rewards, group_size: needed by ``pods`` (rows of one group contiguous).
        generator: drives every random choice, so a seeded generator gives the same plan.
    """
    config = config or SamplingConfig()
    adv = _as_vector(advantages, "advantages", torch.float32)
    cost = _as_vector(costs, "costs", torch.float64)
    if cost.shape != adv.shape:
        raise ValueError(f"costs has {cost.numel()} rows but advantages has {adv.numel()}")
    if (cost <= 0).any():
        i = int(torch.nonzero(cost <= 0)[0])
        raise ValueError(f"costs must be > 0, got {cost[i].item()} at row {i}")
    n = adv.numel()
    if int(num_minibatches) != num_minibatches or num_minibatches < 1:
        raise ValueError(f"num_minibatches must be a positive integer, got {num_minibatches!r}")
    if minibatch_size is None:
        minibatch_size = n // num_minibatches
    if int(minibatch_size) != minibatch_size or minibatch_size < 1:
        raise ValueError(
            f"minibatch_size must be a positive integer, got {minibatch_size!r} "
            f"(N={n}, num_minibatches={num_minibatches})"
        )
    cost_i = cost.round().to(torch.int64)
    abs_a = adv.abs()
    nonzero = abs_a > 0
    common = dict(
        method=config.method,
        tokens_plain=int(cost_i.sum()),
        tokens_nonzero=int(cost_i[nonzero].sum()),
    )

    if config.method == "none":
        perm = torch.randperm(n, generator=generator)
        return Plan(_split_unweighted(perm, cost_i, num_minibatches), probs=None, advantages=adv,
                    skipped=None, **common)

    if not nonzero.any():
        return Plan((), probs=None, advantages=adv, skipped="every advantage in the pool is zero",
                    **common)

    if config.method == "nonzero":
        rows = torch.nonzero(nonzero).reshape(-1)
        rows = rows[torch.randperm(rows.numel(), generator=generator)]
        return Plan(_split_unweighted(rows, cost_i, num_minibatches), probs=None, advantages=adv,
                    skipped=None, **common)

    if config.method == "pods":
        if rewards is None or group_size is None:
            raise ValueError("method 'pods' needs rewards and group_size")
        r = _as_vector(rewards, "rewards", torch.float64)
        if r.shape != adv.shape:
            raise ValueError(f"rewards has {r.numel()} rows but advantages has {n}")
        if int(group_size) != group_size or group_size < 2 or n % group_size:
            raise ValueError(f"group_size must be an integer >= 2 dividing N={n}, got {group_size!r}")
        keep = config.pods_keep or group_size // 2
        if keep > group_size:
            raise ValueError(f"pods_keep must be <= group_size={group_size}, got {keep}")
        mask = pods_select(r, group_size, keep)
        new_adv = _group_advantages_masked(r, group_size, mask)
        rows = torch.nonzero(mask & (new_adv != 0)).reshape(-1)
        if rows.numel() == 0:
            return Plan((), probs=None, advantages=new_adv, skipped="every kept PODS row has zero advantage",
                        **common)
        rows = rows[torch.randperm(rows.numel(), generator=generator)]
        return Plan(_split_unweighted(rows, cost_i, num_minibatches), probs=None, advantages=new_adv,
                    skipped=None, **common)

    # Drawing methods: p from the proxy |A| (optionally noised) and the costs.
    proxy = abs_a.double()
    if config.proxy_noise > 0:
        noise = torch.randn(n, generator=generator, dtype=torch.float64) * math.sqrt(config.proxy_noise)
        proxy = (proxy + noise).clamp(min=0.0)
        if not (proxy > 0).any():
            return Plan((), probs=None, advantages=adv, skipped="the noised proxy is zero on every row",
                        **common)
    g, c = proxy.numpy(), cost.numpy()
    if config.method == "p_star":
        p = dist.optimal(g, c)
    elif config.method == "p_smooth":
        p = dist.smoothed(dist.optimal(g, c), config.alpha)
    elif config.method == "inv_sqrt_cost":
        p = dist.inverse_sqrt_cost(c)
    elif config.method == "variance":
        p = dist.variance(g)
    else:  # uniform
        p = dist.uniform(n)
    w = torch.from_numpy(dist.importance_weights(p, None, config.weights))
    p_t = torch.from_numpy(np.asarray(p))
    sizes = None
    if config.budget == "rows":
        draws = _alias_draws(p, num_minibatches * minibatch_size, generator)
    elif config.merge_duplicates:  # match the tokens fed, which merging makes fewer than those drawn
        draws, sizes = _draw_until_fed_tokens(p, cost_i, common["tokens_plain"], num_minibatches, generator)
    else:
        draws = _draw_until_tokens(p, cost_i, common["tokens_plain"], generator)
    mbs = _split_weighted(draws, w, cost_i, num_minibatches, config.merge_duplicates, n, sizes)
    return Plan(mbs, probs=p_t.to(torch.float32), advantages=adv, skipped=None, **common)
