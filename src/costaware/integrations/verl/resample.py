"""Resample verl's actor batch into Cost-Aware GRPO mini-batches (pure torch + ``verl.DataProto``).

The actor workers cut the batch they receive into ``dp`` contiguous chunks (one per data-parallel rank),
and each rank cuts its chunk into consecutive mini-batches of ``minibatch_size / dp`` rows
(``ppo_epochs=1``, ``shuffle=false``). Global mini-batch j is therefore the union over ranks r of rows
``[r*L + j*s, r*L + (j+1)*s)`` with ``s = minibatch_size / dp`` and ``L = num_minibatches * s``.
``plan_resampling`` lays the drawn rows out in that order, so the j-th mini-batch verl runs is exactly the
j-th mini-batch of the plan, and (``balance_dp``) deals each mini-batch's rows to ranks so their token
counts are near-equal.

>>> import torch
>>> from verl import DataProto
>>> from costaware.integrations.verl import CostAwareConfig, resample_dataproto
>>> mask = torch.ones(8, 6, dtype=torch.long)
>>> batch = DataProto.from_dict({
...     "attention_mask": mask, "response_mask": mask[:, 3:],
...     "advantages": torch.tensor([1., -1, 0, 0, 2, -2, 0, 0])[:, None] * mask[:, 3:]})
>>> res = resample_dataproto(batch, CostAwareConfig(), minibatch_size=4, dp_size=2,
...                          generator=torch.Generator().manual_seed(0))
>>> len(res.batch), set(res.indices.tolist()) <= {0, 1, 4, 5}
(8, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from costaware.grpo.advantages import sequence_costs  # c_i = attention_mask.sum(-1), checked > 0
from costaware.integrations.verl.config import (
    CONFIG_KEY,
    DEFAULT_LOSS_AGG_MODE,
    VERL_LOSS_FAMILY,
    CostAwareConfig,
)
from costaware.integrations.verl.patch import WEIGHTS_KEY

if TYPE_CHECKING:
    from verl import DataProto


def sequence_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence advantage: the masked mean over response tokens (bs, T) -> (bs,).

    GRPO writes ``score_i * response_mask`` (one value on every response token), so this is A_i exactly;
    for token-level estimators (GAE, ...) it is the mean over the response. Rows without response
    tokens get 0 and are never drawn.
    """
    if advantages.shape != response_mask.shape or advantages.dim() != 2:
        raise ValueError(
            f"advantages and response_mask must both be (bs, response_len), got "
            f"{tuple(advantages.shape)} and {tuple(response_mask.shape)}"
        )
    mask = response_mask.to(torch.float64)
    values = advantages.to(torch.float64)
    if not torch.isfinite(values[mask > 0]).all():
        raise ValueError("advantages contain NaN or inf on response tokens")
    total = (values * mask).sum(-1)
    count = mask.sum(-1)
    return torch.where(count > 0, total / count.clamp(min=1.0), torch.zeros_like(total))


def tag_costs(tags: list[dict]) -> torch.Tensor:
    """c_i from trainer v1's per-row tags (``seq_len`` = prompt + response tokens); every c_i must be > 0."""
    costs = torch.tensor([int(tag["seq_len"]) for tag in tags], dtype=torch.int64)
    bad = torch.nonzero(costs <= 0).flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"tags[{i}]['seq_len'] must be > 0 (a row's token cost), got {int(costs[i])}")
    return costs


def loss_factors(
    minibatches: Any, lengths: torch.Tensor, loss_agg_mode: str = DEFAULT_LOSS_AGG_MODE
) -> torch.Tensor:
    """(k, m) per-row loss factors for verl from the plan's mini-batches (the one place to change them).

    verl divides every mini-batch loss by one normaliser shared by all its rows: its rows
    (``seq-mean-*``: m, fixed, so the factor is the importance weight) or its response tokens
    (``token-mean``: the drawn rows' tokens T_drawn, summed over ranks). A drawn T_drawn makes the step a
    ratio estimator, biased by O(1/m). The factor therefore rescales each step to the core's "pool"
    normaliser, T_j = (pool response tokens) · m / N, a constant: f = w · T_drawn / T_j, so that the
    step's loss is (1/T_j) Σ_d w_d L_d, whose expectation is the full batch's Σ_i L_i / (pool tokens)
    (``costaware.grpo.factors``; ``tests/test_verl_unbiased.py`` checks it through ``_update_actor``).
    """
    from costaware.grpo.factors import row_factors, step_normalisers

    family = VERL_LOSS_FAMILY[loss_agg_mode]
    lengths = lengths.to(torch.float64)
    norms = step_normalisers(
        minibatches, lengths, normaliser="pool", pool_rows=int(lengths.numel()), num_steps=len(minibatches)
    )
    return torch.stack([
        row_factors(family, mb.weights, lengths[mb.indices], num_ranks=1, draws=nm.draws, tokens=nm.tokens)
        for mb, nm in zip(minibatches, norms, strict=True)
    ]).to(torch.float32)  # fmt: skip


def step_generator(seed: int, step: int) -> torch.Generator:
    """Generator for training step ``step``: independent of how many steps this process has run."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))


def _balanced_rank_order(costs: torch.Tensor, dp_size: int) -> torch.Tensor:
    """(k, m) costs -> (k, m) permutation putting rank 0's m/dp rows first, then rank 1's, ...

    Snake deal of the rows sorted by decreasing cost (0,1,..,dp-1,dp-1,..,0,...): equal row counts per
    rank, token totals within one maximal row of each other.
    """
    k, m = costs.shape
    order = torch.argsort(costs, dim=1, descending=True, stable=True)
    position = torch.arange(m)
    lap, within = position // dp_size, position % dp_size
    rank = torch.where(lap % 2 == 0, within, dp_size - 1 - within)
    # Sorting by (rank, position) groups each rank's rows; rank depends only on the sorted position.
    group = torch.argsort(rank * m + position, stable=True)
    return torch.gather(order, 1, group.expand(k, m))


@dataclass(frozen=True)
class ResampleResult:
    """What one actor update runs.

    indices: (N,) rows of the original batch, in the order verl must receive them (None when skipped).
    weights: (N,) float32 importance weight of each draw (the plan's, 1/(n_supp p_i) or 1/(N p_i)).
    factors: (N,) float32 per-row loss factor verl multiplies in (:func:`loss_factors`: the weight, times
        the step's drawn-to-pool token ratio under ``token-mean``).
    batch: the resampled DataProto with ``rollout_is_weights`` set (None when skipped or not built).
    stats: per-step numbers for the metrics (tokens, tokens_plain, tokens_nonzero, rows_drawn, ...).
    skipped: why no update runs (every advantage is zero), else None.
    """

    indices: torch.Tensor | None
    weights: torch.Tensor | None
    factors: torch.Tensor | None
    batch: Any
    stats: dict[str, float]
    skipped: str | None


def plan_resampling(
    advantages: torch.Tensor,
    costs: torch.Tensor,
    config: CostAwareConfig,
    *,
    minibatch_size: int,
    dp_size: int,
    generator: torch.Generator,
    lengths: torch.Tensor | None = None,
    loss_agg_mode: str = DEFAULT_LOSS_AGG_MODE,
    regularised: bool = False,
) -> ResampleResult:
    """Draw the plan from per-sequence advantages and costs and lay it out for verl's workers.

    The number of draws equals the batch length N (the baseline's num_minibatches * minibatch_size), so
    verl runs the same number of optimizer steps on mini-batches of the same size. ``lengths`` are the
    rows' response tokens (the ``token-mean`` normaliser counts them; default: ``costs``).
    ``regularised``: the loss has a KL or entropy term, so a pool whose advantages are all zero is
    still drawn (by a full-support method) instead of skipped.
    """
    from costaware.grpo.plan import plan_minibatches

    n = int(advantages.shape[0])
    for name, value in (("minibatch_size", minibatch_size), ("dp_size", dp_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if costs.shape != (n,):
        raise ValueError(f"costs must have shape ({n},) like advantages, got {tuple(costs.shape)}")
    lengths = costs if lengths is None else lengths
    if lengths.shape != (n,):
        raise ValueError(f"lengths must have shape ({n},) like advantages, got {tuple(lengths.shape)}")
    if loss_agg_mode not in VERL_LOSS_FAMILY:
        raise ValueError(f"loss_agg_mode must be one of {sorted(VERL_LOSS_FAMILY)}, got {loss_agg_mode!r}")
    if n == 0 or n % minibatch_size:
        raise ValueError(
            f"the actor batch ({n} rows) must be a positive multiple of the mini-batch size "
            f"ppo_mini_batch_size * rollout.n = {minibatch_size}"
        )
    if minibatch_size % dp_size:
        raise ValueError(
            f"the mini-batch size ppo_mini_batch_size * rollout.n = {minibatch_size} must be divisible by the "
            f"data-parallel size {dp_size}"
        )
    num_minibatches = n // minibatch_size
    plan = plan_minibatches(
        advantages.to(torch.float32),
        costs,
        num_minibatches=num_minibatches,
        minibatch_size=minibatch_size,
        config=config.sampling_config(loss_agg_mode),
        generator=generator,
        keep_zero_pool=regularised,
    )
    stats: dict[str, float] = {
        "tokens_plain": float(plan.tokens_plain),
        "tokens_nonzero": float(plan.tokens_nonzero),
        "skipped": float(plan.skipped is not None),
    }
    if plan.skipped is not None:
        stats.update(tokens=0.0, rows_drawn=0.0, rows_unique=0.0)
        return ResampleResult(None, None, None, None, stats, plan.skipped)
    sizes = [int(mb.indices.numel()) for mb in plan.minibatches]
    if len(sizes) != num_minibatches or any(size != minibatch_size for size in sizes):
        raise RuntimeError(  # VERL_METHODS only holds methods that fill every mini-batch
            f"{CONFIG_KEY}.method={config.method!r} gave mini-batch sizes {sizes}, verl needs "
            f"{num_minibatches} x {minibatch_size}"
        )
    index = torch.stack([mb.indices.to(torch.int64) for mb in plan.minibatches])  # (k, m)
    weight = torch.stack([mb.weights.to(torch.float32) for mb in plan.minibatches])
    factor = loss_factors(plan.minibatches, lengths, loss_agg_mode)
    if config.balance_dp and dp_size > 1:
        perm = _balanced_rank_order(costs[index].to(torch.float64), dp_size)
        index, weight, factor = (torch.gather(t, 1, perm) for t in (index, weight, factor))
    per_rank = minibatch_size // dp_size
    # (k, dp, s) -> (dp, k, s): rank r's contiguous chunk holds its share of every mini-batch in order.
    index, weight, factor = (
        t.view(num_minibatches, dp_size, per_rank).transpose(0, 1).reshape(-1) for t in (index, weight, factor)
    )
    stats.update(
        tokens=float(costs[index].sum()),
        rows_drawn=float(index.numel()),
        rows_unique=float(torch.unique(index).numel()),
        weight_mean=float(weight.mean()),
        weight_largest=float(weight.max()),
    )
    return ResampleResult(index, weight, factor, None, stats, None)


def weighted_rollout_is_weights(
    existing: torch.Tensor | None, weights: torch.Tensor, response_shape: tuple[int, int]
) -> torch.Tensor:
    """(bs, T) weights for the loss: ``existing * w[:, None]``, or ``w`` broadcast when none exist."""
    if existing is None:
        return weights.to(torch.float32)[:, None].expand(*response_shape).clone()
    if tuple(existing.shape) != tuple(response_shape):
        raise ValueError(
            f"rollout_is_weights must be (bs, response_len) = {tuple(response_shape)}, got {tuple(existing.shape)}"
        )
    return existing * weights.to(existing.dtype)[:, None]


def resample_dataproto(
    batch: DataProto,
    config: CostAwareConfig,
    *,
    minibatch_size: int,
    dp_size: int,
    generator: torch.Generator,
    loss_agg_mode: str = DEFAULT_LOSS_AGG_MODE,
    regularised: bool = False,
) -> ResampleResult:
    """Resample a padded verl ``DataProto`` (trainer v0): every tensor and non-tensor field follows the rows.

    Needs ``advantages``, ``response_mask`` and ``attention_mask``; ``rollout_is_weights`` from rollout
    correction, if present, is multiplied by the row factors, else created; ``cost_aware_weights`` holds
    the factors alone (for the entropy and KL terms). ``global_token_num``
    in ``meta_info`` is rebuilt for the drawn rows.
    """
    for key in ("advantages", "response_mask", "attention_mask"):
        if batch.batch is None or key not in batch.batch.keys():
            raise ValueError(
                f"the actor batch lacks {key!r}; {CONFIG_KEY} runs after the advantages are computed"
            )
    td = batch.batch
    advantages = sequence_advantages(td["advantages"], td["response_mask"])
    costs = sequence_costs(td["attention_mask"])
    result = plan_resampling(
        advantages,
        costs,
        config,
        minibatch_size=minibatch_size,
        dp_size=dp_size,
        generator=generator,
        lengths=td["response_mask"].sum(-1),
        loss_agg_mode=loss_agg_mode,
        regularised=regularised,
    )
    if result.skipped is not None:
        return result
    assert result.indices is not None and result.factors is not None
    new = batch.select_idxs(result.indices)
    existing = new.batch["rollout_is_weights"] if "rollout_is_weights" in new.batch.keys() else None
    shape = tuple(new.batch["response_mask"].shape)
    new.batch["rollout_is_weights"] = weighted_rollout_is_weights(existing, result.factors, shape)
    # the factor alone, for the entropy and KL terms (the wrapped ppo_loss reads it)
    new.batch[WEIGHTS_KEY] = weighted_rollout_is_weights(None, result.factors, shape)
    new.meta_info = dict(batch.meta_info)  # select_idxs shares the dict with the source batch
    if "global_token_num" in new.meta_info:
        new.meta_info["global_token_num"] = costs[result.indices].tolist()
    return ResampleResult(result.indices, result.weights, result.factors, new, result.stats, None)
