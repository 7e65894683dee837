"""Trainer v0's old and reference log-prob passes run after the plan, on the fed rows only.

Through the REAL patched ``_compute_old_log_prob``, ``_compute_ref_log_prob`` and ``_update_actor`` of
``RayPPOTrainer`` (``verl_harness``: stub workers that split per rank and micro-batch with verl's own
functions; a float64 bigram policy and a separate bigram reference). For 1 and 2 ranks, KL on, dynamic
batch size, unequal lengths:
* the passes answer placeholders (NaN, no value) and run once the plan exists, on the rows some step
  feeds plus padding, every rank getting as many rows;
* the values the update receives equal stock's passes over every row, and the gradients equal those of
  the plugin fed with stock's values (``logprob_rows=all``), exactly;
* the caller's batch keeps its placeholders (nothing is written to it).
"""

from __future__ import annotations

import pytest
import torch

verl = pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl trainer v0 deps missing")

from verl_harness import (  # noqa: E402
    Bigram,
    StubWorkerGroup,
    padded_batch,
    ray_trainer,
    trainer_overrides,
    verl_losses,
)

import costaware.integrations.verl.logprobs as logprobs  # noqa: E402
from costaware.integrations.verl.logprobs import OLD, REF  # noqa: E402


def build(dp: int, agg: str, *extra: str):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    with initialize_config_dir(config_dir=f"{verl.__path__[0]}/trainer/config", version_base=None):
        full = compose(config_name="ppo_trainer", overrides=trainer_overrides(agg, *extra))
    actor = omega_conf_to_dataclass(
        OmegaConf.create(OmegaConf.to_container(full.actor_rollout_ref.actor, resolve=False))
    )
    wg = StubWorkerGroup(Bigram(), actor, verl_losses.ppo_loss, dp=dp)
    trainer = object.__new__(ray_trainer.RayPPOTrainer)
    trainer.config, trainer.global_steps, trainer.actor_rollout_wg = full, 2, wg
    trainer.ref_in_actor, trainer.ref_policy_wg = False, StubWorkerGroup(Bigram(seed=7), actor, None, dp=dp)
    return trainer, wg


def scored_batch():
    """The batch as verl holds it before the log-prob passes (no old or reference log-probs yet)."""
    from verl import DataProto

    data = padded_batch()
    del data["old_log_probs"], data["ref_log_prob"]
    return DataProto.from_dict(tensors=data, meta_info={"global_token_num": data["attention_mask"].sum(-1).tolist()})


def stock_passes(trainer, batch):
    """verl's own passes over every row (the unwrapped methods)."""
    passes = ray_trainer.RayPPOTrainer._cost_aware_logprob_passes
    old, _ = passes[OLD](trainer, batch)
    return old.batch[OLD], passes[REF](trainer, batch).batch[REF]


def one_step(trainer, batch):
    """fit's order: old pass, union, reference pass, union, (advantages are in the fixture), update."""
    old, _ = trainer._compute_old_log_prob(batch)
    old.batch.pop("entropys")
    batch = batch.union(old)
    batch = batch.union(trainer._compute_ref_log_prob(batch))
    return batch, trainer._update_actor(batch)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("dp", [1, 2])
def test_fed_rows_get_stocks_values_and_only_they_are_computed(dp, agg, monkeypatch):
    captured = {}
    fill = logprobs.fill_fed_logprobs

    def spy(trainer, batch, resampled, indices, *args):
        out = fill(trainer, batch, resampled, indices, *args)
        captured.update(indices=indices.clone(), old=resampled.batch[OLD].clone(), ref=resampled.batch[REF].clone())
        return out

    monkeypatch.setattr(logprobs, "fill_fed_logprobs", spy)
    trainer, wg = build(dp, agg)
    batch = scored_batch()
    stock_old, stock_ref = stock_passes(trainer, batch)
    wg.logprob_rows.clear()
    trainer.ref_policy_wg.logprob_rows.clear()

    held, out = one_step(trainer, batch)
    assert torch.isnan(held.batch[OLD]).all() and torch.isnan(held.batch[REF]).all()  # no value, nothing written
    fed = torch.unique(torch.cat(wg.row_ids))
    assert fed.numel() < len(batch), "the fixture must leave some row unfed"
    for worker in (wg, trainer.ref_policy_wg):  # one pass each, after the plan
        (ranks,) = worker.logprob_rows
        assert len({r.numel() for r in ranks}) == 1, "every rank runs as many rows"
        ran = torch.cat(ranks)
        assert set(ran.tolist()) == set(fed.tolist())  # fed rows, padded with one of them
        assert ran.numel() - fed.numel() < dp
    mask = batch.batch["response_mask"][captured["indices"]].bool()
    torch.testing.assert_close(captured["old"][mask], stock_old[captured["indices"]][mask], rtol=0, atol=0)
    torch.testing.assert_close(captured["ref"][mask], stock_ref[captured["indices"]][mask], rtol=0, atol=0)
    metrics = out.meta_info["metrics"]
    costs = batch.batch["attention_mask"].sum(-1)
    assert metrics["cost_aware/step/logprob_rows"] == float(sum(r.numel() for r in wg.logprob_rows[0]))
    assert metrics["cost_aware/step/logprob_tokens"] < float(costs.sum())

    # the same plan fed stock's values (logprob_rows=all: stock passes) gives the same gradients, exactly
    stock, stock_wg = build(dp, agg, "+algorithm.cost_aware.logprob_rows=all")
    one_step(stock, scored_batch())
    for worker in (stock_wg, stock.ref_policy_wg):
        assert [torch.cat(r).numel() for r in worker.logprob_rows] == [len(batch)]
    assert len(stock_wg.grads) == len(wg.grads)
    for a, b in zip(wg.grads, stock_wg.grads, strict=True):
        assert float(a.norm()) > 0
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_rollout_log_probs_keep_stocks_passes():
    """Rollout correction and verl's debug metrics read every row's old log-probs: stock passes run."""
    trainer, wg = build(2, "token-mean")
    batch = scored_batch()
    batch.batch["rollout_log_probs"] = -torch.ones_like(batch.batch["responses"], dtype=torch.float32)
    held, _ = one_step(trainer, batch)
    assert not torch.isnan(held.batch[OLD]).any() and not torch.isnan(held.batch[REF]).any()
    assert torch.cat(wg.logprob_rows[0]).numel() == len(batch)


@pytest.mark.parametrize(
    "extra", ["algorithm.use_kl_in_reward=true", "+algorithm.cost_aware.method=none"], ids=["kl_in_reward", "none"]
)
def test_settings_that_read_every_row_keep_stocks_passes(extra):
    overrides = (extra,) if "method" not in extra else ()
    trainer, wg = build(1, "token-mean", *overrides)
    if "method" in extra:
        trainer.config.algorithm.cost_aware.method = "none"
    held, _ = one_step(trainer, scored_batch())
    assert not torch.isnan(held.batch[OLD]).any()
    assert torch.cat(wg.logprob_rows[0]).numel() == len(held)


@pytest.mark.parametrize("dp", [2, 4])
def test_an_odd_number_of_fed_rows_is_padded_for_every_rank(dp):
    """5 distinct fed rows on 2 or 4 ranks: padded with the cheapest fed row so the contiguous split is even."""
    trainer, wg = build(dp, "token-mean")
    batch = scored_batch()
    stock_old, stock_ref = stock_passes(trainer, batch)
    wg.logprob_rows.clear()
    indices = torch.tensor([9, 3, 3, 14, 0, 9, 6, 14])  # rows 0, 3, 6, 9, 14
    resampled = batch.select_idxs(indices)
    passes = ray_trainer.RayPPOTrainer._cost_aware_logprob_passes
    metrics = logprobs.fill_fed_logprobs(trainer, batch, resampled, indices, {OLD, REF}, dp, passes)
    (ranks,) = wg.logprob_rows
    assert len({r.numel() for r in ranks}) == 1 and torch.cat(ranks).numel() % dp == 0
    costs = batch.batch["attention_mask"].sum(-1)
    cheapest = int(torch.tensor([0, 3, 6, 9, 14])[torch.argmin(costs[[0, 3, 6, 9, 14]])])
    assert sorted(torch.cat(ranks).tolist()) == sorted([0, 3, 6, 9, 14] + [cheapest] * (-5 % dp))
    assert metrics["cost_aware/step/logprob_rows_padding"] == float(-5 % dp)
    mask = batch.batch["response_mask"][indices].bool()
    torch.testing.assert_close(resampled.batch[OLD][mask], stock_old[indices][mask], rtol=0, atol=0)
    torch.testing.assert_close(resampled.batch[REF][mask], stock_ref[indices][mask], rtol=0, atol=0)


# ------------------------------------------------------------------------------ trainer v1 (TransferQueue)


def setup_v1(monkeypatch, dp: int, *extra: str):
    """A v1 trainer on an in-memory TransferQueue holding a scored batch (no log-probs stored yet)."""
    tq = pytest.importorskip("transfer_queue", reason="TransferQueue (verl-core extra) not installed")
    trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
    from tensordict import TensorDict
    from transfer_queue import KVBatchMeta
    from verl_harness import MemoryKV, StubWorkerGroupV1, actor_config, to_rows

    store = MemoryKV()
    for name in ("kv_batch_put", "kv_batch_get", "kv_clear"):
        monkeypatch.setattr(tq, name, getattr(store, name))
    data = padded_batch()
    del data["old_log_probs"], data["ref_log_prob"]
    rows = to_rows(data)
    keys = [f"k{i}" for i in range(len(rows["input_ids"]))]
    fields = {k: torch.nested.as_nested_tensor(v, layout=torch.jagged) for k, v in rows.items()}
    tags = [{"seq_len": int(s)} for s in data["attention_mask"].sum(-1).tolist()]
    store.kv_batch_put(keys, "train", TensorDict(fields, batch_size=len(keys)), tags=tags)
    # fields=None: the workers read every field a row holds (verl's passes add fields to the rows)
    meta = KVBatchMeta(keys=keys, tags=tags, partition_id="train", fields=None, extra_info={})
    # verl 0.9 stores rollout log-probs by default, and its rollout-correction step then reads every row's
    # old log-prob: the fed-rows passes need calculate_log_probs=false (test_v1_rollout_log_probs_...)
    full, config = actor_config("token-mean", "actor_rollout_ref.rollout.calculate_log_probs=false", *extra)
    wg = StubWorkerGroupV1(Bigram(), config, verl_losses.ppo_loss, store)
    ref_wg = StubWorkerGroupV1(Bigram(seed=7), config, None, store)
    wg.dp = ref_wg.dp = dp

    class Trainer(trainer_base.PPOTrainer):  # the abstract hooks only; the passes and update are verl's
        def on_sample_end(self, *args, **kwargs):
            pass

        def on_step_end(self, *args, **kwargs):
            pass

    trainer = object.__new__(Trainer)
    trainer.config, trainer.global_steps, trainer.actor_rollout_wg = full, 2, wg
    trainer.local_trigger_step, trainer.total_training_steps = 0, 100
    trainer.ref_in_actor, trainer.ref_policy_wg = False, ref_wg
    return trainer, meta, store, keys, rows


def run_v1_passes(monkeypatch, dp: int, *extra: str):
    """v1's order: old pass, reference pass, update."""
    trainer, meta, store, keys, rows = setup_v1(monkeypatch, dp, *extra)
    wg, ref_wg = trainer.actor_rollout_wg, trainer.ref_policy_wg
    metrics: dict = {}
    meta = trainer._compute_old_log_prob(meta, metrics)
    meta = trainer._compute_ref_log_prob(meta, metrics)
    trainer._update_actor(meta, metrics)
    return wg, ref_wg, store, keys, rows, metrics


@pytest.mark.parametrize("dp", [1, 2])
def test_v1_fed_rows_only_and_the_same_update_as_stocks_passes(dp, monkeypatch):
    wg, ref_wg, store, keys, rows, metrics = run_v1_passes(monkeypatch, dp)
    fed = torch.unique(torch.cat(wg.row_ids))
    assert fed.numel() < len(keys), "the fixture must leave some row unfed"
    for worker in (wg, ref_wg):  # the fed rows, padded with unfed rows (no copies) to a multiple of dp
        (ranks,) = worker.logprob_rows
        ran = torch.cat(ranks)
        assert len({r.numel() for r in ranks}) == 1 and len(set(ran.tolist())) == ran.numel()
        assert set(fed.tolist()) <= set(ran.tolist()) and ran.numel() - fed.numel() < dp
    assert sorted(k for _, k in store.rows) == sorted(keys)  # no key left behind
    held = {k: set(store.rows[("train", k)]) for k in keys}
    assert len({frozenset(f) for f in held.values()}) == 1, "one field set on every caller row"
    assert held[keys[0]] == set(rows) | {OLD, REF, "log_probs", "entropy"}  # the plan's weights: workers only
    for i, key in enumerate(keys):  # the log-probs only where a pass ran
        stored = store.rows[("train", key)]
        assert bool(torch.isnan(stored[OLD]).all()) == (i not in set(ran.tolist()))
        for name in set(rows):  # the caller's own values again
            torch.testing.assert_close(stored[name], rows[name][i], rtol=0, atol=0)
    assert metrics["cost_aware/step/logprob_rows"] == float(torch.cat(wg.logprob_rows[0]).numel())
    assert "actor/entropy" in metrics

    stock_wg, stock_ref, *_ = run_v1_passes(monkeypatch, dp, "+algorithm.cost_aware.logprob_rows=all")
    assert [torch.cat(r).numel() for r in stock_wg.logprob_rows] == [len(keys)]  # stock: every row
    assert len(stock_wg.grads) == len(wg.grads)
    for a, b in zip(wg.grads, stock_wg.grads, strict=True):
        assert float(a.norm()) > 0
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_settings_that_read_every_rows_logprobs_keep_the_stock_passes():
    """verl's default rollout.calculate_log_probs=true stores rollout log-probs, which rollout correction
    and the debug metrics compare with every row's old log-prob: not deferred (v0 decides by the batch, v1
    by this setting); neither are the other settings that read every row's log-probs."""
    from verl_harness import actor_config

    from costaware.integrations.verl.config import read_trainer_config
    from costaware.integrations.verl.logprobs import deferrable

    def decide(*extra, logged=False):
        trainer, _ = build(1, "token-mean", *extra)
        return deferrable(trainer, read_trainer_config(trainer.config), logged)

    assert actor_config("token-mean")[0].actor_rollout_ref.rollout.calculate_log_probs  # verl's default
    assert decide() and not decide(logged=True)
    assert not decide("algorithm.use_kl_in_reward=true")
    assert not decide("+algorithm.cost_aware.logprob_rows=all")
    assert not decide("actor_rollout_ref.actor.calculate_sum_pi_squared=true")


@pytest.mark.parametrize("unfed_left", [True, False])
def test_v1_an_odd_number_of_fed_rows_is_padded(unfed_left, monkeypatch):
    """5 fed rows on 2 ranks: padded with the cheapest unfed row under its own key (nothing copied), or, when
    no unfed row is left, with a copy of the cheapest fed row under a padding key."""
    from costaware.integrations.verl import v1
    from costaware.integrations.verl.logprobs import pad_multiple

    trainer, meta, store, keys, rows = setup_v1(monkeypatch, 2)
    fed = [9, 3, 14, 0, 6]
    cost = lambda i: (meta.tags[i]["seq_len"], i)  # noqa: E731
    cheapest_first = sorted(range(len(keys)) if unfed_left else fed, key=cost)
    copied, metrics = [], {}
    ran, out = v1._fed_passes(trainer, meta, fed, cheapest_first, {OLD, REF}, metrics, "t", copied, pad_multiple)
    pad = min((i for i in range(len(keys)) if i not in fed), key=cost) if unfed_left else min(fed, key=cost)
    assert copied == ([] if unfed_left else [f"{keys[pad]}#t.pad0"])
    assert ran == set(fed) | ({pad} if unfed_left else set()) and out["cost_aware/step/logprob_rows_padding"] == 1.0
    for worker in (trainer.actor_rollout_wg, trainer.ref_policy_wg):
        (ranks,) = worker.logprob_rows
        assert [r.numel() for r in ranks] == [3, 3] and sorted(torch.cat(ranks).tolist()) == sorted(fed + [pad])
    assert all({OLD, REF} <= set(store.rows[("train", keys[i])]) for i in ran) and "actor/entropy" in metrics


@pytest.mark.parametrize("dp", [1, 2])
def test_skipped_update_logs_a_finite_entropy_equal_to_stocks(dp):
    """Every advantage zero, no KL or entropy term: the update is skipped. fit() logs ``actor/entropy`` from
    the old pass's output (the placeholder, NaN) and then the update's metrics over it: the skipped update
    must supply the entropy, stock's value over every row."""
    import math

    from verl.trainer.ppo.core_algos import agg_loss

    no_reg = ("actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.entropy_coeff=0.0")
    trainer, wg = build(dp, "token-mean", *no_reg)
    batch = scored_batch()
    batch.batch["advantages"] = torch.zeros_like(batch.batch["advantages"])
    old, _ = trainer._compute_old_log_prob(batch)  # fit's order and its metric
    mask = batch.batch["response_mask"]
    metrics = {
        "actor/entropy": float(agg_loss(loss_mat=old.batch["entropys"], loss_mask=mask, loss_agg_mode="token-mean"))
    }
    assert math.isnan(metrics["actor/entropy"])  # the placeholder: the pass waits for the plan
    old.batch.pop("entropys")
    out = trainer._update_actor(batch.union(old))
    metrics.update(out.meta_info["metrics"])  # fit: metrics.update(actor_output_metrics)
    assert out.meta_info["metrics"]["cost_aware/step/skipped"] == 1.0 and wg.grads == []
    stock, _ = ray_trainer.RayPPOTrainer._cost_aware_logprob_passes[OLD](trainer, batch)
    want = float(agg_loss(loss_mat=stock.batch["entropys"], loss_mask=mask, loss_agg_mode="token-mean"))
    assert math.isfinite(metrics["actor/entropy"]) and metrics["actor/entropy"] == pytest.approx(want, rel=1e-6)
