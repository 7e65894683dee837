"""Plans that feed fewer rows than stock (merged duplicates, ``nonzero``, PODS) through the REAL patched
``_update_actor`` of trainers v0 and v1 (``verl_harness``: verl's own split, ``make_iterator``,
micro-batching and ``ppo_loss`` on 2 data-parallel ranks, a float64 bigram policy).

Each checks, per mini-batch: verl ran stock's number of optimiser steps; every rank got as many rows (S/2,
equal shapes); S is smaller than stock's mini-batch; the rows fed with a non-zero factor are the plan's;
and the gradient equals the plan's update under stock's normaliser, sum_i W_i grad(l_i) / (stock rows or
stock tokens), computed row by row (``target_grads``), whatever padding verl was fed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl trainer v0 deps missing")

from verl_harness import (  # noqa: E402
    AGG_MODES,
    ALPHA,
    DP,
    GROUP,
    MINI_PROMPTS,
    NUM_PROMPTS,
    SEED,
    STEP,
    padded_batch,
    run_v0,
    run_v1,
    target_grads,
    verl_losses,
)

from costaware.grpo.config import plan_seed  # noqa: E402
from costaware.grpo.plan import plan_minibatches  # noqa: E402
from costaware.integrations.verl import CostAwareConfig  # noqa: E402
from costaware.integrations.verl.resample import content_order, group_order, valid_tokens  # noqa: E402

STOCK_ROWS = MINI_PROMPTS * GROUP
STEPS = NUM_PROMPTS // MINI_PROMPTS
NO_REG = ("actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.entropy_coeff=0.0")


def _check_shapes(wg, fewer: bool = True) -> int:
    """Stock's optimiser steps, equal rows per rank, S < stock (``fewer``, else <=); returns S."""
    assert len(wg.grads) == STEPS and wg.lr_steps == 1
    sizes = {len(r) for r in wg.row_ids}
    assert len(sizes) == 1, f"every mini-batch has one size, got {sizes}"
    size = sizes.pop()
    assert size % DP == 0 and (size < STOCK_ROWS if fewer else size <= STOCK_ROWS)
    return size


def _fed(wg) -> list[dict[int, int]]:
    """Row -> times fed with a non-zero factor, per mini-batch."""
    out = []
    for rows, factors in zip(wg.row_ids, wg.factors, strict=True):
        step: dict[int, int] = {}
        for row, f in zip(rows.tolist(), factors.tolist(), strict=True):
            if f != 0:
                step[row] = step.get(row, 0) + 1
        out.append(step)
    return out


def _assert_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert max(float(e.norm()) for e in want) > 1e-3  # not 0 == 0 (a step of clipped rows may be 0)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-8)  # float32 factors


def _run(trainer: str, agg: str, data: dict, monkeypatch, *extra: str):
    if trainer == "v0":
        return run_v0(agg, data, verl_losses.ppo_loss, *extra)
    return run_v1(agg, data, verl_losses.ppo_loss, monkeypatch, *extra)


@pytest.mark.parametrize("trainer", ["v0", "v1"])
@pytest.mark.parametrize("agg", AGG_MODES)
def test_nonzero_feeds_only_the_informative_rows_with_stocks_update(trainer, agg, monkeypatch):
    """nonzero: each A != 0 row once, weight 1; the update equals stock's on the same rows (zero-advantage
    rows add no policy gradient), under stock's normaliser."""
    data = padded_batch()
    wg, config, model, metrics, _ = _run(
        trainer, agg, data, monkeypatch, "algorithm.cost_aware.method=nonzero", *NO_REG
    )
    _check_shapes(wg)
    fed = _fed(wg)
    adv = data["advantages"].abs().sum(-1)
    assert sorted(r for step in fed for r in step) == torch.nonzero(adv > 0).flatten().tolist()
    assert all(k == 1 for step in fed for k in step.values())
    _assert_close(wg.grads, target_grads(config, model, data, [dict.fromkeys(s, 1.0) for s in fed], STOCK_ROWS))
    # stock: every row of the mini-batch; the zero-advantage rows' terms are zero, so the sums agree
    cost = data["attention_mask"].sum(-1)
    assert metrics["cost_aware/step/tokens"] == float(cost[adv > 0].sum())
    assert metrics["cost_aware/step/tokens"] + metrics["cost_aware/step/tokens_padding"] == float(
        cost[torch.cat(wg.row_ids)].sum()
    )


@pytest.mark.parametrize("trainer", ["v0", "v1"])
@pytest.mark.parametrize("agg", AGG_MODES)
def test_merged_draws_run_once_with_their_count(trainer, agg, monkeypatch):
    """p_smooth with duplicates merged, KL and entropy on: row i drawn k times into step j is fed once with
    W = k / (n p_i) (p from the formula), padding rows with factor 0."""
    data = padded_batch()
    wg, config, model, metrics, _ = _run(trainer, agg, data, monkeypatch, "algorithm.cost_aware.merge_duplicates=true")
    _check_shapes(wg, fewer=False)  # a step without duplicates feeds stock's rows
    adv = data["advantages"].sum(-1) / data["response_mask"].sum(-1)
    cost = data["attention_mask"].sum(-1)
    cfg = CostAwareConfig(method="p_smooth", alpha=ALPHA, seed=SEED).resolved(agg)
    order = content_order(
        valid_tokens(data["input_ids"], data["attention_mask"])
    )  # the plan is drawn over rows in content order
    plan = plan_minibatches(adv[order].float(), cost[order], num_minibatches=STEPS, minibatch_size=STOCK_ROWS,
                            config=cfg.sampling_config(agg),
                            generator=torch.Generator().manual_seed(
                                plan_seed(SEED, STEP * (1 if trainer == "v0" else 1000))))  # fmt: skip
    beta = 0.0 if agg == "seq-mean-token-mean" else 1.0
    p_star = adv.abs().double() * cost.double() ** (beta - 0.5)
    p = (1 - ALPHA) * p_star / p_star.sum() + ALPHA / len(adv)
    w = 1.0 / (len(adv) * p)
    steps = [
        {int(order[i]): float(k) * float(w[order[i]]) for i, k in zip(mb.indices, mb.counts, strict=True)}
        for mb in plan.minibatches
    ]
    assert [dict.fromkeys(s, 1) for s in steps] == _fed(wg)  # the fed rows are the plan's, each once
    assert metrics["cost_aware/step/rows_unique"] < len(adv)
    _assert_close(wg.grads, target_grads(config, model, data, steps, STOCK_ROWS))


def test_pods_on_trainer_v1_is_refused_naming_the_method(monkeypatch):
    data = padded_batch()
    with pytest.raises(ValueError, match="method='pods' recomputes group advantages"):
        _run("v1", "token-mean", data, monkeypatch, "algorithm.cost_aware.method=pods", *NO_REG)


@pytest.mark.parametrize("trainer", ["v0"])
def test_pods_feeds_its_kept_rows_with_recomputed_advantages(trainer, monkeypatch):
    """PODS keeps half of each group and recomputes the advantages over the kept rows; verl feeds those rows
    with those advantages (the batch's are replaced), stock's normaliser."""
    from costaware.grpo.pods import pods_advantages, pods_select

    data = padded_batch()
    rewards = data["advantages"].sum(-1) / data["response_mask"].sum(-1)  # an affine map of each group's rewards
    last = data["response_mask"].sum(-1) - 1  # verl's reward sits on the last response token
    data["token_level_rewards"] = torch.zeros_like(data["advantages"]).index_put_(
        (torch.arange(len(last)), last), rewards
    )
    data["uid"] = np.repeat(np.array([f"p{i}" for i in range(NUM_PROMPTS)], dtype=object), GROUP)
    wg, config, model, _, _ = _run(trainer, "seq-mean-token-mean", data, monkeypatch,
                                   "algorithm.cost_aware.method=pods", *NO_REG)  # fmt: skip
    _check_shapes(wg)
    # the plugin lays the rows out in content order, then group by group (ties in PODS's pick follow it)
    order = content_order(valid_tokens(data["input_ids"], data["attention_mask"]))
    order = order[group_order(data["uid"][order.numpy()], GROUP)]
    kept_in_order = pods_select(rewards[order].double(), GROUP, GROUP // 2)
    kept = torch.zeros_like(kept_in_order).index_put_((order,), kept_in_order)
    new_adv = torch.zeros(len(order), dtype=torch.float64).index_put_(
        (order,), pods_advantages(rewards[order].double(), GROUP, kept_in_order).double()
    )
    fed = _fed(wg)
    rows = sorted(r for step in fed for r in step)
    assert set(rows) <= set(torch.nonzero(kept).flatten().tolist())
    assert rows == torch.nonzero(kept & (new_adv.abs() > 1e-6 * new_adv.abs().max())).flatten().tolist()
    data = dict(data, advantages=new_adv[:, None].to(data["advantages"].dtype) * data["response_mask"])
    _assert_close(wg.grads, target_grads(config, model, data, [dict.fromkeys(s, 1.0) for s in fed], STOCK_ROWS))
