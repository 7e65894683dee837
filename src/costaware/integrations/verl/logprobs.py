"""Old and reference log-prob passes on the rows the plan feeds only (``logprob_rows="fed"``).

Stock verl runs two no-grad passes over every row before ``_update_actor``: the policy's (old log-probs
for the clipped ratio, and the entropy metric) and the reference model's (``ref_log_prob`` for the KL
term). A row the plan never draws enters no loss, so both passes over it are wasted. GRPO's advantages
need only the rewards and the group ids, so the plan does not depend on either pass. The plugin therefore
answers both calls with placeholders (NaN: no value) and, once ``_update_actor`` has drawn the plan,
runs verl's own passes on the rows some step feeds, padded with the cheapest of them so that every
data-parallel rank gets as many rows (and, with a fixed micro-batch size, as many micro-batches); with
dynamic batch size verl's ``same_micro_num_in_dp`` already equalises the micro-batch counts. The policy
has not stepped in between, so the values equal stock's on those rows. The caller's batch keeps the
placeholders, and nothing after ``_update_actor`` reads them.

Left to stock (every row's pass runs, decided per batch): anything that reads the log-probs of every
row before the update, i.e. ``algorithm.use_kl_in_reward`` (rewards from the KL), rollout correction
and verl's debug metrics (a batch that holds ``rollout_log_probs``), ``actor.calculate_sum_pi_squared``
(advantage estimators and metrics that read it), router replay, and method ``none`` (it feeds every row).
The entropy metric ``actor/entropy`` is then the fed rows' (logged by ``_update_actor``).

Trainer v1 (TransferQueue) does the same in ``v1.py``: its passes write nothing before the plan
(TransferQueue's ``select_fields`` drops a field no row holds, so ``_compute_advantage`` reads none), and
``_update_actor`` runs verl's own passes on the fed rows' keys before the update, padded with the cheapest
rows not fed (under their own keys: nothing is copied while such rows are left); the rows no pass ran on
then get NaN (no value) in those fields, so every row holds the same fields. A batch with
``rollout.calculate_log_probs`` keeps stock's passes.
"""

from __future__ import annotations

import math
from typing import Any

import torch

OLD, REF = "old_log_probs", "ref_log_prob"
DEFERRED = "_cost_aware_deferred"  # trainer attribute: the passes answered with placeholders this step


def get_dotted(node: Any, dotted: str, default: Any = None) -> Any:
    from costaware.integrations.verl.config import get_dotted as get

    return get(node, dotted, default)


def deferrable(trainer: Any, cfg: Any, has_rollout_log_probs: bool) -> bool:
    """True when this batch's passes may wait for the plan (see the module docstring)."""
    config = trainer.config
    if cfg.logprob_rows != "fed" or cfg.rule.plain:
        return False
    if get_dotted(config, "algorithm.use_kl_in_reward", False):
        return False
    if get_dotted(config, "actor_rollout_ref.actor.calculate_sum_pi_squared", False):
        return False
    if get_dotted(config, "actor_rollout_ref.actor.router_replay.mode", "disabled") not in ("disabled", None):
        return False
    return not has_rollout_log_probs


def placeholder(batch: Any, *names: str) -> Any:
    """A DataProto holding NaN (no value) under ``names``, shaped like the responses."""
    from verl import DataProto

    shape = tuple(batch.batch["responses"].shape)
    return DataProto.from_dict({name: torch.full(shape, math.nan) for name in names})


def pad_multiple(trainer: Any, dp_size: int) -> int:
    """Rows the fed set is padded to a multiple of: every rank gets as many rows and, with a fixed
    micro-batch size, as many micro-batches (the actor's and, when separate, the reference's)."""
    config = trainer.config
    multiple = dp_size
    for role in ("rollout", "ref"):
        node = f"actor_rollout_ref.{role}"
        micro = get_dotted(config, f"{node}.log_prob_micro_batch_size_per_gpu", None)
        if micro and not get_dotted(config, f"{node}.log_prob_use_dynamic_bsz", False):
            multiple = math.lcm(multiple, dp_size * int(micro))
    return multiple


def fill_fed_logprobs(
    trainer: Any, batch: Any, resampled: Any, indices: torch.Tensor, deferred: set[str], dp_size: int, originals: dict
) -> dict[str, float]:
    """Run the ``deferred`` passes (verl's own, ``originals``) on the rows ``indices`` feeds and write their
    values into ``resampled`` (the drawn batch, row d = ``batch`` row ``indices[d]``). Returns metrics."""
    from verl.trainer.ppo.core_algos import agg_loss

    rows = torch.unique(indices)  # sorted
    costs = batch.batch["attention_mask"].sum(-1)
    pad = (-rows.numel()) % pad_multiple(trainer, dp_size)
    cheapest = rows[torch.argmin(costs[rows])]
    run = torch.cat([rows, cheapest.repeat(pad)])
    sub = batch.select_idxs(run)
    for name in (OLD, REF):
        if name in sub.batch.keys():
            sub.batch.pop(name)  # the placeholders: stock's passes ran before these existed
    sub.meta_info = dict(batch.meta_info)
    if "global_token_num" in sub.meta_info:
        sub.meta_info["global_token_num"] = costs[run].tolist()
    position = torch.searchsorted(rows, indices)  # draw d -> its row's place in ``rows``
    metrics = {
        "cost_aware/step/logprob_rows": float(run.numel()),
        "cost_aware/step/logprob_tokens": float(costs[run].sum()),
        "cost_aware/step/logprob_rows_padding": float(pad),
    }
    if OLD in deferred:
        out, _ = originals[OLD](trainer, sub)
        resampled.batch[OLD] = out.batch[OLD][: rows.numel()][position]
        actor = trainer.config.actor_rollout_ref.actor
        entropy = agg_loss(
            loss_mat=out.batch["entropys"][: rows.numel()],
            loss_mask=batch.batch["response_mask"][rows],
            loss_agg_mode=actor.loss_agg_mode,
            loss_scale_factor=actor.get("loss_scale_factor", None),
        )
        metrics["actor/entropy"] = float(entropy)  # the fed rows' (stock: every row's)
    if REF in deferred:
        out = originals[REF](trainer, sub)
        resampled.batch[REF] = out.batch[REF][: rows.numel()][position]
    return metrics


def patch_logprob_passes_v1(cls: type[Any], mark: Any) -> None:
    """Wrap trainer v1's ``_compute_old_log_prob(batch, metrics)`` and ``_compute_ref_log_prob`` (idempotent):
    deferred, they write nothing and return the batch."""
    import functools

    from costaware.integrations.verl.state import PATCH_MARK, cost_aware_config

    old, ref = getattr(cls, "_compute_old_log_prob", None), getattr(cls, "_compute_ref_log_prob", None)
    if old is None or ref is None or getattr(old, PATCH_MARK, False):
        return

    @functools.wraps(old)
    def _compute_old_log_prob(self, batch, metrics):
        cfg = cost_aware_config(self)
        self.__dict__[DEFERRED] = set()
        logged = bool(get_dotted(self.config, "actor_rollout_ref.rollout.calculate_log_probs", False))
        if cfg is None or not deferrable(self, cfg, logged):
            return old(self, batch, metrics)
        self.__dict__[DEFERRED] = {OLD}
        return batch

    @functools.wraps(ref)
    def _compute_ref_log_prob(self, batch, metrics):
        if OLD not in self.__dict__.get(DEFERRED, set()):
            return ref(self, batch, metrics)
        self.__dict__[DEFERRED].add(REF)
        return batch

    cls._compute_old_log_prob = mark(_compute_old_log_prob)
    cls._compute_ref_log_prob = mark(_compute_ref_log_prob)
    cls._cost_aware_logprob_passes = {OLD: old, REF: ref}


def patch_logprob_passes(cls: type[Any], mark: Any) -> None:
    """Wrap ``_compute_old_log_prob`` and ``_compute_ref_log_prob`` of trainer v0 (idempotent)."""
    import functools

    from costaware.integrations.verl.state import PATCH_MARK, cost_aware_config

    old, ref = getattr(cls, "_compute_old_log_prob", None), getattr(cls, "_compute_ref_log_prob", None)
    if old is None or ref is None or getattr(old, PATCH_MARK, False):
        return

    @functools.wraps(old)
    def _compute_old_log_prob(self, batch):
        cfg = cost_aware_config(self)
        self.__dict__[DEFERRED] = set()
        if cfg is None or not deferrable(self, cfg, "rollout_log_probs" in batch.batch.keys()):
            return old(self, batch)
        self.__dict__[DEFERRED] = {OLD}
        return placeholder(batch, OLD, "entropys"), 0.0

    @functools.wraps(ref)
    def _compute_ref_log_prob(self, batch):
        if OLD not in self.__dict__.get(DEFERRED, set()):
            return ref(self, batch)
        self.__dict__[DEFERRED].add(REF)
        return placeholder(batch, REF)

    cls._compute_old_log_prob = mark(_compute_old_log_prob)
    cls._compute_ref_log_prob = mark(_compute_ref_log_prob)
    cls._cost_aware_logprob_passes = {OLD: old, REF: ref}


def skipped_step_entropy(trainer: Any, batch: Any, dp_size: int, originals: dict) -> dict[str, float]:
    """``actor/entropy`` of a step whose update is skipped (every advantage zero), as stock logs it.

    fit() aggregates the placeholder's entropy (NaN) before ``_update_actor``; a fed step overwrites it
    with the fed rows' value, a skipped one has no fed rows. verl's policy pass over every row gives
    stock's value (its tokens are counted in ``cost_aware/step/logprob_tokens``); the update is still saved.
    """
    from types import SimpleNamespace

    every = torch.arange(len(batch))
    return fill_fed_logprobs(trainer, batch, SimpleNamespace(batch={}), every, {OLD}, dp_size, originals)
