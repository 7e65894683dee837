"""Resample verl's actor batch into Cost-Aware GRPO mini-batches (pure torch + ``verl.DataProto``).

The actor workers cut the batch they receive into ``dp`` contiguous chunks (one per data-parallel rank),
and each rank cuts its chunk into consecutive mini-batches of ``S / dp`` rows, S the ``mini_batch_size``
sent with the batch (``ppo_epochs=1``, ``shuffle=false``). Global mini-batch j is therefore the union over
ranks r of rows ``[r*L + j*s, r*L + (j+1)*s)`` with ``s = S / dp`` and ``L = num_minibatches * s``. S is
the largest step's rows rounded up to a multiple of ``dp`` (stock's ``ppo_mini_batch_size * rollout.n``
when nothing is merged or dropped); shorter steps are padded with zero-factor rows, and the caller tells
the workers S (``state.fed_minibatch_size``).
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
>>> res = resample_dataproto(batch, CostAwareConfig(), minibatch_size=4, dp_size=2, seed=0, step=0)
>>> len(res.batch), set(res.indices.tolist()) <= {0, 1, 4, 5}
(8, True)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from costaware._checks import integer
from costaware.grpo.accounting import StepCounts
from costaware.grpo.advantages import sequence_costs  # c_i = attention_mask.sum(-1), checked > 0
from costaware.grpo.step import GlobalPool, plan_round
from costaware.integrations.verl.config import (
    CONFIG_KEY,
    DEFAULT_LOSS_AGG_MODE,
    VERL_LOSS_FAMILY,
    WEIGHTS_KEY,
    CostAwareConfig,
)

# The normaliser each step's factors rescale to (costaware.grpo.factors): "pool", T_j = (pool response
# tokens) · m / N, a constant. verl divides every mini-batch by one normaliser shared by its rows: its rows
# (seq-mean-*: m, fixed, so the factor is the importance weight) or its drawn response tokens (token-mean:
# T_drawn, summed over ranks), which would make each step a ratio estimator, biased by O(1/m); with "pool"
# the factor is f = w · T_drawn / T_j and the step's loss (1/T_j) Σ_d w_d L_d, whose expectation is the full
# batch's Σ_i L_i / (pool tokens) (tests/test_verl_unbiased.py checks it through _update_actor, and that
# "draws", the per-draw normaliser, fails the same check).
NORMALISER = "pool"

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

    indices: (k·S,) rows of the original batch, in the order verl must receive them (None when skipped);
        padding rows (zero factor, equal shapes) are copies of the pool's cheapest row.
    weights: (k·S,) float32 importance weight × draw count of each fed row (0 on padding).
    factors: (k·S,) float32 per-row loss factor verl multiplies in (the core's, for the ``loss_agg_mode``'s
        family with :data:`NORMALISER`; 0 on padding).
    batch: the resampled DataProto with ``rollout_is_weights`` set (None when skipped or not built).
    counts: the round's accounting (:class:`~costaware.grpo.accounting.StepCounts`, ``po_seconds`` 0).
    skipped: why no update runs (every advantage is zero), else None.
    minibatch_size: S, the rows of every fed mini-batch (a multiple of the data-parallel size; the
        stock ``ppo_mini_batch_size * rollout.n`` when every step feeds as many rows as stock).
    advantages: (k·S,) float32 the plan's advantage of each fed row, or None when the method keeps the
        pool's (PODS-style methods recompute them over the kept rows).
    """

    indices: torch.Tensor | None
    weights: torch.Tensor | None
    factors: torch.Tensor | None
    batch: Any
    counts: StepCounts
    skipped: str | None
    minibatch_size: int = 0
    advantages: torch.Tensor | None = None


def plan_resampling(
    advantages: torch.Tensor,
    costs: torch.Tensor,
    config: CostAwareConfig,
    *,
    minibatch_size: int,
    dp_size: int,
    seed: int,
    step: int,
    lengths: torch.Tensor | None = None,
    loss_agg_mode: str = DEFAULT_LOSS_AGG_MODE,
    regularised: bool = False,
    rewards: torch.Tensor | None = None,
    group_size: int | None = None,
    epochs: int = 1,
    micro_batch_size: int | None = None,
) -> ResampleResult:
    """Draw the plan from per-sequence advantages and costs and lay it out for verl's workers.

    ``minibatch_size`` is the baseline's rows per optimiser step; verl runs as many optimiser steps as
    stock (N / minibatch_size). The core (:func:`costaware.grpo.step.plan_round`, drawn from
    ``plan_seed(seed, step)``) plans on one "rank" holding the whole batch (verl's normalisers are
    global, so the factors are those of one rank) and pads every step to the same S rows, a multiple of
    ``dp_size`` (verl's workers cut each rank's chunk into equal mini-batches): S is stock's size for
    the drawing methods without merging, and smaller when rows are merged or a subset is fed. The caller
    passes S to the workers as the mini-batch size. ``lengths`` are the rows' response tokens (the
    ``token-mean`` normaliser counts them; default: ``costs``). ``regularised``: the loss has a KL or
    entropy term, so a pool whose advantages are all zero is still drawn (by a full-support method)
    instead of skipped. ``rewards`` and ``group_size`` (contiguous groups) feed methods that
    ``needs_groups``; ``epochs`` scales the accounting (``ppo_epochs``). ``micro_batch_size``: the actor's
    ``ppo_micro_batch_size_per_gpu`` when it is fixed (no dynamic batch size): each rank's share of S must
    then be a multiple of it, so S is a multiple of ``dp_size * micro_batch_size``.
    """

    n = int(advantages.shape[0])
    minibatch_size = integer(minibatch_size, "minibatch_size", minimum=1, strict=True)
    dp_size = integer(dp_size, "dp_size", minimum=1, strict=True)
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
    row_multiple = dp_size
    if micro_batch_size is not None:
        micro_batch_size = integer(micro_batch_size, "micro_batch_size", minimum=1, strict=True, why=" or None")
        row_multiple = dp_size * micro_batch_size
        if minibatch_size % row_multiple:
            raise ValueError(
                f"the mini-batch size ppo_mini_batch_size * rollout.n = {minibatch_size} must be divisible by the "
                f"data-parallel size {dp_size} times ppo_micro_batch_size_per_gpu = {micro_batch_size}"
            )
    num_minibatches = n // minibatch_size
    rnd = plan_round(
        GlobalPool(advantages.to(torch.float32), costs, lengths.to(torch.float64), rewards=rewards),
        config.sampling_config(loss_agg_mode), seed=seed, step=step, family=VERL_LOSS_FAMILY[loss_agg_mode],
        num_steps=num_minibatches, minibatch_size=minibatch_size, normaliser=NORMALISER, keep_zero_pool=regularised,
        group_size=group_size, epochs=epochs, equal_steps=True, row_multiple=row_multiple,
    )  # fmt: skip
    if rnd.plan.skipped is not None:
        return ResampleResult(None, None, None, None, rnd.counts, rnd.plan.skipped)
    steps = rnd.steps[0]  # one rank: its steps are the plan's mini-batches, rows in the plan's order, padded
    size = int(steps[0].shard.rows.numel())  # equal_steps: every step has S rows
    index = torch.stack([s.shard.rows for s in steps])  # (k, S)
    weight = torch.stack([s.shard.weights for s in steps]).to(torch.float32)
    factor = torch.stack([s.factors for s in steps]).to(torch.float32)
    adv = torch.stack([s.advantages for s in steps]).to(torch.float32)
    if config.balance_dp and dp_size > 1:
        perm = _balanced_rank_order(costs[index].to(torch.float64), dp_size)
        index, weight, factor, adv = (torch.gather(t, 1, perm) for t in (index, weight, factor, adv))
    per_rank = size // dp_size
    # (k, dp, s) -> (dp, k, s): rank r's contiguous chunk holds its share of every mini-batch in order.
    index, weight, factor, adv = (
        t.view(num_minibatches, dp_size, per_rank).transpose(0, 1).reshape(-1) for t in (index, weight, factor, adv)
    )
    recomputed = adv if config.rule.needs_groups else None
    return ResampleResult(index, weight, factor, None, rnd.counts, None, size, recomputed)


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


def content_order(tokens: Any) -> torch.Tensor:
    """(N,) permutation sorting the rows by the tokens they hold, not by where they sit.

    verl's agent loop returns a group's n responses in the order the rollout servers finish them, so the
    same rollouts reach the actor in a different row order from run to run; a plan drawn over that
    order would differ too. Drawn over this order, the same seed and the same rollouts give the same
    plan (a resumed run repeats an uninterrupted one). ``tokens``: N 1-D tensors, each row's valid token
    ids (prompt and response, no padding). Rows holding the same tokens keep their relative order
    (a duplicated prompt's identical responses in two groups: the only case the order can still move).

    >>> content_order([torch.tensor([2, 1]), torch.tensor([1, 2])]).tolist() == content_order(
    ...     [torch.tensor([1, 2]), torch.tensor([2, 1])]).flip(0).tolist()
    True
    """
    keys = [
        hashlib.blake2b(r.detach().to(torch.int64).cpu().numpy().tobytes(), digest_size=16).digest() for r in tokens
    ]
    return torch.tensor(sorted(range(len(keys)), key=keys.__getitem__), dtype=torch.int64)


def valid_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
    """Each padded row's valid token ids (where ``attention_mask`` is 1)."""
    return [ids[mask.bool()] for ids, mask in zip(input_ids, attention_mask, strict=True)]


def group_order(uids: Any, group_size: int) -> torch.Tensor:
    """(N,) permutation putting each group's rows together (groups in order of first appearance, rows in
    batch order): the layout methods that ``needs_groups`` read. verl's ``balance_batch`` may have
    reordered the rows; every group must hold ``group_size`` (``rollout.n``) rows.

    >>> group_order(["b", "a", "b", "a"], 2).tolist()
    [0, 2, 1, 3]
    """
    first: dict[Any, int] = {}
    keys = [first.setdefault(u, len(first)) for u in list(uids)]
    sizes = torch.bincount(torch.tensor(keys, dtype=torch.int64), minlength=len(first))
    if len(keys) == 0 or bool((sizes != group_size).any()):
        bad = sorted({int(x) for x in sizes.tolist()} - {group_size})
        raise ValueError(
            f"methods that recompute group advantages need every uid to hold rollout.n={group_size} rows, "
            f"got groups of {bad or [0]} rows"
        )
    return torch.argsort(torch.tensor(keys, dtype=torch.int64), stable=True)


def row_rewards(td: Any) -> torch.Tensor:
    """(N,) each row's scalar reward: ``token_level_rewards`` (else ``token_level_scores``) summed."""
    for key in ("token_level_rewards", "token_level_scores"):
        if key in td.keys():
            return td[key].to(torch.float64).sum(-1)
    raise ValueError(
        f"{CONFIG_KEY}.method needs the rows' rewards (token_level_rewards or token_level_scores) in the batch"
    )


def resample_dataproto(
    batch: DataProto,
    config: CostAwareConfig,
    *,
    minibatch_size: int,
    dp_size: int,
    seed: int,
    step: int,
    loss_agg_mode: str = DEFAULT_LOSS_AGG_MODE,
    regularised: bool = False,
    group_size: int | None = None,
    epochs: int = 1,
    micro_batch_size: int | None = None,
) -> ResampleResult:
    """Resample a padded verl ``DataProto`` (trainer v0): every tensor and non-tensor field follows the rows.

    Needs ``advantages``, ``response_mask`` and ``attention_mask`` (and, for methods that
    ``needs_groups``, ``uid`` and the rewards, with ``group_size`` = ``rollout.n``: their recomputed
    advantages replace ``advantages``); ``rollout_is_weights`` from rollout correction, if present, is
    multiplied by the row factors, else created; ``cost_aware_weights`` holds the factors alone (for the
    entropy and KL terms). ``global_token_num`` in ``meta_info`` is rebuilt for the fed rows.
    """
    for key in ("advantages", "response_mask", "attention_mask"):
        if batch.batch is None or key not in batch.batch.keys():
            raise ValueError(f"the actor batch lacks {key!r}; {CONFIG_KEY} runs after the advantages are computed")
    td = batch.batch
    advantages = sequence_advantages(td["advantages"], td["response_mask"])
    costs = sequence_costs(td["attention_mask"])
    lengths = td["response_mask"].sum(-1)
    # the plan is drawn over rows in content order (the rollouts' arrival order varies from run to run)
    has_ids = "input_ids" in td.keys()
    order = content_order(valid_tokens(td["input_ids"], td["attention_mask"])) if has_ids else torch.arange(len(batch))
    rewards = None
    if config.rule.needs_groups:
        if group_size is None or "uid" not in batch.non_tensor_batch:
            raise ValueError(f"{CONFIG_KEY}.method={config.method!r} needs the rows' uid and rollout.n")
        order = order[group_order(batch.non_tensor_batch["uid"][order.numpy()], group_size)]
        rewards = row_rewards(td)[order]
    result = plan_resampling(
        advantages[order],
        costs[order],
        config,
        minibatch_size=minibatch_size,
        dp_size=dp_size,
        seed=seed,
        step=step,
        lengths=lengths[order],
        loss_agg_mode=loss_agg_mode,
        regularised=regularised,
        rewards=rewards,
        group_size=group_size if config.rule.needs_groups else None,
        epochs=epochs,
        micro_batch_size=micro_batch_size,
    )
    if result.skipped is not None:
        return result
    assert result.indices is not None and result.factors is not None
    indices = order[result.indices]
    new = batch.select_idxs(indices)
    existing = new.batch["rollout_is_weights"] if "rollout_is_weights" in new.batch.keys() else None
    shape = tuple(new.batch["response_mask"].shape)
    new.batch["rollout_is_weights"] = weighted_rollout_is_weights(existing, result.factors, shape)
    # the factor alone, for the entropy and KL terms (the wrapped ppo_loss reads it)
    new.batch[WEIGHTS_KEY] = weighted_rollout_is_weights(None, result.factors, shape)
    if result.advantages is not None:  # the method's own advantages over the rows it kept
        mask = new.batch["response_mask"]
        new.batch["advantages"] = result.advantages.to(new.batch["advantages"].dtype)[:, None] * mask
    new.meta_info = dict(batch.meta_info)  # select_idxs shares the dict with the source batch
    if "global_token_num" in new.meta_info:
        new.meta_info["global_token_num"] = costs[indices].tolist()
    return replace(result, indices=indices, batch=new)
