"""Trainer v1 (``PPOTrainer`` on TransferQueue): the plan's rows fed from the caller's own keys for one actor update."""

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
    """Trainer v1 (``PPOTrainer`` on TransferQueue): the same plan, each fed row under its own key.

    A row's first draw runs under the caller's key; TransferQueue keys are unique per batch, so a row
    drawn again (in another mini-batch, or unmerged) is copied to ``f"{key}#ca{step}.{r}"`` for the update
    and cleared afterwards. ``rollout_is_weights`` of every fed key is (existing weights, or 1) x (row
    factor) and ``cost_aware_weights`` the factor. After the update the caller's rows hold their own
    values again, and every row holds the same fields: ``rollout_is_weights`` as before (1 where the rows
    had none), ``cost_aware_weights`` 1, and, where the log-prob passes ran on the fed rows only, NaN
    (no value) as their log-probs on the others. The batch returned is the original one, so verl's
    reward/length metrics stay those of the generated rollouts.
    """
    import transfer_queue as tq
    from tensordict import TensorDict
    from transfer_queue import KVBatchMeta

    from costaware.integrations.verl.config import actor_loss, check_trainer
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
    check_trainer(cfg, use_v1=True)  # the driver checks it first when main_ppo runs (``driver``)
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

    # where the plugin's time goes (log-prob passes, TransferQueue copies, the update): cost_aware/timing/*
    marks = {"plan": time.perf_counter()}
    if order is not None:
        result = replace(result, indices=order[result.indices])
    assert result.indices is not None and result.factors is not None  # set whenever the step is not skipped
    tag = f"ca{trainer.global_steps}"
    new_keys, rounds = duplicate_key_plan(batch.keys, result.indices, tag=tag)
    drawn = result.indices.tolist()
    first = [d for d, key in enumerate(new_keys) if key == batch.keys[drawn[d]]]  # draws under the caller's key
    fed = [drawn[d] for d in first]
    copied: list[str] = []
    try:
        if deferred:  # verl's passes on the fed rows; their repeats below copy the values
            metrics.update(_fed_passes(trainer, batch, fed, deferred, metrics, tag, copied, pad_multiple))
        marks["passes"] = time.perf_counter()
        for source_keys, target_keys, source_rows in rounds:
            rows = tq.kv_batch_get(keys=source_keys, partition_id=pid)
            tq.kv_batch_put(keys=target_keys, partition_id=pid, fields=rows, tags=[batch.tags[i] for i in source_rows])
            copied.extend(target_keys)
        marks["copy"] = time.perf_counter()
        # the fields a fed row holds (the batch's field list may predate verl's passes): one row read
        held = set(tq.kv_batch_get(keys=[new_keys[0]], partition_id=pid).keys())
        # TransferQueue's select_fields drops a field no row holds: rollout_is_weights comes back if the rows have it
        current = tq.kv_batch_get(
            keys=new_keys, partition_id=pid, select_fields=["response_mask", "rollout_is_weights"]
        )
        existing = current["rollout_is_weights"] if "rollout_is_weights" in current.keys() else None
        mask = current["response_mask"]
        factors = nested_scaled_weights(None, mask, result.factors)
        weights = nested_scaled_weights(existing, mask, result.factors)
        written = {"rollout_is_weights": weights, WEIGHTS_KEY: factors}
        tq.kv_batch_put(keys=new_keys, partition_id=pid, fields=TensorDict(written, batch_size=len(new_keys)))
        resampled = KVBatchMeta(
            keys=new_keys,
            tags=[batch.tags[i] for i in drawn],
            partition_id=pid,
            fields=sorted(set(batch.fields) | set(written) | held) if batch.fields else None,
            extra_info=dict(batch.extra_info or {}),
        )
        marks["weights"] = time.perf_counter()
        with fed_minibatch_size(trainer.actor_rollout_wg, result.minibatch_size, trainer_minibatch_size(trainer)):
            original(trainer, resampled, metrics)
        marks["update"] = time.perf_counter()
        _restore(batch, fed, first, existing, data["response_mask"])
    finally:
        if copied:
            tq.kv_clear(keys=copied, partition_id=pid)
    marks["restore"] = time.perf_counter()
    metrics.update(record_pool(trainer, result, time.perf_counter() - start))
    metrics.update(phase_seconds(start, marks))
    if budget_spent(trainer):  # v1's loop runs while global_steps <= total_training_steps
        trainer.total_training_steps = trainer.global_steps
    return batch


def _restore(batch: Any, fed: list[int], first: list[int], existing: Any, response_mask: Any) -> None:
    """The caller's rows after the update: their own values again, and one set of fields on every row.

    ``fed``: the caller's rows that ran under their own keys (``first``: their positions among the draws,
    where ``existing`` holds their rollout-correction weights); ``response_mask``: every caller row's. A
    field the fed rows gained (the weights; the log-prob passes' outputs when they ran on the fed rows only)
    is written on the other rows too, in the same per-row layout: 1 for the weights, NaN (no value) else.
    """
    import transfer_queue as tq
    from tensordict import TensorDict

    from costaware.integrations.verl.config import WEIGHTS_KEY
    from costaware.integrations.verl.transfer import nested_filled, nested_select

    pid = batch.partition_id
    fed_mask = nested_select(response_mask, fed)
    own = {
        "rollout_is_weights": nested_filled(fed_mask, 1.0) if existing is None else nested_select(existing, first),
        WEIGHTS_KEY: nested_filled(fed_mask, 1.0),
    }
    tq.kv_batch_put(keys=[batch.keys[i] for i in fed], partition_id=pid, fields=TensorDict(own, batch_size=len(fed)))
    fed_set = set(fed)
    others = [i for i in range(len(batch.keys)) if i not in fed_set]
    if not others:
        return
    sample = tq.kv_batch_get(keys=[batch.keys[fed[0]]], partition_id=pid)
    other = tq.kv_batch_get(keys=[batch.keys[others[0]]], partition_id=pid)
    gained = sorted(set(sample.keys()) - set(other.keys()))
    if not gained:
        return
    other_mask = nested_select(response_mask, others)
    response_len = int(sample["response_mask"].offsets().diff()[0])
    sequence = None  # the other rows' input_ids, read only if a gained field is laid out per sequence token
    added = {}
    for name in gained:
        value = sample[name]
        fill = 1.0 if name in own else float("nan")
        length = int(value.offsets().diff()[0]) if getattr(value, "is_nested", False) else -1
        if length == response_len:
            added[name] = nested_filled(other_mask, fill, value.dtype)
            continue
        if sequence is None:
            sequence = tq.kv_batch_get(
                keys=[batch.keys[i] for i in others], partition_id=pid, select_fields=["input_ids"]
            )
            sample_ids = tq.kv_batch_get(keys=[batch.keys[fed[0]]], partition_id=pid, select_fields=["input_ids"])
        if length == int(sample_ids["input_ids"].offsets().diff()[0]):
            added[name] = nested_filled(sequence["input_ids"], fill, value.dtype)
        else:  # a layout this plugin does not know: leave the field to the fed rows, and say so
            logger.warning("costaware: field %r is on the fed rows only (unknown per-row layout)", name)
    if added:
        tq.kv_batch_put(
            keys=[batch.keys[i] for i in others], partition_id=pid, fields=TensorDict(added, batch_size=len(others))
        )


def _fed_passes(
    trainer: Any, batch: Any, fed: list[int], deferred: set, metrics: dict, tag: str, copied: list, pad_multiple: Any
) -> dict[str, float]:
    """verl's own passes (``deferred``) on the caller's rows ``fed``, padded with copies of the cheapest fed
    row so every rank gets as many rows; the padding keys join ``copied`` (cleared after the update)."""
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta

    from costaware.integrations.verl.logprobs import OLD, REF

    pid = batch.partition_id
    keys = [batch.keys[i] for i in fed]
    costs = [int(batch.tags[i]["seq_len"]) for i in fed]
    cheapest = fed[costs.index(min(costs))]
    pad = (-len(keys)) % pad_multiple(trainer, dp_size_v1(trainer))
    pad_keys = [f"{batch.keys[cheapest]}#{tag}.pad{k}" for k in range(pad)]
    if pad:
        source = tq.kv_batch_get(keys=[batch.keys[cheapest]], partition_id=pid)
        for key in pad_keys:  # one key per put: a batched get would repeat a key
            tq.kv_batch_put(keys=[key], partition_id=pid, fields=source, tags=[batch.tags[cheapest]])
        copied.extend(pad_keys)
    run_rows = list(fed) + [cheapest] * pad
    meta = KVBatchMeta(
        keys=keys + pad_keys,
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
