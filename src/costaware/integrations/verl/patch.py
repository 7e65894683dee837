"""Wrappers around verl's ``_update_actor`` (trainer v0 and v1), its checkpoints, its actor loss and the
v1 metrics aggregator.

Applied by the import hook (``_hook.TARGETS``); cheap to import (stdlib only, the rest is imported inside
the functions). The trainer state the wrappers share lives in ``state``, so that this module, ``v1``,
``resample`` and ``logprobs`` import it and not each other. Each trainer wrapper reads
``algorithm.cost_aware`` once per trainer and calls the original unchanged when the key is absent or
``enable=false``.

Learning-rate schedule: verl's actor worker steps its LR scheduler once per ``update_actor`` call (on the
last mini-batch). A skipped pool (every advantage zero) makes no optimizer step and so no scheduler
step: the schedule counts optimizer updates, as an optimizer-side schedule must (stepping it without an
update would shorten warm-up for nothing, and a zero-gradient Adam step still moves the weights through
its moments and weight decay, so a "no-op" update to keep the count is not available).
``tests/test_verl_update_actor.py`` checks that a skip makes no worker call.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any

from costaware.integrations.verl.config import PLAN_KEY, WEIGHTS_KEY
from costaware.integrations.verl.curriculum import feed_sampler
from costaware.integrations.verl.state import (
    PATCH_MARK,
    TokenBudgetReached,
    actor_micro_batch,
    budget_spent,
    cost_aware_config,
    cost_aware_counters,
    fed_minibatch_size,
    mark_patched,
    record_pool,
    trainer_minibatch_size,
)

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------- trainer v0


def update_actor_v0(trainer: Any, batch: Any, original: Any) -> Any:
    """Trainer v0 (``RayPPOTrainer``): resample the padded DataProto, then run verl's own update."""
    from verl import DataProto

    from costaware.integrations.verl.config import actor_loss
    from costaware.integrations.verl.logprobs import DEFERRED, OLD, fill_fed_logprobs, skipped_step_entropy
    from costaware.integrations.verl.resample import resample_dataproto

    cfg = cost_aware_config(trainer)
    deferred = trainer.__dict__.pop(DEFERRED, set())  # log-prob passes waiting for the plan
    if budget_spent(trainer):
        return DataProto.from_single_dict(data={}, meta_info={"metrics": {}})
    start = time.perf_counter()
    mode, regularised = actor_loss(trainer.config)
    dp_size = int(trainer._get_dp_size(trainer.actor_rollout_wg, "actor"))
    result = resample_dataproto(
        batch,
        cfg,
        minibatch_size=trainer_minibatch_size(trainer),
        dp_size=dp_size,
        seed=cfg.seed,
        step=trainer.global_steps,
        loss_agg_mode=mode,
        regularised=regularised,
        group_size=int(trainer.config.actor_rollout_ref.rollout.n),
        epochs=int(trainer.config.actor_rollout_ref.actor.ppo_epochs),
        micro_batch_size=actor_micro_batch(trainer),
    )
    originals = getattr(type(trainer), "_cost_aware_logprob_passes", {})
    if result.skipped is not None:
        logger.warning("costaware: step %s skips the actor update: %s", trainer.global_steps, result.skipped)
        metrics = record_pool(trainer, result, time.perf_counter() - start)
        if OLD in deferred:  # fit() logged actor/entropy from the placeholder: give it the batch's
            metrics.update(skipped_step_entropy(trainer, batch, dp_size, originals))
        return DataProto.from_single_dict(data={}, meta_info={"metrics": metrics})
    assert result.indices is not None  # set whenever the step is not skipped
    passes = {}
    if deferred:
        passes = fill_fed_logprobs(trainer, batch, result.batch, result.indices, deferred, dp_size, originals)
    with fed_minibatch_size(trainer.actor_rollout_wg, result.minibatch_size, trainer_minibatch_size(trainer)):
        output = original(trainer, result.batch)
    output.meta_info["metrics"].update(record_pool(trainer, result, time.perf_counter() - start))
    output.meta_info["metrics"].update(passes)
    return output


# ---------------------------------------------------------------------------------------- trainer v1


# ------------------------------------------------------------------------------- actor loss (workers)


def train_mini_batch_wrapper(original: Any) -> Any:
    """``TrainingWorker.train_mini_batch`` around ``original``: a trainer v1 batch that carries the plan
    (``PLAN_KEY`` in its ``extra_info``) holds each needed row once; the worker selects its rank's draws
    from it and sets their weights (``transfer.fed_rows``) before verl's own mini-batch loop."""

    @functools.wraps(original)
    def train_mini_batch(self, data):
        from tensordict import TensorDict

        if isinstance(data, TensorDict) and PLAN_KEY in data.keys():  # a remote call's KVBatchMeta holds none
            from costaware.integrations.verl.transfer import fed_rows

            data = fed_rows(data, int(self.engine.get_data_parallel_rank()))
        return original(self, data)

    return mark_patched(train_mini_batch)


def patch_training_worker(module: Any) -> None:
    """Wrap ``TrainingWorker.train_mini_batch`` with :func:`train_mini_batch_wrapper` (idempotent)."""
    cls = module.TrainingWorker
    if not getattr(cls.train_mini_batch, PATCH_MARK, False):
        cls.train_mini_batch = train_mini_batch_wrapper(cls.train_mini_batch)


def patch_losses(module: Any) -> None:
    """Replace ``verl.workers.utils.losses.ppo_loss`` by :func:`weighted_ppo_loss` around it (idempotent).

    Runs when the module is first imported, before ``engine_workers`` binds the name, so every worker's
    ``partial(ppo_loss, ...)`` gets the wrapper.
    """
    original = module.ppo_loss
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def ppo_loss(config, model_output, data, dp_group=None):
        if WEIGHTS_KEY not in data.keys():
            return original(config, model_output, data, dp_group)
        return weighted_ppo_loss(config, model_output, data, dp_group, original=original)

    module.ppo_loss = mark_patched(ppo_loss)
    import sys

    for name in ("verl.workers.engine_workers", "verl.trainer.distillation.losses"):  # bound by name
        user: Any = sys.modules.get(name)  # a module of verl's: ppo_loss is set on it
        if user is not None and getattr(user, "ppo_loss", None) is original:
            user.ppo_loss = module.ppo_loss


def _worker_metrics(data: Any, dp_group: Any) -> dict[str, Any]:
    """What the worker's weighted loss saw, logged through verl's own metric reduction (verl logs the
    actor's loss metrics under ``actor/``: ``actor/cost_aware/loss/...``).

    ``cost_aware/loss/factors_mean``: the mean loss factor of the micro-batch's rows (mean over ranks and
    micro-batches: the trainer's ``cost_aware/factors/mean`` when every rank ran it); ``.../rank_min`` and
    ``.../rank_max``: the data-parallel ranks that ran it (0 and world - 1 when every rank did).
    """
    import torch.distributed as dist
    from verl.utils.metric import AggregationType, Metric

    rank = dist.get_rank(dp_group) if dist.is_available() and dist.is_initialized() else 0
    per_token = data.select(WEIGHTS_KEY).to_padded_tensor()[WEIGHTS_KEY]  # the row's factor, 0 past its end
    weights = per_token.amax(-1) if per_token.ndim > 1 else per_token
    return {
        "cost_aware/loss/factors_mean": Metric(AggregationType.MEAN, float(weights.float().mean())),
        "cost_aware/loss/rank_min": Metric(AggregationType.MIN, float(rank)),
        "cost_aware/loss/rank_max": Metric(AggregationType.MAX, float(rank)),
    }


def weighted_ppo_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None, *, original: Any) -> Any:
    """verl's ``ppo_loss`` with the entropy and KL terms multiplied per row by the row's factor.

    verl multiplies ``rollout_is_weights`` (which carries the factor w_i) into the policy-gradient term
    only, and adds ``-entropy_coeff * agg(entropy) + kl_coef * agg(kl)`` unweighted. Every verl
    ``loss_agg_mode`` is linear in the token-loss matrix under the global normaliser (tokens, rows or
    horizon of the whole mini-batch), so adding ``agg((w - 1) * term)`` makes each term ``agg(w * term)``
    exactly: the micro-batch loss is then sum_i w_i (pg_i - c ent_i + beta kl_i). Rows with w = 1
    (no resampling) add exactly zero.
    """
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
    from verl.workers.utils.padding import no_padding_2_padding

    loss, metrics = original(config, model_output, data, dp_group)
    metrics.update(_worker_metrics(data, dp_group))
    entropy = model_output.get("entropy", None)
    if entropy is None and not config.use_kl_loss:
        return loss, metrics
    fields = ["response_mask", WEIGHTS_KEY] + (["ref_log_prob"] if config.use_kl_loss else [])
    padded = data.select(*fields).to_padded_tensor()
    mask = padded["response_mask"].to(bool)
    extra = padded[WEIGHTS_KEY].to(loss.dtype) - 1.0
    info = config.global_batch_info  # set by ppo_loss for this micro-batch
    agg = functools.partial(agg_loss, loss_mask=mask, loss_agg_mode=config.loss_agg_mode, **info)
    if entropy is not None:
        loss = loss - config.entropy_coeff * agg(loss_mat=no_padding_2_padding(entropy, data) * extra)
    if config.use_kl_loss:
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        kld = kl_penalty(logprob=log_prob, ref_logprob=padded["ref_log_prob"], kl_penalty=config.kl_loss_type)  # type: ignore[arg-type]  # verl annotates torch.FloatTensor, takes any float tensor
        loss = loss + config.kl_loss_coef * agg(loss_mat=kld * extra)
    return loss, metrics


# ---------------------------------------------------------------------------------- v1 metrics window


def patch_metrics_aggregator(cls: type[Any]) -> None:
    """Make verl v1's ``MetricsAggregator`` keep ``cost_aware/total/*`` (last) and sum ``cost_aware/step/*``.

    In ``separate_async`` mode several updates share one logging window; the aggregator would otherwise
    *sum* the cumulative totals (their names contain "total") and average the per-pool counts. Taking
    the last total and summing the per-pool counts logs the true cumulative value and the window's delta.
    """
    original = cls._get_aggregation_type
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def _get_aggregation_type(self, metric_name: str) -> str:
        if metric_name.startswith("cost_aware/total/"):
            return "last"
        if metric_name.startswith("cost_aware/step/"):
            return "sum"
        return original(self, metric_name)

    cls._get_aggregation_type = mark_patched(_get_aggregation_type)


# ------------------------------------------------------------------------------------- checkpoints


def _step_dir(trainer: Any) -> str:
    return os.path.join(str(trainer.config.trainer.default_local_dir), f"global_step_{trainer.global_steps}")


def _save_state(trainer: Any) -> None:
    from costaware.grpo.accounting import save_counters

    if cost_aware_config(trainer) is None or "_cost_aware_counters" not in trainer.__dict__:
        return
    save_counters(cost_aware_counters(trainer), _step_dir(trainer))


def _load_state(trainer: Any) -> None:
    from costaware.grpo.accounting import STATE_FILE, load_counters

    if cost_aware_config(trainer) is None or not getattr(trainer, "global_steps", 0):
        return
    candidates = [_step_dir(trainer)]
    resume_path = trainer.config.trainer.get("resume_from_path", None)
    if resume_path:
        candidates.insert(0, str(resume_path))
    for folder in candidates:
        counters = load_counters(folder)
        if counters is not None:
            trainer.__dict__["_cost_aware_counters"] = counters
            return
    logger.warning("costaware: resumed at step %s without %s; counters restart at 0", trainer.global_steps, STATE_FILE)


def _patch_checkpointing(cls: type[Any]) -> None:
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

    cls._save_checkpoint = mark_patched(_save_checkpoint)
    cls._load_checkpoint = mark_patched(_load_checkpoint)


def patch_v0(cls: type[Any]) -> None:
    """Wrap ``RayPPOTrainer._update_actor(self, batch) -> DataProto`` (idempotent); it also feeds a
    ``data.sampler.class_path`` sampler the scored batch (``curriculum.feed_sampler``)."""
    original = cls._update_actor
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def _update_actor(self, batch):
        feed_sampler(self, batch)  # data.sampler.class_path: the scored round, before the step's checkpoint
        if cost_aware_config(self) is None:
            return original(self, batch)
        return update_actor_v0(self, batch, original)

    cls._update_actor = mark_patched(_update_actor)
    _patch_checkpointing(cls)
    _patch_budget_stop_v0(cls)
    from costaware.integrations.verl.logprobs import patch_logprob_passes

    patch_logprob_passes(cls, mark_patched)


def _patch_budget_stop_v0(cls: type[Any]) -> None:
    """Trainer v0's loop iterates the dataloader: once the budget is spent, the next step's first call
    (``_get_gen_batch``, before any generation) raises :class:`TokenBudgetReached`, which ``fit`` ends on."""
    fit, get_gen_batch = getattr(cls, "fit", None), getattr(cls, "_get_gen_batch", None)
    if fit is None or get_gen_batch is None or getattr(fit, PATCH_MARK, False):
        return

    @functools.wraps(get_gen_batch)
    def _get_gen_batch(self, *args, **kwargs):
        if cost_aware_config(self) is not None and budget_spent(self):
            raise TokenBudgetReached(self.global_steps)
        return get_gen_batch(self, *args, **kwargs)

    @functools.wraps(fit)
    def _fit(self, *args, **kwargs):
        try:
            return fit(self, *args, **kwargs)
        except TokenBudgetReached:
            if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
                self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=True)
            if hasattr(self, "_shutdown_dump_executor"):
                self._shutdown_dump_executor()
            return None

    cls._get_gen_batch = mark_patched(_get_gen_batch)
    cls.fit = mark_patched(_fit)


def patch_v1(cls: type[Any]) -> None:
    """Wrap ``PPOTrainer._update_actor(self, batch, metrics) -> KVBatchMeta`` (idempotent)."""
    original = cls._update_actor
    if getattr(original, PATCH_MARK, False):
        return

    @functools.wraps(original)
    def _update_actor(self, batch, metrics):
        if cost_aware_config(self) is None:
            return original(self, batch, metrics)
        from costaware.integrations.verl.v1 import update_actor_v1

        return update_actor_v1(self, batch, metrics, original)

    cls._update_actor = mark_patched(_update_actor)
    _patch_checkpointing(cls)
    from costaware.integrations.verl.logprobs import patch_logprob_passes_v1

    patch_logprob_passes_v1(cls, mark_patched)
