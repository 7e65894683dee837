"""Trainer v1 (``PPOTrainer`` on TransferQueue): the plan's rows under fresh keys for one actor update."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from costaware.integrations.verl.config import WEIGHTS_KEY
from costaware.integrations.verl.state import (
    actor_micro_batch,
    budget_spent,
    cost_aware_config,
    dp_size_v1,
    fed_minibatch_size,
    record_pool,
    trainer_minibatch_size,
)

logger = logging.getLogger("costaware.integrations.verl.patch")


def update_actor_v1(trainer: Any, batch: Any, metrics: dict, original: Any) -> Any:
    """Trainer v1 (``PPOTrainer`` on TransferQueue): same plan, every draw copied to a fresh key.

    TransferQueue keys are unique per batch, so the r-th draw of a row is stored under
    ``f"{key}#ca{step}.{r}"`` (all fields copied) for the duration of the update and cleared afterwards;
    the caller's rows are never written. ``rollout_is_weights`` of every drawn key is (existing weights,
    or 1) x (row factor) and ``cost_aware_weights`` the factor. The batch returned is the original one,
    so verl's reward/length metrics stay those of the generated rollouts.
    """
    import transfer_queue as tq
    from tensordict import TensorDict
    from transfer_queue import KVBatchMeta

    from costaware.integrations.verl.config import actor_loss
    from costaware.integrations.verl.logprobs import DEFERRED, pad_multiple
    from costaware.integrations.verl.resample import content_order, plan_resampling, tag_costs
    from costaware.integrations.verl.transfer import (
        duplicate_key_plan,
        nested_row_means,
        nested_row_sums,
        nested_scaled_weights,
    )

    cfg = cost_aware_config(trainer)
    deferred = trainer.__dict__.pop(DEFERRED, set())  # log-prob passes waiting for the plan
    if budget_spent(trainer):
        return batch
    start = time.perf_counter()
    pid = batch.partition_id
    if cfg.rule.needs_groups:
        raise ValueError(
            f"algorithm.cost_aware.method={cfg.method!r} recomputes group advantages, which the plugin does on "
            "trainer v0 only (trainer.use_v1=false); on trainer v1 use nonzero, p_star or p_smooth"
        )
    data = tq.kv_batch_get(keys=batch.keys, partition_id=pid, select_fields=["advantages", "response_mask"])
    mode, regularised = actor_loss(trainer.config)
    advantages = nested_row_means(data["advantages"], data["response_mask"])
    # the plan is drawn over rows in content order (the rollouts' arrival order varies from run to run)
    order = None
    if batch.fields is None or "input_ids" in batch.fields:
        ids = tq.kv_batch_get(keys=batch.keys, partition_id=pid, select_fields=["input_ids"])["input_ids"]
        order = content_order(ids.unbind(0))  # nested rows: the valid tokens
    result = plan_resampling(
        advantages if order is None else advantages[order],
        tag_costs(batch.tags) if order is None else tag_costs(batch.tags)[order],
        cfg,
        minibatch_size=trainer_minibatch_size(trainer),
        dp_size=dp_size_v1(trainer),
        seed=cfg.seed,  # the core's plan_seed; several triggers per step (separate_async) get their own
        step=trainer.global_steps * 1_000 + getattr(trainer, "local_trigger_step", 0),
        lengths=nested_row_sums(data["response_mask"])
        if order is None
        else nested_row_sums(data["response_mask"])[order],
        loss_agg_mode=mode,
        regularised=regularised,
        epochs=int(trainer.config.actor_rollout_ref.actor.ppo_epochs),
        micro_batch_size=actor_micro_batch(trainer),
    )
    if result.skipped is not None:
        logger.warning("costaware: step %s skips the actor update: %s", trainer.global_steps, result.skipped)
        metrics.update(record_pool(trainer, result, time.perf_counter() - start))
        return batch

    # where the plugin's time goes (TransferQueue copies, the update itself): cost_aware/timing/*
    marks = {"plan": time.perf_counter()}
    if order is not None:
        result = replace(result, indices=order[result.indices])
    assert result.indices is not None and result.factors is not None  # set whenever the step is not skipped
    new_keys, rounds = duplicate_key_plan(batch.keys, result.indices, tag=f"ca{trainer.global_steps}")
    copied: list[str] = []
    tag = f"ca{trainer.global_steps}"
    fed_fields = set(deferred)
    held: set[str] = set()  # the fields the copies hold (the batch's field list may predate the passes)
    try:
        for r, (source_keys, target_keys, source_rows) in enumerate(rounds):
            if r == 1 and deferred:  # the first draws hold the passes' values: later draws copy them
                passes = _fed_passes(trainer, batch, rounds[0], deferred, metrics, tag, copied, pad_multiple)
                metrics.update(passes)
            if r >= 1 and deferred:
                source_keys = [f"{batch.keys[i]}#{tag}.0" for i in source_rows]
            rows = tq.kv_batch_get(keys=source_keys, partition_id=pid)
            held |= set(rows.keys())
            tq.kv_batch_put(keys=target_keys, partition_id=pid, fields=rows, tags=[batch.tags[i] for i in source_rows])
            copied.extend(target_keys)
        if len(rounds) == 1 and deferred:
            metrics.update(_fed_passes(trainer, batch, rounds[0], deferred, metrics, tag, copied, pad_multiple))
        marks["copy"] = time.perf_counter()  # with deferred passes, they ran inside this phase
        has_weights = "rollout_is_weights" in held  # what the rows hold (a meta's field list may be None)
        fields = ["response_mask"] + (["rollout_is_weights"] if has_weights else [])
        current = tq.kv_batch_get(keys=new_keys, partition_id=pid, select_fields=fields)
        mask = current["response_mask"]
        factors = nested_scaled_weights(None, mask, result.factors)
        weights = nested_scaled_weights(current["rollout_is_weights"] if has_weights else None, mask, result.factors)
        written = {"rollout_is_weights": weights, WEIGHTS_KEY: factors}
        tq.kv_batch_put(keys=new_keys, partition_id=pid, fields=TensorDict(written, batch_size=len(new_keys)))
        extra = {"rollout_is_weights", WEIGHTS_KEY} | fed_fields | held
        resampled = KVBatchMeta(
            keys=new_keys,
            tags=[batch.tags[i] for i in result.indices.tolist()],
            partition_id=pid,
            fields=sorted(set(batch.fields or []) | extra) if batch.fields else None,
            extra_info=dict(batch.extra_info or {}),
        )
        marks["weights"] = time.perf_counter()
        with fed_minibatch_size(trainer.actor_rollout_wg, result.minibatch_size, trainer_minibatch_size(trainer)):
            original(trainer, resampled, metrics)
        marks["update"] = time.perf_counter()
    finally:
        if copied:
            tq.kv_clear(keys=copied, partition_id=pid)
    marks["clear"] = time.perf_counter()
    metrics.update(record_pool(trainer, result, time.perf_counter() - start))
    metrics.update(phase_seconds(start, marks))
    if budget_spent(trainer):  # v1's loop runs while global_steps <= total_training_steps
        trainer.total_training_steps = trainer.global_steps
    return batch


def _fed_passes(
    trainer: Any, batch: Any, first: tuple, deferred: set, metrics: dict, tag: str, copied: list, pad_multiple: Any
) -> dict[str, float]:
    """verl's own passes (``deferred``) on the first-draw keys, padded with copies of the cheapest fed row
    so every rank gets as many rows; the padding keys join ``copied`` (cleared after the update)."""
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta

    from costaware.integrations.verl.logprobs import OLD, REF

    pid = batch.partition_id
    _, keys, rows = first
    costs = [int(batch.tags[i]["seq_len"]) for i in rows]
    cheapest = rows[costs.index(min(costs))]
    pad = (-len(keys)) % pad_multiple(trainer, dp_size_v1(trainer))
    pad_keys = [f"{batch.keys[cheapest]}#{tag}.pad{k}" for k in range(pad)]
    if pad:
        source = tq.kv_batch_get(keys=[batch.keys[cheapest]] * 1, partition_id=pid)
        for key in pad_keys:
            tq.kv_batch_put(keys=[key], partition_id=pid, fields=source, tags=[batch.tags[cheapest]])
        copied.extend(pad_keys)
    run_rows = list(rows) + [cheapest] * pad
    meta = KVBatchMeta(
        keys=list(keys) + pad_keys,
        tags=[batch.tags[i] for i in run_rows],
        partition_id=pid,
        fields=list(batch.fields) if batch.fields else None,
        extra_info=dict(batch.extra_info or {}),
    )
    originals = type(trainer)._cost_aware_logprob_passes
    for name in (OLD, REF):  # verl's order
        if name in deferred:
            originals[name](trainer, meta, metrics)  # writes the field on these keys; OLD sets actor/entropy
    tokens = sum(int(batch.tags[i]["seq_len"]) for i in run_rows)
    return {
        "cost_aware/step/logprob_rows": float(len(run_rows)),
        "cost_aware/step/logprob_tokens": float(tokens),
        "cost_aware/step/logprob_rows_padding": float(pad),
    }


def phase_seconds(start: float, marks: dict[str, float]) -> dict[str, float]:
    """``cost_aware/timing/<phase>_s``: seconds from the previous mark (``start`` for the first) to each."""
    out, last = {}, start
    for name, t in marks.items():
        out[f"cost_aware/timing/{name}_s"] = t - last
        last = t
    return out
