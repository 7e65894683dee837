"""What the verl wrappers keep on a trainer: its validated config, its counters, the token budget.

Shared by trainer v0 (``patch``), trainer v1 (``v1``) and the log-prob passes (``logprobs``), so that none
of them imports another's module: the import graph has no cycle. Cheap to import (stdlib only).
"""

from __future__ import annotations

import logging
from typing import Any

# the wrappers log under the patch module's name, as they always did
logger = logging.getLogger("costaware.integrations.verl.patch")
PATCH_MARK = "__costaware_cost_aware__"
_UNSET = object()


def mark_patched(wrapper: Any) -> Any:
    setattr(wrapper, PATCH_MARK, True)
    return wrapper


def cost_aware_config(trainer: Any) -> Any:
    """Validated CostAwareConfig of this trainer, or None (cached on the instance)."""
    cached = trainer.__dict__.get("_cost_aware_config", _UNSET)
    if cached is _UNSET:
        from costaware.integrations.verl.config import read_trainer_config

        cached = read_trainer_config(trainer.config)
        trainer.__dict__["_cost_aware_config"] = cached
        if cached is not None:
            logger.warning("costaware: Cost-Aware GRPO enabled in verl with %s", cached)
    return cached


def cost_aware_counters(trainer: Any) -> Any:
    from costaware.grpo.accounting import Counters

    counters = trainer.__dict__.get("_cost_aware_counters")
    if counters is None:
        counters = trainer.__dict__["_cost_aware_counters"] = Counters()
    return counters


def record_pool(trainer: Any, result: Any, seconds: float) -> dict[str, float]:
    """Add one pool (a ``resample.ResampleResult``) to the trainer's counters; the metrics to log
    (totals, this pool, the weights' summary).

    The trainer process sees the whole actor batch, so the round's counts are already global (every rank's).
    """
    from dataclasses import replace

    step = replace(result.counts, po_seconds=seconds)
    counters = cost_aware_counters(trainer)
    counters.add(step)
    metrics = counters.metrics(step)
    if result.weights is not None:
        metrics["cost_aware/weights/mean"] = float(result.weights.mean())
        metrics["cost_aware/weights/max"] = float(result.weights.max())
    if result.factors is not None:  # what the workers multiply in (``actor/cost_aware/loss/factors_mean``)
        metrics["cost_aware/factors/mean"] = float(result.factors.mean())
    return metrics


def trainer_minibatch_size(trainer: Any) -> int:
    config = trainer.config
    return int(config.actor_rollout_ref.actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n)


def actor_micro_batch(trainer: Any) -> int | None:
    """The actor's fixed ``ppo_micro_batch_size_per_gpu`` (None with a dynamic batch size): each rank's
    share of a fed mini-batch must be a multiple of it."""
    actor = trainer.config.actor_rollout_ref.actor
    micro = actor.get("ppo_micro_batch_size_per_gpu", None) if hasattr(actor, "get") else None
    if not micro or (actor.get("use_dynamic_bsz", False) if hasattr(actor, "get") else False):
        return None
    return int(micro)


def dp_size_v1(trainer: Any) -> int:
    worker_group = trainer.actor_rollout_wg
    if "actor" not in worker_group._dispatch_info:
        worker_group._dispatch_info["actor"] = worker_group._query_dispatch_info("actor")
    return max(worker_group._dispatch_info["actor"]) + 1


class TokenBudgetReached(Exception):
    """Raised at the start of the step after the PO-token budget was reached; the wrapped ``fit`` returns."""


def budget_spent(trainer: Any) -> bool:
    """True once ``token_budget`` (> 0) PO tokens have been fed (logged once when first seen)."""
    budget = cost_aware_config(trainer).token_budget
    if not budget or cost_aware_counters(trainer).tokens < budget:
        return False
    if not trainer.__dict__.get("_cost_aware_budget_logged"):
        trainer.__dict__["_cost_aware_budget_logged"] = True
        logger.warning(
            "costaware: %s PO tokens reached the token_budget %s at step %s; training stops",
            cost_aware_counters(trainer).tokens,
            budget,
            trainer.global_steps,
        )
    return True


class fed_minibatch_size:  # noqa: N801  (a context manager, used like a function)
    """Within the block, the actor worker group's ``update_actor`` gets ``size`` rows per mini-batch.

    verl's ``_update_actor`` (v0 and v1) sends ``mini_batch_size`` and ``global_batch_size`` =
    ``ppo_mini_batch_size * rollout.n`` with the batch; the worker cuts each rank's chunk into mini-batches
    of ``mini_batch_size / dp`` rows and the seq-mean loss modes divide by ``global_batch_size``. The
    plan's mini-batches hold ``size`` rows (fewer when rows are merged or a subset is fed), so both are set
    to ``size`` on the way to the workers; the number of mini-batches (optimiser steps) stays stock's.
    ``size`` equal to ``stock`` (stock's size) leaves the worker group untouched.
    """

    def __init__(self, worker_group: Any, size: int, stock: int) -> None:
        self.wg, self.size, self.active = worker_group, int(size), int(size) != int(stock)

    def __enter__(self) -> None:
        if not self.active:
            return
        wg, size = self.wg, self.size
        self.had = "update_actor" in vars(wg)  # Ray worker groups bind their methods on the instance
        original = wg.update_actor

        def update_actor(data, *args, **kwargs):
            info = getattr(data, "extra_info", None)  # trainer v1: KVBatchMeta
            if info is not None:
                info.update(mini_batch_size=size, global_batch_size=size)
            else:  # trainer v0: TensorDict with non-tensor entries
                from verl.utils import tensordict_utils as tu

                tu.assign_non_tensor(data, mini_batch_size=size, global_batch_size=size)
            return original(data, *args, **kwargs)

        self.original = original
        wg.update_actor = update_actor

    def __exit__(self, *exc: Any) -> None:
        if not self.active:
            return
        if self.had:
            self.wg.update_actor = self.original
        else:
            del self.wg.update_actor
