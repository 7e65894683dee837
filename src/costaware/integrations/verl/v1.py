"""Trainer v1 (``PPOTrainer`` on TransferQueue): the plan's rows fed from the caller's own keys for one actor update."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

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
    """Trainer v1 (``PPOTrainer`` on TransferQueue): the same plan, fed by one TransferQueue read per rank.

    The actor workers read the rows the draws need once each, under the caller's keys, and select the draws
    from them (``transfer.fed_rows``, the plan travelling in the batch's ``extra_info``): a row drawn twice
    is read once. The weights are set there too: ``rollout_is_weights`` (existing weights, or 1) x (row
    factor) and ``cost_aware_weights`` the factor, so nothing of the plan is written to TransferQueue. Only
    with several data-parallel ranks can a row be copied: to ``f"{key}#ca{step}.{rank}"`` when a second rank
    reads it too (cleared after the update). When the log-prob passes ran on the fed rows only, the rows no
    pass ran on get NaN (no value) in the passes' fields, so every row holds the same fields. The batch
    returned is the original one, so verl's reward/length metrics stay those of the generated rollouts.
    """
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta

    from costaware.integrations.verl.config import actor_loss, check_trainer
    from costaware.integrations.verl.logprobs import DEFERRED, pad_multiple
    from costaware.integrations.verl.resample import content_order, plan_resampling, tag_costs
    from costaware.integrations.verl.transfer import PLAN_KEY, feed_plan, nested_row_means, nested_row_sums

    cfg = cost_aware_config(trainer)
    deferred = trainer.__dict__.pop(DEFERRED, set())  # log-prob passes waiting for the plan
    if budget_spent(trainer):
        return batch
    start = time.perf_counter()
    pid = batch.partition_id
    check_trainer(cfg, use_v1=True)  # the driver checks it first when main_ppo runs (``driver``)
    # the plan is drawn over rows in content order (the rollouts' arrival order varies from run to run)
    with_ids = batch.fields is None or "input_ids" in batch.fields
    read = ["advantages", "response_mask"] + (["input_ids"] if with_ids else [])
    data = tq.kv_batch_get(keys=batch.keys, partition_id=pid, select_fields=read)
    mode, regularised = actor_loss(trainer.config)
    advantages = nested_row_means(data["advantages"], data["response_mask"])
    lengths = nested_row_sums(data["response_mask"])
    costs = tag_costs(batch.tags)
    order = content_order(data["input_ids"].unbind(0)) if with_ids else None  # nested rows: the valid tokens
    result = plan_resampling(
        advantages if order is None else advantages[order],
        costs if order is None else costs[order],
        cfg,
        minibatch_size=trainer_minibatch_size(trainer),
        dp_size=dp_size_v1(trainer),
        seed=cfg.seed,  # the core's plan_seed; several triggers per step (separate_async) get their own
        step=trainer.global_steps * 1_000 + getattr(trainer, "local_trigger_step", 0),
        lengths=lengths if order is None else lengths[order],
        loss_agg_mode=mode,
        regularised=regularised,
        epochs=int(trainer.config.actor_rollout_ref.actor.ppo_epochs),
        micro_batch_size=actor_micro_batch(trainer),
    )
    if result.skipped is not None:
        logger.warning("costaware: step %s skips the actor update: %s", trainer.global_steps, result.skipped)
        metrics.update(record_pool(trainer, result, time.perf_counter() - start))
        return batch

    # where the plugin's time goes (log-prob passes, TransferQueue traffic, the update): cost_aware/timing/*
    marks = {"plan": time.perf_counter()}
    if order is not None:
        result = replace(result, indices=order[result.indices])
    assert result.indices is not None and result.factors is not None  # set whenever the step is not skipped
    tag = f"ca{trainer.global_steps}"
    drawn = result.indices.tolist()
    fed = list(dict.fromkeys(drawn))  # the rows some step feeds, in first-draw order
    cheapest_first = sorted(range(len(batch.keys)), key=lambda i: (float(costs[i]), i))
    copied: list[str] = []
    try:
        fields = list(batch.fields) if batch.fields else None
        if deferred:  # verl's passes on the fed rows, then NaN (no value) on the rows no pass ran on
            ran, out = _fed_passes(trainer, batch, fed, cheapest_first, deferred, metrics, tag, copied, pad_multiple)
            metrics.update(out)
            gained = _fill_unpassed(batch, ran, data)
            fields = sorted(set(fields) | set(gained)) if fields is not None else None
        elif fields is not None:  # the batch's field list may predate verl's passes: what a row holds now
            fields = sorted(set(fields) | set(tq.kv_batch_get(keys=[batch.keys[0]], partition_id=pid).keys()))
        marks["passes"] = time.perf_counter()
        dp = dp_size_v1(trainer)
        plan = feed_plan(batch.keys, drawn, dp, tag, spare=cheapest_first)
        if plan.copies:  # several ranks read one row: each reads its own copy (one read, one write)
            sources = list(dict.fromkeys(i for i, _ in plan.copies))
            rows = tq.kv_batch_get(keys=[batch.keys[i] for i in sources], partition_id=pid, select_fields=fields)
            picked = _select_rows(rows, [sources.index(i) for i, _ in plan.copies])
            targets = [key for _, key in plan.copies]
            tq.kv_batch_put(keys=targets, partition_id=pid, fields=picked, tags=[batch.tags[i] for i, _ in plan.copies])
            copied.extend(targets)
        marks["copy"] = time.perf_counter()
        share = len(drawn) // dp
        factors = result.factors.tolist()
        extra_info = dict(batch.extra_info or {})
        extra_info[PLAN_KEY] = {"rows": plan.rows, "factors": [factors[r * share : (r + 1) * share] for r in range(dp)]}
        resampled = KVBatchMeta(
            keys=plan.keys,
            tags=[batch.tags[i] for i in plan.sources],
            partition_id=pid,
            fields=fields,
            extra_info=extra_info,
        )
        update: dict = {}
        with fed_minibatch_size(trainer.actor_rollout_wg, result.minibatch_size, trainer_minibatch_size(trainer)):
            original(trainer, resampled, update)
        metrics.update(update)
        if not any(key.startswith("actor/cost_aware/loss/") for key in update):  # the weighted loss ran
            raise RuntimeError(
                "costaware: the actor workers ran the update without the plan's weights (the costaware plugin "
                "must be loaded in the worker processes too, and the actor worker must be verl's TrainingWorker)"
            )
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


def _select_rows(rows: Any, positions: list[int]) -> Any:
    from verl.utils import tensordict_utils as tu

    return tu.index_select_tensor_dict(rows, positions)


def _fill_unpassed(batch: Any, ran: set[int], data: Any) -> list[str]:
    """Write NaN (no value) into the fields the log-prob passes added, on the caller rows no pass ran on
    (``ran``: the rows it ran on), in the same per-row layout (per response token or per sequence token;
    ``data``: every row's ``response_mask`` and, when the rows hold it, ``input_ids``). Returns the added
    fields. One read of a row a pass ran on (which fields, their layout) and one write."""
    import transfer_queue as tq
    from tensordict import TensorDict

    from costaware.integrations.verl.transfer import nested_filled

    pid = batch.partition_id
    others = [i for i in range(len(batch.keys)) if i not in ran]
    sample = tq.kv_batch_get(keys=[batch.keys[min(ran)]], partition_id=pid)
    if batch.fields is not None:
        before = set(batch.fields)
    elif others:
        before = set(tq.kv_batch_get(keys=[batch.keys[others[0]]], partition_id=pid).keys())
    else:
        before = set()
    gained = sorted(set(sample.keys()) - before)
    if not others or not gained:
        return gained
    response_len = int(data["response_mask"].offsets().diff()[min(ran)])
    sequence_len = int(data["input_ids"].offsets().diff()[min(ran)]) if "input_ids" in data.keys() else -1
    added = {}
    for name in gained:
        value = sample[name]
        nan, dtype = float("nan"), value.dtype
        length = int(value.offsets().diff()[0]) if getattr(value, "is_nested", False) else -2
        if length == response_len:
            added[name] = nested_filled(_select_rows(data.select("response_mask"), others)["response_mask"], nan, dtype)
        elif length == sequence_len:
            added[name] = nested_filled(_select_rows(data.select("input_ids"), others)["input_ids"], nan, dtype)
        else:  # a layout this plugin does not know: leave the field to the rows a pass ran on, and say so
            logger.warning("costaware: field %r is on the passed rows only (unknown per-row layout)", name)
    if added:
        tq.kv_batch_put(
            keys=[batch.keys[i] for i in others], partition_id=pid, fields=TensorDict(added, batch_size=len(others))
        )
    return gained


def _fed_passes(
    trainer: Any,
    batch: Any,
    fed: list[int],
    cheapest_first: list[int],
    deferred: set,
    metrics: dict,
    tag: str,
    copied: list,
    pad_multiple: Any,
) -> tuple[set[int], dict[str, float]]:
    """verl's own passes (``deferred``) on the caller's rows ``fed``, padded so that every rank gets as many
    rows: with the cheapest rows not fed (``cheapest_first``: every row, cheapest first), under their own
    keys, or, when too few are left, copies of the cheapest fed row (their keys join ``copied``, cleared
    after the update). Returns the caller rows the passes ran on and the metrics."""
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta

    from costaware.integrations.verl.logprobs import OLD, REF

    pid = batch.partition_id
    fed_set = set(fed)
    pad = (-len(fed)) % pad_multiple(trainer, dp_size_v1(trainer))
    spare = [i for i in cheapest_first if i not in fed_set][:pad]
    cheapest = min(fed, key=lambda i: (int(batch.tags[i]["seq_len"]), i))
    pad_keys = [f"{batch.keys[cheapest]}#{tag}.pad{k}" for k in range(pad - len(spare))]
    if pad_keys:
        source = tq.kv_batch_get(keys=[batch.keys[cheapest]], partition_id=pid)
        for key in pad_keys:  # one key per put: a batched get would repeat a key
            tq.kv_batch_put(keys=[key], partition_id=pid, fields=source, tags=[batch.tags[cheapest]])
        copied.extend(pad_keys)
    run_rows = list(fed) + spare + [cheapest] * len(pad_keys)
    meta = KVBatchMeta(
        keys=[batch.keys[i] for i in fed + spare] + pad_keys,
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
    return fed_set | set(spare), {
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
