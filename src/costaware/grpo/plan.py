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
from typing import Any, cast

import numpy as np
import torch

from costaware import distributions as dist
from costaware._checks import check_container, integer, show
from costaware.alias import MAX_DRAWS, build_alias_kernel, draw
from costaware.grpo._draws import draw_until_fed_tokens, draw_until_tokens, gather, merge_chunks
from costaware.grpo.config import MAX_STEPS, METHODS, SamplingConfig
from costaware.grpo.methods import Drawing, RowPool, Subset

__all__ = ["METHODS", "SamplingConfig", "MiniBatch", "Plan", "plan_minibatches"]

_MAX_COST = 2**53  # costs are summed as int64 token counts; above this float64 loses integers


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
    """The mini-batches of one generation batch, with the token accounting around them.

    ``meta`` of a drawing plan holds ``draw_cap_hit``, and ``proxy``, ``beta`` and ``alpha``: the
    proxy, β and smoothing α its p used (β and α are None for methods that do not use them).
    """

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
    """``x`` as a finite 1-D CPU tensor of ``dtype``; the rule of :mod:`costaware._checks`.

    The conversion is torch's (``torch.as_tensor`` then ``.to(dtype)``), kept so that every plan is
    the same as before: a list of Python floats passes through float32, as it always did.
    """
    check_container(x, name, "a 1-D array-like of numbers")
    try:
        t = torch.as_tensor(x).detach().cpu()
    except (TypeError, ValueError, RuntimeError) as exc:  # ragged lists, None inside, non-numbers
        raise ValueError(f"{name} must be a 1-D array of numbers, got {show(x)}: {exc}") from None
    if t.is_complex():
        raise ValueError(f"{name} must be real, got complex dtype {t.dtype}: {show(t.numpy())}")
    if t.dtype == torch.bool:
        raise ValueError(f"{name} must hold numbers, not booleans, got {show(t.numpy())}")
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per row), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} must not be empty, got {show(t.numpy())}")
    t = t.to(dtype)
    a = t.numpy()
    if not np.isfinite(a).all():  # numpy: several times faster than torch.isfinite(t).any() here
        i = int(np.flatnonzero(~np.isfinite(a))[0])
        raise ValueError(f"{name} must be finite, got {a[i]} at row {i}")
    return t


def _oracle_norms(grad_norms: Any | None, config: SamplingConfig, n: int) -> np.ndarray | None:
    """``grad_norms`` as float64 for ``proxy="oracle"`` (which needs them), else None (they must be absent)."""
    if config.proxy != "oracle":
        if grad_norms is not None:
            raise ValueError(f"grad_norms is read by proxy='oracle' alone, got it with proxy={config.proxy!r}")
        return None
    if grad_norms is None:
        raise ValueError("proxy='oracle' needs grad_norms (every row's exact gradient norm), got None")
    g = _as_vector(grad_norms, "grad_norms", torch.float64).numpy()
    if g.size != n:
        raise ValueError(f"grad_norms has {g.size} rows but advantages has {n}")
    if (g < 0).any():
        i = int(np.flatnonzero(g < 0)[0])
        raise ValueError(f"grad_norms must be >= 0, got {g[i]} at row {i}")
    return g


def _numpy_rng(gen: torch.Generator | None) -> np.random.Generator:
    """A numpy generator seeded from the torch one, so that a seeded torch generator fixes the plan."""
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=gen)))


def _split_weighted(
    draws: np.ndarray,
    w: np.ndarray,
    costs: np.ndarray,
    num_minibatches: int,
    merge: bool,
    n: int,
    sizes_given: list[int] | None = None,
) -> tuple[MiniBatch, ...]:
    """The drawn rows as mini-batches: consecutive chunks of ``draws`` (``sizes_given``, or
    ``num_minibatches`` near-equal chunks as ``torch.tensor_split`` makes them), duplicates merged."""
    if sizes_given is not None:
        sizes = np.asarray(sizes_given, dtype=np.int64)
    else:
        q, r = divmod(draws.size, num_minibatches)
        sizes = np.array([q + 1] * r + [q] * (num_minibatches - r), dtype=np.int64)
    sizes = sizes[sizes > 0]
    if merge:
        rows, counts, per_chunk = merge_chunks(draws, sizes, n)
    else:
        rows, counts, per_chunk = draws, np.ones_like(draws), sizes
    weights, tokens = gather(rows, counts, per_chunk, w, costs)
    tokens, split = tokens.tolist(), per_chunk.tolist()
    return tuple(
        MiniBatch(indices=i, weights=wt, counts=c, num_draws=int(m), tokens=int(t))
        for i, wt, c, m, t in zip(
            torch.from_numpy(rows).split(split),
            torch.from_numpy(weights).split(split),
            torch.from_numpy(counts).split(split),
            sizes.tolist(),
            tokens,
            strict=True,
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
    keep_zero_pool: bool = False,
    grad_norms: Any | None = None,
) -> Plan:
    """Build the policy-optimisation mini-batches for one pool of rollouts.

    Args:
        advantages: (N,) per-sequence advantages A_i.
        costs: (N,) per-sequence costs c_i > 0, in tokens (prompt + response).
        num_minibatches: optimiser steps the baseline takes on this pool.
        minibatch_size: draws per mini-batch; defaults to N // num_minibatches (the baseline's).
        config: the sampling method and its options; the plan calls its method object
            (``config.rule``, :mod:`costaware.grpo.methods`) for p or for the rows.
        rewards, group_size: needed by a method that ``needs_groups`` (``pods``, ``cost_pods``; rows of
            one group contiguous).
        generator: drives every random choice, so a seeded generator gives the same plan.
        keep_zero_pool: the loss has terms with a gradient on every row (a KL penalty, an entropy
            bonus), so a pool whose advantages are all zero still has an expected update. A
            full-support method then draws it instead of skipping it: ``p_smooth`` from its
            advantage-free part, the uniform α/N renormalised (p* has no mass), the others from
            their own p. Other methods still skip (no row is drawable).
        grad_norms: (N,) every row's exact gradient norm ‖∇ℓ_i‖ >= 0, read by ``proxy="oracle"`` alone
            (required there, refused elsewhere): p is built from it in place of |A| (rows with A = 0 still
            get the proxy's 0).

    On several ranks, build the plan on the *global* pool (every rank's rows, in rank order) with
    the same seed on every rank, then give each rank its part with
    :func:`costaware.grpo.shard.shard_minibatches`.
    """
    config = config or SamplingConfig()
    pool = _checked_pool(advantages, costs, config, num_minibatches, minibatch_size, rewards, group_size,
                         keep_zero_pool, grad_norms)  # fmt: skip
    method = config.rule
    common: dict[str, Any] = dict(
        method=config.method,
        tokens_plain=int(pool.tokens.sum()),
        tokens_nonzero=int(pool.tokens[pool.nonzero].sum()),
    )
    # From here on every input is checked: the method's kernels and the weight, alias and draw kernels
    # below check nothing again (one plan used to validate the same p five times).
    keep_zero = keep_zero_pool and method.full_support
    if not method.plain and not pool.nonzero.any() and not keep_zero:
        return Plan((), probs=None, advantages=pool.adv, skipped="every advantage in the pool is zero", **common)
    if not method.weighted:
        assert isinstance(method, Subset)  # every unweighted method is one
        return _subset_plan(method, pool, config, generator, common)
    assert isinstance(method, Drawing)  # every weighted method is one
    return _drawn_plan(method, pool, config, generator, keep_zero, common)


@dataclass(frozen=True)
class _Pool:
    """One checked pool, as the plan's kernels read it (numpy; torch views of the same memory where a torch
    op needs them: a torch op on 65,536 rows costs several times its numpy twin, and the plan's goal is
    < 5 ms at that size)."""

    adv: torch.Tensor  # (N,) float32 advantages
    costs: np.ndarray  # (N,) float64 costs as given
    tokens: np.ndarray  # (N,) int64 tokens each row feeds: the cost rounded, at least 1
    abs_adv: np.ndarray  # (N,) float64 |A|
    nonzero: np.ndarray  # (N,) bool: |A| above the tolerance
    rewards: torch.Tensor | None  # for a method that needs groups
    group_size: int | None
    oracle: np.ndarray | None  # every row's exact gradient norm (proxy="oracle" only)
    num_minibatches: int
    minibatch_size: int


def _checked_pool(
    advantages: Any,
    costs: Any,
    config: SamplingConfig,
    num_minibatches: Any,
    minibatch_size: Any,
    rewards: Any,
    group_size: Any,
    keep_zero_pool: Any,
    grad_norms: Any,
) -> _Pool:
    """Every argument of :func:`plan_minibatches` checked, in the order its errors are raised."""
    if not isinstance(config, SamplingConfig):
        raise ValueError(f"config must be a SamplingConfig, got {type(config).__name__}")
    adv = _as_vector(advantages, "advantages", torch.float32)
    cost = _as_vector(costs, "costs", torch.float64)
    if cost.shape != adv.shape:
        raise ValueError(f"costs has {cost.numel()} rows but advantages has {adv.numel()}")
    cost_np = cost.numpy()
    if not ((cost_np > 0).all() and cost_np.max() <= _MAX_COST):
        i = int(np.flatnonzero((cost_np <= 0) | (cost_np > _MAX_COST))[0])
        raise ValueError(f"costs must lie in (0, 2**53], got {cost_np[i]} at row {i}")
    n = adv.numel()
    # the rule of costaware._checks, with upper bounds: both counts size arrays and loops
    num_minibatches = integer(num_minibatches, "num_minibatches", minimum=1, maximum=MAX_STEPS)
    if minibatch_size is None:
        if n < num_minibatches:
            raise ValueError(f"num_minibatches must be <= the pool's N={n} rows, got {num_minibatches}")
        minibatch_size = n // num_minibatches
    minibatch_size = integer(minibatch_size, "minibatch_size", minimum=1, maximum=MAX_DRAWS // num_minibatches)
    if not isinstance(keep_zero_pool, bool):
        raise TypeError(f"keep_zero_pool must be True or False, got {keep_zero_pool!r}")
    method = config.rule
    oracle = _oracle_norms(grad_norms, config, n)
    r = None
    if method.needs_groups:
        if rewards is None or group_size is None:
            raise ValueError(f"method {config.method!r} needs rewards and group_size")
        r = _as_vector(rewards, "rewards", torch.float64)
        if r.shape != adv.shape:
            raise ValueError(f"rewards has {r.numel()} rows but advantages has {n}")
        group_size = integer(group_size, "group_size", minimum=2)
        if n % group_size:
            raise ValueError(f"group_size must be an integer >= 2 dividing N={n}, got {group_size!r}")
    abs_np = np.abs(adv.numpy()).astype(np.float64)
    return _Pool(
        adv=adv,
        costs=cost_np,
        tokens=np.maximum(np.round(cost_np), 1.0).astype(np.int64),  # a fractional cost still feeds one token
        abs_adv=abs_np,
        # float rounding of a row equal to its group's mean is not signal (see SamplingConfig.zero_tol)
        nonzero=abs_np > config.zero_tol * abs_np.max(),
        rewards=r,
        group_size=group_size,
        oracle=oracle,
        num_minibatches=num_minibatches,
        minibatch_size=minibatch_size,
    )


def _subset_plan(
    method: Subset, pool: _Pool, config: SamplingConfig, generator: torch.Generator | None, common: dict[str, Any]
) -> Plan:
    """An unweighted method: its subset of the pool, run once, shuffled."""
    nonzero = torch.from_numpy(pool.nonzero)
    sel = method.select(RowPool(pool.adv, nonzero, pool.costs, pool.rewards, pool.group_size, float(config.zero_tol)))
    if sel.skipped is not None:
        return Plan((), probs=None, advantages=sel.advantages, skipped=sel.skipped, **common)
    if sel.rows is None:  # every row: the permutation itself
        rows = torch.randperm(pool.adv.numel(), generator=generator)
    else:
        rows = sel.rows[torch.randperm(sel.rows.numel(), generator=generator)]
    return Plan(
        _split_unweighted(rows, torch.from_numpy(pool.tokens), pool.num_minibatches),
        probs=None,
        advantages=sel.advantages,
        skipped=None,
        **common,
    )


def _drawn_plan(
    method: Drawing,
    pool: _Pool,
    config: SamplingConfig,
    generator: torch.Generator | None,
    keep_zero: bool,
    common: dict[str, Any],
) -> Plan:
    """A drawing method: p from the proxy |A| (zero below the tolerance, optionally noised) and the costs,
    rows drawn i.i.d. from it, each with its importance weight."""
    adv, n, nonzero_np = pool.adv, pool.adv.numel(), pool.nonzero
    proxy = np.where(nonzero_np, pool.abs_adv, 0.0)
    if pool.oracle is not None:  # the exact norms in place of |A|, on the same rows
        proxy = np.where(nonzero_np, pool.oracle, 0.0)
        if not (proxy > 0).any() and not keep_zero:
            return Plan((), probs=None, advantages=adv, skipped="every row's gradient norm is zero", **common)
    if config.proxy_noise > 0:
        noise = torch.randn(n, generator=generator, dtype=torch.float64) * math.sqrt(config.proxy_noise)
        proxy = (torch.from_numpy(proxy) + noise).clamp(min=0.0).numpy()
        if not (proxy > 0).any() and not keep_zero:
            return Plan((), probs=None, advantages=adv, skipped="the noised proxy is zero on every row", **common)
    drawn = method.probs(proxy, pool.costs, config.beta)
    p, beta, alpha = drawn.p, drawn.beta, drawn.alpha
    try:
        w = dist.importance_weights_kernel(p, cast(dist.WeightMode, config.weights))  # SamplingConfig checked it
    except ValueError as exc:  # name what the caller can change
        raise ValueError(
            f"advantages and costs (with alpha={alpha!r}, beta={beta!r}) give a row so small a probability "
            f"that its importance weight overflows float64: {exc}"
        ) from None
    draws, sizes, capped = _draws(build_alias_kernel(p), p, pool, config, common["tokens_plain"], generator)
    mbs = _split_weighted(draws, w, pool.tokens, pool.num_minibatches, config.merge_duplicates, n, sizes)
    return Plan(
        mbs,
        probs=torch.from_numpy(np.asarray(p)).to(torch.float32),
        advantages=adv,
        skipped=None,
        meta={"draw_cap_hit": capped, "proxy": config.proxy, "beta": beta, "alpha": alpha},
        **common,
    )


def _draws(
    table: tuple[np.ndarray, np.ndarray],
    p: np.ndarray,
    pool: _Pool,
    config: SamplingConfig,
    tokens_plain: int,
    generator: torch.Generator | None,
) -> tuple[Any, Any, bool]:
    """The plan's draws from the alias ``table`` (built once per plan) under the config's budget: (draws, the
    mini-batches' sizes when merged, whether the draw cap was hit)."""
    rng = _numpy_rng(generator)
    m, k = pool.minibatch_size, pool.num_minibatches
    cap = max(1, min(int(config.max_draws_factor * m), MAX_DRAWS // k))
    if config.budget == "rows":
        return draw(*table, k * m, rng, validate=False), None, False
    if config.budget == "support":  # `nonzero`'s row count, drawn cost-aware (fixed by the pool: unbiased)
        return draw(*table, max(k, int(pool.nonzero.sum())), rng, validate=False), None, False
    if config.merge_duplicates:  # match the tokens fed, which merging makes fewer than those drawn
        return draw_until_fed_tokens(table, p, pool.tokens, tokens_plain, k, cap, rng)
    draws, capped = draw_until_tokens(table, p, pool.tokens, tokens_plain, cap * k, rng, k)
    return draws, None, capped
