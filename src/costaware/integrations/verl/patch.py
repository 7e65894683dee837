"""Wrappers around verl's ``_update_actor`` (trainer v0 and v1) and its checkpoint save/load.

Applied by the import hook; cheap (functools only at import). Each wrapper reads ``algorithm.cost_aware``
once per trainer and calls the original unchanged when the key is absent or ``enable=false``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from typing import Any

from costaware.integrations.verl._hook import PATCH_MARK

logger = logging.getLogger(__name__)
STATE_FILE = "cost_aware_state.json"
_UNSET = object()


def _config(trainer: Any) -> Any:
    """Validated CostAwareConfig of this trainer, or None (cached on the instance)."""
    cached = trainer.__dict__.get("_cost_aware_config", _UNSET)
    if cached is _UNSET:
        from costaware.integrations.verl.config import read_trainer_config

        cached = read_trainer_config(trainer.config)
        trainer.__dict__["_cost_aware_config"] = cached
        if cached is not None:
            logger.warning("costaware: Cost-Aware GRPO enabled in verl with %s", cached)
    return cached


def _state(trainer: Any) -> Any:
    from costaware.integrations.verl.resample import CostAwareState

    state = trainer.__dict__.get("_cost_aware_state")
    if state is None:
        state = trainer.__dict__["_cost_aware_state"] = CostAwareState()
    return state


def _minibatch_size(trainer: Any) -> int:
    config = trainer.config
    return int(config.actor_rollout_ref.actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n)


def _dp_size_v1(trainer: Any) -> int:
    worker_group = trainer.actor_rollout_wg
    if "actor" not in worker_group._dispatch_info:
        worker_group._dispatch_info["actor"] = worker_group._query_dispatch_info("actor")
    return max(worker_group._dispatch_info["actor"]) + 1


def _mark(wrapper: Any) -> Any:
    setattr(wrapper, PATCH_MARK, True)
    return wrapper


def update_actor_v0(trainer: Any, batch: Any, original: Any) -> Any:
    """Trainer v0 (``RayPPOTrainer``): resample the padded DataProto, then run verl's own update."""
    from verl import DataProto

    from costaware.integrations.verl.resample import resample_dataproto, step_generator

    cfg = _config(trainer)
    start = time.perf_counter()
    result = resample_dataproto(
        batch,
        cfg,
        minibatch_size=_minibatch_size(trainer),
        dp_size=int(trainer._get_dp_size(trainer.actor_rollout_wg, "actor")),
        generator=step_generator(cfg.seed, trainer.global_steps),
    )
    if result.skipped is not None:
        logger.warning("costaware: step %s skips the actor update: %s", trainer.global_steps, result.skipped)
        metrics = _state(trainer).record(result.stats, time.perf_counter() - start)
        return DataProto.from_single_dict(data={}, meta_info={"metrics": metrics})
    output = original(trainer, result.batch)
    output.meta_info["metrics"].update(_state(trainer).record(result.stats, time.perf_counter() - start))
    return output


def update_actor_v1(trainer: Any, batch: Any, metrics: dict, original: Any) -> Any:
    """Trainer v1 (``PPOTrainer`` on TransferQueue): same plan, rows copied to fresh keys when drawn twice.

    TransferQueue keys are unique per batch, so the k-th extra draw of a row is stored under a new key
    (all fields copied) for the duration of the update and cleared afterwards. ``rollout_is_weights`` of
    every drawn key is set to (existing weights) x (importance weight). The batch returned is the
    original one, so verl's reward/length metrics stay those of the generated rollouts.
    """
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict
    from transfer_queue import KVBatchMeta

    from costaware.integrations.verl.resample import plan_resampling, step_generator
    from costaware.integrations.verl.transfer import (
        duplicate_key_plan,
        nested_row_means,
        nested_scaled_weights,
    )

    cfg = _config(trainer)
    start = time.perf_counter()
    pid = batch.partition_id
    data = tq.kv_batch_get(keys=batch.keys, partition_id=pid, select_fields=["advantages", "response_mask"])
    advantages = nested_row_means(data["advantages"], data["response_mask"])
    costs = torch.tensor([int(tag["seq_len"]) for tag in batch.tags], dtype=torch.int64)
    result = plan_resampling(
        advantages,
        costs,
        cfg,
        minibatch_size=_minibatch_size(trainer),
        dp_size=_dp_size_v1(trainer),
        generator=step_generator(
            cfg.seed, trainer.global_steps * 1_000 + getattr(trainer, "local_trigger_step", 0)
        ),
    )
    if result.skipped is not None:
        logger.warning("costaware: step %s skips the actor update: %s", trainer.global_steps, result.skipped)
        metrics.update(_state(trainer).record(result.stats, time.perf_counter() - start))
        return batch

    new_keys, rounds = duplicate_key_plan(batch.keys, result.indices, tag=f"ca{trainer.global_steps}")
    copied: list[str] = []
    try:
        for source_keys, target_keys, source_rows in rounds:
            rows = tq.kv_batch_get(keys=source_keys, partition_id=pid)
            tq.kv_batch_put(
                keys=target_keys, partition_id=pid, fields=rows, tags=[batch.tags[i] for i in source_rows]
            )
            copied.extend(target_keys)
        fields = ["response_mask"]
        has_weights = batch.fields is not None and "rollout_is_weights" in batch.fields
        if has_weights:
            fields.append("rollout_is_weights")
        current = tq.kv_batch_get(keys=new_keys, partition_id=pid, select_fields=fields)
        weights = nested_scaled_weights(
            current["rollout_is_weights"] if has_weights else None, current["response_mask"], result.weights
        )
        tq.kv_batch_put(
            keys=new_keys,
            partition_id=pid,
            fields=TensorDict({"rollout_is_weights": weights}, batch_size=len(new_keys)),
        )
        resampled = KVBatchMeta(
            keys=new_keys,
            tags=[batch.tags[i] for i in result.indices.tolist()],
            partition_id=pid,
            fields=sorted(set(batch.fields or []) | {"rollout_is_weights"}) if batch.fields else None,
            extra_info=dict(batch.extra_info or {}),
        )
        original(trainer, resampled, metrics)
    finally:
        if copied:
            tq.kv_clear(keys=copied, partition_id=pid)
    metrics.update(_state(trainer).record(result.stats, time.perf_counter() - start))
    return batch


def _state_path(trainer: Any) -> str:
    return os.path.join(
        str(trainer.config.trainer.default_local_dir), f"global_step_{trainer.global_steps}", STATE_FILE
    )


def _save_state(trainer: Any) -> None:
    if _config(trainer) is None or "_cost_aware_state" not in trainer.__dict__:
        return
    path = _state_path(trainer)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(_state(trainer).to_dict(), handle)
    os.replace(tmp, path)  # atomic: a crash never leaves half a file


def _load_state(trainer: Any) -> None:
    if _config(trainer) is None or not getattr(trainer, "global_steps", 0):
        return
    from costaware.integrations.verl.resample import CostAwareState

    candidates = [_state_path(trainer)]
    resume_path = trainer.config.trainer.get("resume_from_path", None)
    if resume_path:
        candidates.insert(0, os.path.join(str(resume_path), STATE_FILE))
    for path in candidates:
        if os.path.isfile(path):
            with open(path) as handle:
                trainer.__dict__["_cost_aware_state"] = CostAwareState.from_dict(json.load(handle))
            return
    logger.warning(
        "costaware: resumed at step %s without %s; counters restart at 0", trainer.global_steps, STATE_FILE
    )


def _patch_checkpointing(cls: type) -> None:
    save, load = cls._save_checkpoint, cls._load_checkpoint
    if getattr(save, PATCH_MARK, False):
        return

    @functools.wraps(save)
    def _save_checkpoint(self, *args, **kwargs):
        out = save(self, *args, **kwargs)
        _save_state(self)
        return out

    @functools.wraps(load)
    def _load_checkpoint(self, *args, **kwargs):
        out = load(self, *args, **kwargs)
        _load_state(self)
        return out

    cls._save_checkpoint = _mark(_save_checkpoint)
    cls._load_checkpoint = _mark(_load_checkpoint)


def patch_v0(cls: type) -> None:
    """Wrap ``RayPPOTrainer._update_actor(self, batch) -> DataProto`` (idempotent)."""
    original = cls._update_actor
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def _update_actor(self, batch):
        if _config(self) is None:
            return original(self, batch)
        return update_actor_v0(self, batch, original)

    cls._update_actor = _mark(_update_actor)
    _patch_checkpointing(cls)


def patch_v1(cls: type) -> None:
    """Wrap ``PPOTrainer._update_actor(self, batch, metrics) -> KVBatchMeta`` (idempotent)."""
    original = cls._update_actor
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def _update_actor(self, batch, metrics):
        if _config(self) is None:
            return original(self, batch, metrics)
        return update_actor_v1(self, batch, metrics, original)

    cls._update_actor = _mark(_update_actor)
    _patch_checkpointing(cls)
