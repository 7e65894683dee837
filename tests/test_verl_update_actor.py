"""Regression tests that drive the REAL patched ``_update_actor`` of verl's trainers v0 and v1 on CPU.

The harness (``verl_harness.py``) replaces the Ray worker group by a stub that replays verl's actor worker
with verl's own functions, on a float64 bigram policy. Each mini-batch's gradient (averaged over ranks)
must equal sum_i f_i grad(l_i), with l_i the row's own loss (policy gradient with its rollout-correction
weight, minus entropy, plus low_var_kl) under the mini-batch's normaliser and f_i the plugin's factor
(w_i = 1/(n p_i) from the formula, times the pool-normaliser ratio under token-mean).
"""

from __future__ import annotations

import pytest
import torch

verl = pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl trainer v0 deps missing")

from verl_harness import (  # noqa: E402
    AGG_MODES,
    DP,
    assert_grads_match,
    expected_grads,
    padded_batch,
    run_v0,
    run_v1,
    trainer_overrides,
    verl_losses,
)

from costaware.integrations.verl import is_patched  # noqa: E402

# --------------------------------------------------------------------------------------------- tests


def test_hook_patched_the_loss_the_workers_bind():
    import verl.workers.engine_workers as engine_workers

    assert is_patched("verl.workers.utils.losses") and is_patched("verl.trainer.ppo.ray_trainer")
    assert engine_workers.ppo_loss is verl_losses.ppo_loss
    assert getattr(verl_losses.ppo_loss, "__costaware_cost_aware__", False)
    # trainer v1's rows are selected in the actor worker's mini-batch loop, which keeps verl's dispatch mark
    train = engine_workers.TrainingWorker.train_mini_batch
    assert is_patched("verl.workers.engine_workers") and getattr(train, "__costaware_cost_aware__", False)
    assert vars(train.__wrapped__).keys() <= vars(train).keys()


@pytest.mark.parametrize("agg", AGG_MODES)
def test_v0_minibatch_gradient_is_weighted_sum_with_kl_and_entropy(agg):
    data = padded_batch()
    wg, config, model, metrics, _ = run_v0(agg, data, verl_losses.ppo_loss)
    assert_grads_match(wg.grads, expected_grads(wg, config, model, data))
    assert wg.lr_steps == 1
    tokens = float(data["attention_mask"].sum(-1)[torch.cat(wg.row_ids)].sum())
    assert metrics["cost_aware/total/tokens"] == metrics["cost_aware/step/tokens"] == tokens


@pytest.mark.parametrize(
    ("agg", "with_is_weights"), [(agg, True) for agg in AGG_MODES] + [("seq-mean-token-mean", False)]
)
def test_v1_minibatch_gradient_is_weighted_sum_with_kl_and_entropy(agg, with_is_weights, monkeypatch):
    data = padded_batch()
    if not with_is_weights:
        del data["rollout_is_weights"]
    wg, config, model, metrics, (store, returned, meta, rows) = run_v1(agg, data, verl_losses.ppo_loss, monkeypatch)
    assert_grads_match(wg.grads, expected_grads(wg, config, model, data))
    assert wg.lr_steps == 1
    assert returned is meta
    drawn_rows = torch.cat(wg.row_ids)
    assert len(torch.unique(drawn_rows)) < len(drawn_rows), "the fixture must draw some row twice"
    # one read per rank, each row once (a row a second rank reads too: under a copy key cleared afterwards);
    # the plan's weights live in the workers only: the caller's rows keep their own values and fields
    (read,) = wg.keys_read
    share = len(read) // DP
    assert all(len(set(read[r * share : (r + 1) * share])) == share for r in range(DP))
    assert sorted(k for _, k in store.rows) == sorted(meta.keys)
    for i, key in enumerate(meta.keys):
        stored = store.rows[("train", key)]
        assert sorted(stored) == sorted(rows)
        for name, value in stored.items():
            torch.testing.assert_close(value, rows[name][i], rtol=0, atol=0)
    tokens = float(data["attention_mask"].sum(-1)[drawn_rows].sum())
    assert metrics["cost_aware/total/tokens"] == tokens


@pytest.mark.parametrize(
    ("extra", "label"),
    [
        ((), "KL (low_var_kl, coef 1) and entropy (0.01)"),
        (("actor_rollout_ref.actor.entropy_coeff=0.0",), "KL only"),
    ],
)
def test_unweighted_kl_and_entropy_are_caught(extra, label):
    """verl's own ppo_loss (KL and entropy outside rollout_is_weights) fails the same check."""
    data = padded_batch()
    original = verl_losses.ppo_loss.__wrapped__
    wg, config, model, _, _ = run_v0("token-mean", data, original, *extra)
    want = expected_grads(wg, config, model, data)
    rel = max(float((g - e).norm() / e.norm()) for g, e in zip(wg.grads, want, strict=True))
    print(f"\nunweighted {label}: largest relative mini-batch gradient error {rel:.3f}")
    assert rel > 0.05
    wg, config, model, _, _ = run_v0("token-mean", data, verl_losses.ppo_loss, *extra)
    assert_grads_match(wg.grads, expected_grads(wg, config, model, data))  # the wrapper fixes it


def test_refuses_kl_or_entropy_without_full_support():
    from hydra import compose, initialize_config_dir

    from costaware.integrations.verl.config import read_trainer_config

    for override, name in (
        ("actor_rollout_ref.actor.entropy_coeff=0.0", "use_kl_loss=True"),
        ("actor_rollout_ref.actor.use_kl_loss=false", "entropy_coeff=0.01"),
    ):
        overrides = trainer_overrides("token-mean", override)
        overrides = [o.replace("method=p_smooth", "method=p_star") for o in overrides]
        with initialize_config_dir(config_dir=f"{verl.__path__[0]}/trainer/config", version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=overrides)
        with pytest.raises(ValueError, match="zero probability to rows with zero advantage") as info:
            read_trainer_config(cfg)
        assert name in str(info.value) and "p_smooth with alpha > 0" in str(info.value)


def test_skipped_step_makes_no_update_and_no_scheduler_step():
    """Without KL and entropy an all-zero-advantage pool has a zero gradient: no update is exact."""
    data = padded_batch()
    data["advantages"] = torch.zeros_like(data["advantages"])
    off = ("actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.entropy_coeff=0.0")
    wg, _, _, metrics, trainer = run_v0("token-mean", data, verl_losses.ppo_loss, *off)
    assert wg.grads == [] and wg.lr_steps == 0  # the LR schedule counts optimizer updates only
    assert metrics["cost_aware/step/skipped"] == 1.0 and metrics["cost_aware/total/tokens"] == 0.0
    assert trainer._cost_aware_counters.skipped == 1.0


def test_v1_metrics_aggregator_logs_true_totals():
    """separate_async: verl's MetricsAggregator over 4 updates logs the last total and the summed steps."""
    pytest.importorskip("transfer_queue", reason="TransferQueue (verl-core extra) not installed")
    from verl.trainer.ppo.v1.utils import MetricsAggregator  # the v1 package imports TransferQueue

    from costaware.grpo.accounting import Counters, StepCounts

    assert is_patched("verl.trainer.ppo.v1.utils")
    counters, agg = Counters(), MetricsAggregator()
    for k in range(4):
        step = StepCounts(tokens=100, tokens_plain=160, rows_drawn=8, rows_fed=8, rows_unique=5 + k)
        counters.add(step)
        agg.add_step_metrics({**counters.metrics(step), "actor/pg_loss": 0.1 * k}, sample_count=8)
    out = agg.get_aggregated_metrics()
    assert out["cost_aware/total/tokens"] == 400.0 and out["cost_aware/step/tokens"] == 400.0
    assert out["cost_aware/total/generations"] == 4.0 and out["cost_aware/step/rows_unique"] == 26.0
    assert out["actor/pg_loss"] == pytest.approx(0.15)  # verl's other metrics keep their rule
