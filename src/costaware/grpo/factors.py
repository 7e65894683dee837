"""Per-row loss factors that make an engine's own loss equal the plan's importance-weighted loss.

An engine computes, per rank and micro-step, its stock loss over the rows it is fed; data-parallel
training averages the P ranks' gradients. The plan wants, for optimiser step j,

    L_j = (1/M_j) Σ_{draws d of step j} w_d ℓ_d        (row-mean family; ℓ = a row's sequence-mean loss)
    L_j = (1/T_j) Σ_{draws d of step j} w_d L_d        (token-mean family; L = a row's token-sum loss)
    L_j = (1/T)   Σ_{draws d of step j} w_d L_d        (global-token family; T fixed over the pool)

where (M_j, T_j, T) are the normalisers of :func:`step_normalisers`. A row merged from k draws
stands for k·w. :func:`row_factors` gives the factor f_i to multiply row i's stock loss by, so
that the rank-averaged stock loss equals L_j exactly:

* row mean: a rank divides by its s fed rows (padding included), and DDP divides by P, so
  f = w·k · P·s / M_j;
* token mean: a rank divides by its fed completion tokens t_r (padding included), so
  f = w·k · P·t_r / T_j;
* global tokens: the engine's normaliser is the same on every rank and is set to T
  (``num_items_in_batch``), so f = w·k.

Engine-neutral and pure: each engine adapter maps its own loss names to these families
(``integrations/trl/losses.py``, ``integrations/verl/config.py``) and reaches them through one call,
:func:`costaware.grpo.step.plan_round`, which checks the pool once and runs the kernels below.

>>> import torch
>>> row_factors("row_mean", torch.tensor([2.0, 1.0, 0.0]), torch.tensor([5.0, 3.0, 4.0]),
...             num_ranks=2, draws=4, tokens=16.0).tolist()
[3.0, 1.5, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from costaware._checks import boolean, check_container, integer, nonnegative_vector, positive_scalar, same_length
from costaware.grpo.config import MAX_STEPS
from costaware.grpo.plan import MiniBatch

__all__ = [
    "FAMILIES",
    "MAX_STEPS",
    "NORMALISERS",
    "StepNormaliser",
    "step_normalisers",
    "global_tokens",
    "row_factors",
    "step_normalisers_kernel",
    "row_factors_kernel",
]

FAMILIES = ("row_mean", "token_mean", "global_tokens")
NORMALISERS = ("draws", "pool")


@dataclass(frozen=True)
class StepNormaliser:
    """What optimiser step j's weighted loss is divided by (global: the same on every rank)."""

    draws: float  # M_j, rows the step stands for
    tokens: float  # T_j, completion tokens the step stands for


def step_normalisers(
    minibatches: Sequence[MiniBatch],
    lengths: torch.Tensor,
    *,
    normaliser: str,
    pool_rows: int,
    num_steps: int,
    subset: bool = False,
) -> list[StepNormaliser]:
    """(M_j, T_j) for every step, from the *global* plan and the global per-row completion lengths.

    ``"draws"``: the step is stock loss on its drawn rows (duplicates counted): M_j = draws,
    T_j = completion tokens of the draws (verl's convention with a drawn mini-batch).
    ``"pool"``: the baseline's normaliser scaled to the step's draws: M_j = draws (a subset method's
    rows stand for the baseline's N/num_steps rows), T_j = (pool tokens) · M_j / N. With raw weights
    this makes Σ_j L_j an unbiased estimate of stock's loss (``tests/test_grpo_unbiased.py``).
    Steps past the plan get (0, 0): they hold padding only. ``num_steps`` is at most :data:`MAX_STEPS`;
    ``lengths`` must be finite and >= 0.

    With ``budget="tokens"`` the draws M_j are random and both normalisers divide by the realised
    M_j: a ratio estimator, biased by O(1/E[M_j]) (``tests/test_grpo_plan_hardening.py`` measures
    +5% on a 12-row pool with ~10 draws per step); dividing by E[M_j] would be unbiased (Wald).
    """
    if not (isinstance(normaliser, str) and normaliser in NORMALISERS):
        raise ValueError(f"normaliser must be one of {NORMALISERS}, got {normaliser!r}")
    pool_rows = integer(pool_rows, "pool_rows", minimum=1)
    num_steps = integer(num_steps, "num_steps", minimum=1, maximum=MAX_STEPS)
    subset = boolean(subset, "subset")
    check_container(minibatches, "minibatches", "a sequence of MiniBatch", needs="__len__")
    if len(minibatches) > num_steps:
        raise ValueError(f"minibatches holds {len(minibatches)} steps, more than num_steps={num_steps}")
    lengths = torch.from_numpy(nonnegative_vector(lengths, "lengths", allow_empty=True))
    if lengths.numel() != pool_rows:
        raise ValueError(f"lengths must be (pool_rows={pool_rows},), got shape {tuple(lengths.shape)}")
    for j, mb in enumerate(minibatches):
        if mb.indices.numel() and not (0 <= int(mb.indices.min()) and int(mb.indices.max()) < pool_rows):
            raise ValueError(f"minibatches[{j}] holds rows outside the pool of pool_rows={pool_rows}")
    return step_normalisers_kernel(minibatches, lengths, normaliser, pool_rows, num_steps, subset)


def step_normalisers_kernel(
    minibatches: Sequence[MiniBatch],
    lengths: torch.Tensor,
    normaliser: str,
    pool_rows: int,
    num_steps: int,
    subset: bool,
) -> list[StepNormaliser]:
    """Kernel of :func:`step_normalisers` for checked inputs (a plan's own mini-batches, float64 lengths)."""
    pool_tokens = float(lengths.sum())
    out = []
    for j in range(num_steps):
        if j >= len(minibatches):
            out.append(StepNormaliser(0.0, 0.0))
            continue
        mb = minibatches[j]
        drawn_tokens = float((lengths[mb.indices] * mb.counts.to(torch.float64)).sum())
        if normaliser == "draws":
            out.append(StepNormaliser(float(mb.num_draws), drawn_tokens))
        else:
            m = pool_rows / num_steps if subset else float(mb.num_draws)
            out.append(StepNormaliser(m, pool_tokens * m / pool_rows))
    return out


def global_tokens(norms: Sequence[StepNormaliser]) -> float:
    """T of the global-token family: the tokens every step stands for, summed over the pool's steps.

    With ``"draws"`` this is the completion tokens of every draw of the plan; with ``"pool"`` it is
    the pool's completion tokens × (draws / N), stock's ``num_items_in_batch`` when draws = N.
    """
    check_container(norms, "norms", "a sequence of StepNormaliser", needs="__iter__")
    norms = list(norms)
    bad = [n for n in norms if not isinstance(n, StepNormaliser)]
    if bad:
        raise ValueError(f"norms must hold StepNormaliser entries, got {bad[0]!r}")
    return float(sum(n.tokens for n in norms))


def row_factors(
    family: str,
    weights: torch.Tensor,
    fed_lengths: torch.Tensor,
    *,
    num_ranks: int,
    draws: float,
    tokens: float,
) -> torch.Tensor:
    """Loss factor per fed row of one rank in one step (see the module docstring).

    Args:
        family: one of :data:`FAMILIES`.
        weights: (s,) importance weight × draw count of each fed row, 0 for padding rows.
        fed_lengths: (s,) completion tokens of each fed row, padding rows included (they count in a
            token-mean engine's normaliser).
        num_ranks: P, the data-parallel ranks that average their gradients.
        draws, tokens: the step's :class:`StepNormaliser` (M_j, T_j), finite and >= 0. A step with
            M_j = 0 (row mean) or T_j = 0 (token mean) holds padding only and gets factor 0; a T_j so
            small that a factor overflows is a ValueError.

    Weights must be finite and >= 0 (padding rows 0): a NaN weight is a ValueError, never a NaN loss.
    """
    if not (isinstance(family, str) and family in FAMILIES):
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    w = torch.from_numpy(nonnegative_vector(weights, "weights"))
    num_ranks = integer(num_ranks, "num_ranks", minimum=1)
    draws = positive_scalar(draws, "draws", allow_zero=True)
    tokens = positive_scalar(tokens, "tokens", allow_zero=True)
    fed = nonnegative_vector(fed_lengths, "fed_lengths") if family == "token_mean" else None
    if fed is not None:
        same_length(weights=w, fed_lengths=fed)
    return row_factors_kernel(family, w, fed, num_ranks, draws, tokens)


def row_factors_kernel(
    family: str, w: torch.Tensor, fed: np.ndarray | None, num_ranks: int, draws: float, tokens: float
) -> torch.Tensor:
    """Kernel of :func:`row_factors` for checked inputs: ``w`` float64 >= 0; ``fed`` the float64 fed
    lengths (read by the token-mean family only)."""
    if family == "global_tokens":
        return w.clone()
    if family == "row_mean":
        # the rank divides by s rows (padding included) and DDP by P; a step with no draws is padding only
        return (
            _finite_factors(w * (num_ranks * w.numel() / draws), "draws", draws) if draws > 0 else torch.zeros_like(w)
        )
    assert fed is not None  # the token-mean family, the only one left, always has it
    t_fed = max(float(fed.sum()), 1.0)  # TRL clamps at 1
    return _finite_factors(w * (num_ranks * t_fed / tokens), "tokens", tokens) if tokens > 0 else torch.zeros_like(w)


def _finite_factors(f: torch.Tensor, name: str, value: float) -> torch.Tensor:
    """``f``, or ValueError naming the normaliser so small (e.g. tokens=5e-324) that a factor overflows."""
    if not bool(torch.isfinite(f).all()):
        raise ValueError(f"{name}={value!r} is so small that a loss factor overflows float64")
    return f
