"""Per-row loss factors that make an engine's own loss equal the plan's importance-weighted loss.

An engine computes, per rank and micro-step, its stock loss over the rows it is fed; data-parallel
training averages the P ranks' gradients. The plan wants, for optimiser step j,

    L_j = (1/M_j) Σ_{draws d of step j} w_d ℓ_d        (row-mean family; ℓ = a row's sequence-mean loss)
    L_j = (1/T_j) Σ_{draws d of step j} w_d L_d        (token-mean family; L = a row's token-sum loss)
    L_j = (1/T)   Σ_{draws d of step j} w_d L_d        (global-token family; T fixed over the pool)

where (M_j, T_j, T) are the normalisers of :func:`step_normalisers`. A row merged from k draws
stands for k·w. :func:`row_factors` gives the factor f_i to multiply row i's stock loss by, so
that the rank-averaged stock loss equals L_j exactly:

* row mean (TRL grpo, dr_grpo, luspo, sapo; verl seq-mean-*): a rank divides by its s fed rows
  (padding included), and DDP divides by P, so f = w·k · P·s / M_j;
* token mean (TRL bnpo): a rank divides by its fed completion tokens t_r (padding included), so
  f = w·k · P·t_r / T_j;
* global tokens (TRL dapo, cispo, vespo; verl token-mean with a global normaliser): the engine's
  normaliser is the same on every rank and is set to T (``num_items_in_batch``), so f = w·k.

Engine-neutral and pure: verl and TRL both call it.

>>> import torch
>>> row_factors("row_mean", torch.tensor([2.0, 1.0, 0.0]), torch.tensor([5.0, 3.0, 4.0]),
...             num_ranks=2, draws=4, tokens=16.0).tolist()
[3.0, 1.5, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from costaware.grpo.plan import MiniBatch

__all__ = ["FAMILIES", "TRL_LOSS_FAMILY", "StepNormaliser", "step_normalisers", "global_tokens", "row_factors"]

FAMILIES = ("row_mean", "token_mean", "global_tokens")
# TRL 1.16 _compute_loss: which normaliser each loss_type divides by.
TRL_LOSS_FAMILY = {
    "grpo": "row_mean",
    "dr_grpo": "row_mean",  # divides by rows × max_completion_length: a constant per row
    "luspo": "row_mean",
    "sapo": "row_mean",
    "bnpo": "token_mean",
    "dapo": "global_tokens",
    "cispo": "global_tokens",
    "vespo": "global_tokens",
}
NORMALISERS = ("draws", "pool")


@dataclass(frozen=True)
class StepNormaliser:
    """What optimiser step j's weighted loss is divided by (global: the same on every rank)."""

    draws: float  # M_j, rows the step stands for
    tokens: float  # T_j, completion tokens the step stands for


def step_normalisers(
    minibatches: Sequence[MiniBatch], lengths: torch.Tensor, *, normaliser: str, pool_rows: int,
    num_steps: int, subset: bool = False,
) -> list[StepNormaliser]:
    """(M_j, T_j) for every step, from the *global* plan and the global per-row completion lengths.

    ``"draws"``: the step is stock loss on its drawn rows (duplicates counted): M_j = draws,
    T_j = completion tokens of the draws (verl's convention with a drawn mini-batch).
    ``"pool"``: the baseline's normaliser scaled to the step's draws: M_j = draws (a subset method's
    rows stand for the baseline's N/num_steps rows), T_j = (pool tokens) · M_j / N. With raw weights
    this makes Σ_j L_j an unbiased estimate of stock's loss (``tests/test_grpo_unbiased.py``).
    Steps past the plan get (0, 0): they hold padding only.

    With ``budget="tokens"`` the draws M_j are random and both normalisers divide by the realised
    M_j: a ratio estimator, biased by O(1/E[M_j]) (``tests/test_grpo_plan_hardening.py`` measures
    +5% on a 12-row pool with ~10 draws per step); dividing by E[M_j] would be unbiased (Wald).
    """
    if normaliser not in NORMALISERS:
        raise ValueError(f"normaliser must be one of {NORMALISERS}, got {normaliser!r}")
    lengths = torch.as_tensor(lengths, dtype=torch.float64)
    if lengths.ndim != 1 or lengths.numel() != pool_rows:
        raise ValueError(f"lengths must be (pool_rows={pool_rows},), got shape {tuple(lengths.shape)}")
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
    return float(sum(n.tokens for n in norms))


def row_factors(
    family: str, weights: torch.Tensor, fed_lengths: torch.Tensor, *, num_ranks: int, draws: float,
    tokens: float,
) -> torch.Tensor:
    """Loss factor per fed row of one rank in one step (see the module docstring).

    Args:
        family: one of :data:`FAMILIES`.
        weights: (s,) importance weight × draw count of each fed row, 0 for padding rows.
        fed_lengths: (s,) completion tokens of each fed row, padding rows included (they count in a
            token-mean engine's normaliser).
        num_ranks: P, the data-parallel ranks that average their gradients.
        draws, tokens: the step's :class:`StepNormaliser` (M_j, T_j).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.ndim != 1 or w.numel() == 0:
        raise ValueError(f"weights must be a non-empty 1-D tensor, got shape {tuple(w.shape)}")
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, int) or num_ranks < 1:
        raise ValueError(f"num_ranks must be a positive integer, got {num_ranks!r}")
    if family == "global_tokens":
        return w.clone()
    if family == "row_mean":
        # the rank divides by s rows (padding included) and DDP by P
        return w * (num_ranks * w.numel() / draws) if draws > 0 else torch.zeros_like(w)
    t_fed = max(float(torch.as_tensor(fed_lengths, dtype=torch.float64).sum()), 1.0)  # TRL clamps at 1
    return w * (num_ranks * t_fed / tokens) if tokens > 0 else torch.zeros_like(w)
