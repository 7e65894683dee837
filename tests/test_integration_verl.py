"""CPU tests of the verl 0.9 plugin: config, resampling, weights reaching the policy loss, plugin loading.

No Ray workers and no GPU: the worker side of ``update_actor`` (left_right_2_no_padding, the contiguous
per-rank split, ``make_iterator`` with shuffle off, ``ppo_loss``) is run here with verl's own functions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")

from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_policy_loss_fn  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.utils.padding import left_right_2_no_padding  # noqa: E402

from costaware.integrations.verl import CostAwareConfig  # noqa: E402
from costaware.integrations.verl.config import read_trainer_config  # noqa: E402
from costaware.integrations.verl.transfer import (  # noqa: E402
    feed_plan,
    nested_row_means,
    nested_scaled_weights,
)

PROMPT_LEN, RESPONSE_LEN, GROUP = 5, 7, 4


def grpo_batch(num_prompts: int = 4, seed: int = 0, with_is_weights: bool = False) -> DataProto:
    """A padded batch with the keys verl's GRPO pipeline has when ``_update_actor`` runs."""
    g = torch.Generator().manual_seed(seed)
    n = num_prompts * GROUP
    prompt_lens = torch.randint(2, PROMPT_LEN + 1, (n,), generator=g)
    response_lens = torch.randint(1, RESPONSE_LEN + 1, (n,), generator=g)
    cols_p, cols_r = torch.arange(PROMPT_LEN), torch.arange(RESPONSE_LEN)
    prompt_mask = (cols_p[None, :] >= PROMPT_LEN - prompt_lens[:, None]).long()  # left padded
    response_mask = (cols_r[None, :] < response_lens[:, None]).long()  # right padded
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    prompts = torch.randint(3, 50, (n, PROMPT_LEN), generator=g) * prompt_mask
    responses = torch.randint(3, 50, (n, RESPONSE_LEN), generator=g) * response_mask
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    rewards = torch.randint(0, 2, (n,), generator=g).float()
    rewards[:GROUP] = 1.0  # one all-correct group: zero advantages, never drawn
    token_level_rewards = torch.zeros(n, RESPONSE_LEN)
    token_level_rewards[torch.arange(n), response_lens - 1] = rewards
    uid = np.repeat(np.array([f"prompt-{i}" for i in range(num_prompts)], dtype=object), GROUP)
    advantages, returns = compute_grpo_outcome_advantage(token_level_rewards, response_mask.float(), uid)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
        "token_level_scores": token_level_rewards.clone(),
        "token_level_rewards": token_level_rewards,
        "old_log_probs": -torch.rand(n, RESPONSE_LEN, generator=g) * response_mask,
        "advantages": advantages,
        "returns": returns,
    }
    if with_is_weights:
        tensors["rollout_is_weights"] = (0.5 + torch.rand(n, RESPONSE_LEN, generator=g)) * response_mask
    non_tensors = {
        "uid": uid,
        "data_source": np.array([f"src{i % 3}" for i in range(n)], dtype=object),
        "reward_model": np.array([{"ground_truth": str(i)} for i in range(n)], dtype=object),
        "row_id": np.arange(n),
    }
    meta = {"global_token_num": attention_mask.sum(-1).tolist(), "temperature": 1.0}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)


def verl_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


@pytest.fixture(scope="module")
def base_config():
    return verl_config(
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.shuffle=false",
        f"actor_rollout_ref.rollout.n={GROUP}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "+algorithm.cost_aware.method=p_star",
        "+algorithm.cost_aware.seed=7",
    )


# ----------------------------------------------------------------------------------------------- config


def test_config_defaults_and_hydra_key(base_config):
    cfg = read_trainer_config(base_config)
    # verl's default loss_agg_mode is token-mean (a token sum): proxy=auto resolves to the length-aware prior
    assert cfg == CostAwareConfig(method="p_star", seed=7, proxy="length_aware", proxy_beta=1.0)
    assert cfg.merge_duplicates is True and cfg.weights == "centred"  # merged, as in the core
    no_key = verl_config("algorithm.adv_estimator=grpo")
    assert read_trainer_config(no_key) is None
    off = verl_config("actor_rollout_ref.actor.shuffle=false", "+algorithm.cost_aware.enable=false")
    assert read_trainer_config(off) is None


# -------------------------------------------------------------------------------- proxy --


def test_proxy_options_pass_through_to_the_core():
    cfg = CostAwareConfig.from_mapping(
        {"method": "p_smooth", "alpha": 0, "proxy": "length_aware", "proxy_beta": 1, "adaptive_alpha_max_weight": 8}
    )
    core = cfg.sampling_config()
    assert (core.method, core.proxy, core.proxy_beta, core.adaptive_alpha_max_weight) == (
        "p_smooth",
        "length_aware",
        1.0,
        8.0,
    )
    prior = CostAwareConfig(method="p_star", proxy="length_aware").sampling_config("seq-mean-token-mean")
    assert prior.proxy_beta == 0.0  # the loss family's prior
    paper = CostAwareConfig(proxy="advantage").sampling_config()
    assert (paper.proxy, paper.beta) == ("advantage", 0.0)


@pytest.mark.parametrize(
    "mode,proxy,beta",
    [
        ("token-mean", "length_aware", 1.0),
        ("seq-mean-token-sum", "length_aware", 1.0),
        ("seq-mean-token-mean", "advantage", None),
    ],
)
def test_proxy_auto_resolves_with_the_actors_loss_agg_mode(mode, proxy, beta):
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # auto with p_star warns only under a token-sum loss, with the advice
        cfg = read_trainer_config(
            verl_config(
                "actor_rollout_ref.actor.shuffle=false",
                f"actor_rollout_ref.actor.loss_agg_mode={mode}",
                "+algorithm.cost_aware.method=p_star",
            )
        )
    advice = [w for w in seen if "proxy='auto'" in str(w.message)]
    assert len(advice) == (proxy == "length_aware")
    assert (cfg.proxy, cfg.proxy_beta) == (proxy, beta)


def test_the_papers_proxy_under_a_token_sum_loss_is_the_measured_advice_and_does_not_warn():
    overrides = ("actor_rollout_ref.actor.shuffle=false", "+algorithm.cost_aware.proxy=advantage")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = read_trainer_config(verl_config(*overrides))
        read_trainer_config(verl_config(*overrides, "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"))
    assert (cfg.proxy, cfg.proxy_beta) == ("advantage", None)


@pytest.mark.parametrize(
    "mapping,match",
    [
        ({"proxy": "calibrated"}, "proxy='calibrated' is not supported in verl.*per-sequence gradient norms"),
        ({"proxy": "bogus"}, "proxy must be one of.*bogus"),
        ({"proxy": "length_aware", "proxy_beta": 9.0}, "proxy_beta must lie in.*9.0"),
        ({"proxy": "length_aware", "proxy_beta": "1"}, "proxy_beta must be a real number.*'1'"),
        ({"proxy": "advantage", "proxy_beta": 0.5}, "proxy_beta=0.5"),
        ({"proxy": "length_aware", "proxy_beta": 1.0, "method": "uniform"}, "method='uniform'"),
        ({"adaptive_alpha_max_weight": 4.0}, "needs method='p_smooth'"),
        ({"method": "p_smooth", "adaptive_alpha_max_weight": 0.5}, "adaptive_alpha_max_weight.*0.5"),
    ],
)
def test_bad_proxy_options_are_refused_naming_the_value(mapping, match):
    with pytest.raises(ValueError, match=match):
        CostAwareConfig.from_mapping(mapping)
    if mapping == {"proxy": "length_aware", "proxy_beta": 9.0}:
        return
    with pytest.raises(ValueError, match="proxy_beta=0.3 with proxy='auto'"):
        CostAwareConfig(proxy_beta=0.3).resolved("token-mean")


def test_adaptive_alpha_reaches_the_resampled_weights():
    from costaware.integrations.verl import plan_resampling

    batch = grpo_batch(num_prompts=6, seed=3)
    adv = batch.batch["advantages"].sum(-1) / batch.batch["response_mask"].sum(-1)
    cost = batch.batch["attention_mask"].sum(-1)
    kw = dict(method="p_smooth", alpha=0.0, proxy="length_aware", proxy_beta=1.0, weights="raw", merge_duplicates=False)
    fixed = plan_resampling(adv, cost, CostAwareConfig(**kw), minibatch_size=8, dp_size=2, seed=0, step=0)
    assert float(fixed.weights.max()) > 1.5  # without adaptive smoothing some weight exceeds the bound
    cfg = CostAwareConfig(**kw, adaptive_alpha_max_weight=1.5)
    res = plan_resampling(adv, cost, cfg, minibatch_size=8, dp_size=2, seed=0, step=0)
    # the raw weight 1/(n p) <= 1.5 on every drawn row with A != 0
    assert float(res.weights[adv[res.indices] != 0].max()) <= 1.5 * (1 + 1e-5)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"method": "bogus"}, "'bogus'"),
        ({"alpha": 1.5}, "alpha must be 0 or lie in [1e-300, 1], got 1.5"),
        ({"alpha": float("nan")}, "alpha must be finite, got nan"),
        ({"proxy_noise": -0.1}, "proxy_noise must be a finite variance >= 0, got -0.1"),
        ({"weights": "mean"}, "weights must be 'centred' or 'raw', got 'mean'"),
        ({"merge_duplicates": "yes"}, "merge_duplicates must be true or false, got 'yes'"),
        ({"seed": -1}, "seed must be a non-negative integer, got -1"),
        ({"enable": "yes"}, "enable must be true or false, got 'yes'"),
        ({"methd": "p_star"}, "unknown key(s) ['methd']"),
    ],
)
def test_config_errors_name_field_and_value(values, message):
    with pytest.raises(ValueError, match="algorithm.cost_aware") as info:
        CostAwareConfig.from_mapping(values)
    assert message in str(info.value)


def test_every_listed_method_is_accepted_and_the_unknown_method_error_lists_them():
    """The list an unknown method's error gives is what verl accepts: each entry builds a config."""
    from costaware.integrations.verl.config import verl_methods

    with pytest.raises(ValueError, match="algorithm.cost_aware.method must be 'auto' or one of") as info:
        CostAwareConfig.from_mapping({"method": "bogus"})
    assert str(verl_methods()) in str(info.value)
    for method in verl_methods():
        assert CostAwareConfig.from_mapping({"method": method}).method == method
        assert read_trainer_config(
            verl_config("actor_rollout_ref.actor.shuffle=false", f"+algorithm.cost_aware.method={method}")
        )


@pytest.mark.parametrize("value", ["0", "-1.0"])
def test_loss_scale_factor_must_be_positive(value):
    overrides = ["actor_rollout_ref.actor.shuffle=false", "+algorithm.cost_aware.method=p_star",
                 f"+actor_rollout_ref.actor.loss_scale_factor={value}"]  # fmt: skip
    with pytest.raises(ValueError, match=r"actor_rollout_ref.actor.loss_scale_factor .* got -?[01]"):
        read_trainer_config(verl_config(*overrides))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("actor_rollout_ref.actor.ppo_epochs=2", "ppo_epochs=1"),
        ("actor_rollout_ref.actor.shuffle=true", "shuffle=false"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode", "loss_mode='bypass_mode'"),
    ],
)
def test_unsupported_trainer_setting_is_a_value_error_naming_it(override, message):
    overrides = ["actor_rollout_ref.actor.shuffle=false", "+algorithm.cost_aware.method=p_star", override]
    with pytest.raises(ValueError, match="algorithm.cost_aware") as info:
        read_trainer_config(verl_config(*overrides))
    assert message in str(info.value)


# ------------------------------------------------------------------------------------------- resampling


def _resample(batch, cfg=None, minibatch_size=8, dp_size=2, seed=0):
    from costaware.integrations.verl import resample_dataproto

    return resample_dataproto(
        batch,
        cfg or CostAwareConfig(merge_duplicates=False),
        minibatch_size=minibatch_size,
        dp_size=dp_size,
        seed=seed,
        step=0,
    )


@pytest.mark.parametrize("method", ["p_star", "p_smooth", "inv_sqrt_cost", "uniform", "none"])
def test_resampling_keeps_every_field_aligned(method):
    batch = grpo_batch(num_prompts=6, with_is_weights=True)
    res = _resample(batch, CostAwareConfig(method=method, alpha=0.1))
    new, idx = res.batch, res.indices
    assert len(new) == idx.numel() <= len(batch)  # merged duplicates run once
    for key in batch.batch.keys():
        if key == "rollout_is_weights":
            continue
        assert torch.equal(new.batch[key], batch.batch[key][idx]), key
    for key, value in batch.non_tensor_batch.items():
        assert list(new.non_tensor_batch[key]) == list(value[idx.numpy()]), key
    assert new.non_tensor_batch["row_id"].tolist() == idx.tolist()
    # loss factors multiplied into the rollout-correction weights, broadcast over response tokens
    expected = batch.batch["rollout_is_weights"][idx] * res.factors[:, None]
    torch.testing.assert_close(new.batch["rollout_is_weights"], expected)
    assert new.meta_info["global_token_num"] == batch.batch["attention_mask"].sum(-1)[idx].tolist()
    assert batch.meta_info["global_token_num"] == batch.batch["attention_mask"].sum(-1).tolist()
    if method == "none":
        assert sorted(idx.tolist()) == list(range(len(batch))) and torch.all(res.weights == 1)
    if method == "p_star":
        seq_adv = batch.batch["advantages"].sum(-1)
        assert torch.all(seq_adv[idx] != 0), "p* never draws a zero-advantage row"


@pytest.mark.parametrize(
    "proxy,beta", [("advantage", None), ("length_aware", 1.0), ("length_aware", -0.3), ("auto", None)]
)
def test_p_star_weights_and_tokens_match_the_formula(proxy, beta):
    """p ∝ |A|·c^(β−½): the paper's β = 0, a configured β, and auto under verl's default token-mean (β = 1)."""
    batch = grpo_batch(num_prompts=6, seed=3)
    cfg = CostAwareConfig(method="p_star", proxy=proxy, proxy_beta=beta, merge_duplicates=False)
    res = _resample(batch, cfg, minibatch_size=8, dp_size=2)
    adv = batch.batch["advantages"].sum(-1) / batch.batch["response_mask"].sum(-1)
    cost = batch.batch["attention_mask"].sum(-1).double()
    b = {"advantage": 0.0, "auto": 1.0}.get(proxy, beta)
    p = adv.abs().double() * cost ** (b - 0.5)
    p = p / p.sum()
    n_supp = int((p > 0).sum())
    torch.testing.assert_close(res.weights.double(), 1.0 / (n_supp * p[res.indices]), rtol=1e-5, atol=0)
    assert res.counts.tokens == float(cost[res.indices].sum())
    assert res.counts.tokens_plain == float(cost.sum())
    assert res.counts.tokens_nonzero == float(cost[adv != 0].sum())
    assert res.counts.rows_unique == float(torch.unique(res.indices).numel())
    # no existing rollout_is_weights: created as the factor on every response position
    torch.testing.assert_close(res.batch.batch["rollout_is_weights"], res.factors[:, None].expand(-1, RESPONSE_LEN))
    # token-mean (the default): factor = w · (drawn response tokens of the step) / (pool's · m / N)
    resp = batch.batch["response_mask"].sum(-1).double()
    per_step = res.indices.view(2, -1, 4).transpose(0, 1).reshape(-1, 8)  # (k, m) rows of each step
    ratio = resp[per_step].sum(-1) / (resp.sum() * 8 / len(resp))
    want = res.weights.view(2, -1, 4) * ratio.float().view(1, -1, 1)
    torch.testing.assert_close(res.factors, want.reshape(-1), rtol=1e-6, atol=0)


def test_monte_carlo_weighted_draws_are_unbiased():
    """E over draws of (1/m) sum_j w_j x_{i_j} with raw weights equals (1/N) sum_i x_i (4 sigma)."""
    batch = grpo_batch(num_prompts=6, seed=5)
    adv = batch.batch["advantages"].sum(-1) / batch.batch["response_mask"].sum(-1)
    x = adv.double() * torch.linspace(0.5, 2.0, len(batch)).double()  # a per-row quantity, 0 where A=0
    est = []
    for seed in range(300):
        res = _resample(batch, CostAwareConfig(method="p_star", weights="raw"), seed=seed)
        est.append(float((res.weights.double() * x[res.indices]).mean()))
    est = torch.tensor(est)
    sem = float(est.std() / len(est) ** 0.5)
    assert abs(float(est.mean()) - float(x.mean())) < 4 * sem + 1e-12


@pytest.mark.parametrize("method", ["p_star", "nonzero"])
@pytest.mark.parametrize("merge", [False, True])
def test_layout_matches_verl_worker_split_and_balances_ranks(method, merge):
    """Every rank's contiguous chunk holds its S/dp rows of each of the 4 mini-batches in order; the fed
    rows of mini-batch j are the plan's; padding (weight 0) fills every mini-batch to S, a multiple of dp."""
    batch = grpo_batch(num_prompts=8, seed=1)  # 32 rows
    from costaware.integrations.verl import plan_resampling, sequence_advantages, sequence_costs

    adv = sequence_advantages(batch.batch["advantages"], batch.batch["response_mask"])
    cost = sequence_costs(batch.batch["attention_mask"])
    cfg = CostAwareConfig(method=method, merge_duplicates=merge)
    mbs, dp = 8, 4
    res = plan_resampling(adv, cost, cfg, minibatch_size=mbs, dp_size=dp, seed=2, step=0)
    from costaware.grpo.config import plan_seed
    from costaware.grpo.plan import plan_minibatches

    plan = plan_minibatches(
        adv.float(),
        cost,
        num_minibatches=4,
        minibatch_size=mbs,
        config=cfg.sampling_config(),
        generator=torch.Generator().manual_seed(plan_seed(2, 0)),  # the round's one seed derivation
    )
    size = res.minibatch_size
    assert size % dp == 0 and size == -(-max(mb.indices.numel() for mb in plan.minibatches) // dp) * dp
    assert size <= mbs and (size == mbs or merge or method == "nonzero")
    per_rank = size // dp
    layout = res.indices.view(dp, 4, per_rank)  # rank r's contiguous chunk, then consecutive mini-batches
    weight = res.weights.view(dp, 4, per_rank)
    for j, mb in enumerate(plan.minibatches):
        got, fed = layout[:, j, :].reshape(-1), weight[:, j, :].reshape(-1) > 0
        assert sorted(got[fed].tolist()) == sorted(mb.indices.tolist())
        assert set(got[~fed].tolist()) <= {int(torch.argmin(cost))}  # padding: the cheapest row
        rank_tokens = cost[layout[:, j, :]].sum(-1)
        assert int(rank_tokens.max() - rank_tokens.min()) <= int(cost[got].max())


def test_all_zero_advantages_skip_the_update():
    batch = grpo_batch(num_prompts=2)
    batch.batch["advantages"] = torch.zeros_like(batch.batch["advantages"])
    res = _resample(batch)
    assert res.skipped and res.batch is None and res.counts.skipped == 1.0 and res.counts.tokens == 0.0


def test_batch_not_divisible_by_minibatch_or_ranks_is_rejected():
    batch = grpo_batch(num_prompts=3)  # 12 rows
    with pytest.raises(ValueError, match="multiple of the mini-batch size"):
        _resample(batch, minibatch_size=8)
    with pytest.raises(ValueError, match="divisible by the data-parallel size 3"):
        _resample(batch, minibatch_size=4, dp_size=3)


def test_nan_advantages_rejected():
    batch = grpo_batch(num_prompts=2)
    batch.batch["advantages"][3, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        _resample(batch, minibatch_size=4)


# ---------------------------------------------------------------------- weights reach the policy loss


def _worker_minibatches(batch: DataProto, minibatch_size: int, dp_size: int):
    """What verl's workers run: pad->nested conversion, contiguous rank chunks, ordered mini-batches."""
    td = left_right_2_no_padding(batch.to_tensordict())
    chunks = tu.chunk_tensordict(td, dp_size)
    per_rank = minibatch_size // dp_size
    iters = [
        list(tu.make_iterator(c, mini_batch_size=per_rank, epochs=1, dataloader_kwargs={"shuffle": False}))
        for c in chunks
    ]
    return [[it[j] for it in iters] for j in range(len(iters[0]))]


def _actor_config(base_config, loss_mode: str, agg: str):
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    actor = OmegaConf.to_container(base_config.actor_rollout_ref.actor, resolve=False)
    actor["policy_loss"]["loss_mode"] = loss_mode
    actor["loss_agg_mode"] = agg
    actor["ppo_micro_batch_size_per_gpu"] = 1
    actor["use_dynamic_bsz"] = False
    actor["clip_ratio_low"], actor["clip_ratio_high"] = 0.2, 0.28
    cfg = OmegaConf.create(actor)
    return omega_conf_to_dataclass(cfg)


@pytest.mark.parametrize("loss_mode", ["vanilla", "cispo"])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_loss_equals_weighted_sum_of_per_row_losses(base_config, loss_mode, agg):
    from verl.workers.utils.losses import ppo_loss

    batch = grpo_batch(num_prompts=6, seed=11, with_is_weights=True)
    mbs, dp = 8, 2
    res = _resample(batch, CostAwareConfig(method="p_smooth", alpha=0.05), minibatch_size=mbs, dp_size=dp)
    g = torch.Generator().manual_seed(1)
    # the current policy's log-probs: a fixed function of the (original) row and token
    new_logp_rows = batch.batch["old_log_probs"] + 0.3 * torch.randn(len(batch), RESPONSE_LEN, generator=g)
    config = _actor_config(base_config, loss_mode, agg)
    policy_loss = get_policy_loss_fn(loss_mode)
    layout = res.indices.view(dp, -1)
    for j, ranks in enumerate(_worker_minibatches(res.batch, mbs, dp)):
        rows = torch.cat([layout[r, j * (mbs // dp) : (j + 1) * (mbs // dp)] for r in range(dp)])
        weights = torch.cat([res.factors.view(dp, -1)[r, j * (mbs // dp) : (j + 1) * (mbs // dp)] for r in range(dp)])
        mask = batch.batch["response_mask"][rows]
        num_tokens = int(mask.sum())
        total = 0.0
        for r, td in enumerate(ranks):
            rank_rows = layout[r, j * (mbs // dp) : (j + 1) * (mbs // dp)]
            # model output in verl's no-padding layout: log-prob of token t+1 sits at position t
            lengths = td["input_ids"].offsets().diff()
            values = torch.zeros(int(lengths.sum()))
            offs = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
            resp_lens = batch.batch["response_mask"][rank_rows].sum(-1)
            for k, row in enumerate(rank_rows.tolist()):  # test-side layout only
                end = int(offs[k + 1]) - 1
                values[end - int(resp_lens[k]) : end] = new_logp_rows[row, : int(resp_lens[k])]
            log_probs = torch.nested.nested_tensor_from_jagged(values, offsets=offs)
            tu.assign_non_tensor(td, dp_size=dp, batch_num_tokens=num_tokens, global_batch_size=mbs)
            loss, _ = ppo_loss(config, {"log_probs": log_probs}, td)
            total += float(loss) / dp  # DDP averages the ranks' gradients
        # independent per-row losses under the same global normalisation, no weights
        expected = 0.0
        for row, w in zip(rows.tolist(), weights.tolist(), strict=True):
            config.global_batch_info.update(dp_size=1, batch_num_tokens=num_tokens, global_batch_size=mbs)
            row_loss, _ = policy_loss(
                old_log_prob=batch.batch["old_log_probs"][row : row + 1],
                log_prob=new_logp_rows[row : row + 1],
                advantages=batch.batch["advantages"][row : row + 1],
                response_mask=batch.batch["response_mask"][row : row + 1].bool(),
                loss_agg_mode=agg,
                config=config,
                rollout_is_weights=batch.batch["rollout_is_weights"][row : row + 1],
            )
            expected += w * float(row_loss)
        assert total == pytest.approx(expected, rel=1e-5, abs=1e-7)
        assert abs(expected) > 1e-6  # the comparison is not 0 == 0


# -------------------------------------------------------------------- patched _update_actor on CPU


def test_patched_update_actor_v0_logic(base_config, tmp_path):
    """The v0 wrapper around a trainer whose worker group is replaced by a recorder of what it receives."""
    from costaware.integrations.verl import patch

    received = []

    class Trainer:  # the attributes RayPPOTrainer._update_actor and the wrapper read
        def __init__(self):
            from omegaconf import open_dict

            self.config = base_config.copy()
            self.config.trainer.default_local_dir = str(tmp_path)
            with open_dict(self.config):  # one fed row per draw: the sent batch has the stock's rows
                self.config.algorithm.cost_aware.merge_duplicates = False
            self.global_steps = 3
            self.actor_rollout_wg = None

        def _get_dp_size(self, worker_group, role):
            return 2

        def _update_actor(self, batch):
            received.append(batch)
            return DataProto.from_single_dict(data={}, meta_info={"metrics": {"actor/pg_loss": [0.1]}})

        def _save_checkpoint(self):
            os.makedirs(os.path.join(str(tmp_path), f"global_step_{self.global_steps}"), exist_ok=True)

        def _load_checkpoint(self):
            self.global_steps = 3

    patch.patch_v0(Trainer)
    patch.patch_v0(Trainer)  # idempotent
    trainer = Trainer()
    batch = grpo_batch(num_prompts=4)
    out = trainer._update_actor(batch)
    sent = received[-1]
    assert len(sent) == len(batch) and "rollout_is_weights" in sent.batch.keys()
    metrics = out.meta_info["metrics"]
    assert metrics["cost_aware/total/tokens"] == float(sent.batch["attention_mask"].sum())
    assert metrics["cost_aware/step/tokens"] == float(sent.batch["attention_mask"].sum())
    assert metrics["cost_aware/total/tokens_plain"] == float(batch.batch["attention_mask"].sum())
    assert metrics["actor/pg_loss"] == [0.1]
    # same step and seed -> same draws; counters accumulate
    out2 = Trainer._update_actor(trainer, batch)
    assert received[-1].non_tensor_batch["row_id"].tolist() == sent.non_tensor_batch["row_id"].tolist()
    assert out2.meta_info["metrics"]["cost_aware/total/tokens"] == 2 * metrics["cost_aware/total/tokens"]
    # counters survive save / resume
    trainer._save_checkpoint()
    resumed = Trainer()
    resumed._load_checkpoint()
    assert resumed._cost_aware_counters.tokens == 2 * metrics["cost_aware/total/tokens"]
    from costaware.grpo.accounting import STATE_FILE

    assert os.path.isfile(os.path.join(str(tmp_path), "global_step_3", STATE_FILE))
    # key absent -> the original runs untouched
    plain = Trainer()
    plain.config = verl_config("algorithm.adv_estimator=grpo")
    plain._update_actor(batch)
    assert received[-1] is batch


# ------------------------------------------------------------------------------- v1 (TransferQueue)


def test_duplicate_keys_and_nested_weights():
    keys = [f"k{i}" for i in range(6)]
    drawn = [4, 1, 4, 4, 0, 1]
    one = feed_plan(keys, drawn, dp=1, tag="s", spare=[])  # one rank: each row read once, nothing copied
    assert one.keys == ["k4", "k1", "k0"] and one.rows == [[0, 1, 0, 0, 2, 1]] and one.copies == []
    two = feed_plan(keys, drawn, dp=2, tag="s", spare=[5, 3, 2])
    # rank 0 draws 4, 1, 4 and rank 1 draws 4, 0, 1: rows 4 and 1 are read by both, rank 1 under copies
    assert two.keys == ["k4", "k1", "k5", "k4#s.1", "k0", "k1#s.1"]  # rank 0 padded with spare row 5
    assert two.rows == [[0, 1, 0], [0, 1, 2]] and two.copies == [(4, "k4#s.1"), (1, "k1#s.1")]
    assert two.sources == [4, 1, 5, 4, 0, 1] and len(set(two.keys)) == len(two.keys)  # unique per batch
    tight = feed_plan(keys[:3], [0, 0, 1, 2], dp=2, tag="s", spare=[0, 1, 2])  # no unread row left: a copy
    assert tight.keys == ["k0", "k0#s.pad0.0", "k1", "k2"] and tight.copies == [(0, "k0#s.pad0.0")]
    assert tight.rows == [[0, 0], [0, 1]]
    with pytest.raises(ValueError, match="split evenly over dp=4"):
        feed_plan(keys, drawn, dp=4, tag="s", spare=[])
    with pytest.raises(ValueError, match=r"drawn rows must lie in \[0, 6\)"):
        feed_plan(keys, [0, 6], dp=1, tag="s", spare=[])
    lengths = [3, 1, 4]
    mask = torch.nested.as_nested_tensor(
        [torch.tensor([1, 1, 0]), torch.tensor([1]), torch.ones(4, dtype=torch.long)], layout=torch.jagged
    )
    adv = torch.nested.as_nested_tensor(
        [torch.tensor([2.0, 2.0, 0.0]), torch.tensor([-1.0]), torch.zeros(4)], layout=torch.jagged
    )
    torch.testing.assert_close(nested_row_means(adv, mask), torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64))
    existing = torch.nested.as_nested_tensor([torch.full((n,), 0.5) for n in lengths], layout=torch.jagged)
    out = nested_scaled_weights(existing, mask, torch.tensor([2.0, 3.0, 4.0]))
    assert out.offsets().diff().tolist() == lengths
    torch.testing.assert_close(out.values(), torch.tensor([1.0] * 3 + [1.5] + [2.0] * 4))
    fresh = nested_scaled_weights(None, mask, torch.tensor([2.0, 3.0, 4.0]))
    torch.testing.assert_close(fresh.values(), torch.tensor([2.0] * 3 + [3.0] + [4.0] * 4))


def test_worker_selects_its_draws_and_sets_their_weights():
    """``fed_rows``: rank r's draws from the rows it read (a row drawn twice appears twice), every field of
    the row alongside (jagged, dense, per-row non-tensor), the batch's settings kept; rollout_is_weights =
    existing x factor and cost_aware_weights = factor on every response token; the plan itself is dropped."""
    from verl.utils import tensordict_utils as tu

    from costaware.integrations.verl.config import PLAN_KEY, WEIGHTS_KEY
    from costaware.integrations.verl.transfer import fed_rows

    lengths = [3, 1, 4]
    nested = lambda rows: torch.nested.as_nested_tensor(rows, layout=torch.jagged)  # noqa: E731
    td = tu.get_tensordict(
        {
            "response_mask": nested([torch.ones(n, dtype=torch.long) for n in lengths]),
            "rollout_is_weights": nested([torch.full((n,), 0.5 * (i + 1)) for i, n in enumerate(lengths)]),
            "input_ids": nested([torch.arange(n + 2) + 10 * i for i, n in enumerate(lengths)]),
            "row": torch.tensor([0, 1, 2]),
            "uid": ["a", "b", "c"],
        }
    )
    tu.assign_non_tensor_data(td, "temperature", 0.7)
    plan = {"rows": [[0, 1], [2, 0, 2]], "factors": [[9.0, 9.0], [2.0, 3.0, 0.0]]}
    tu.assign_non_tensor_data(td, PLAN_KEY, plan)
    out = fed_rows(td.clone(), rank=1)
    assert out.batch_size[0] == 3 and PLAN_KEY not in out.keys()
    assert out["row"].tolist() == [2, 0, 2] and tu.get(out, "uid") == ["c", "a", "c"]
    assert tu.get(out, "temperature") == 0.7
    third = list(range(20, 26))
    assert [t.tolist() for t in out["input_ids"].unbind()] == [third, [0, 1, 2, 3, 4], third]
    assert [t.tolist() for t in out["rollout_is_weights"].unbind()] == [[3.0] * 4, [1.5] * 3, [0.0] * 4]
    assert [t.tolist() for t in out[WEIGHTS_KEY].unbind()] == [[2.0] * 4, [3.0] * 3, [0.0] * 4]
    del td["rollout_is_weights"]
    fresh = fed_rows(td.clone(), rank=0)  # rows without weights of their own: the factor alone
    assert [t.tolist() for t in fresh["rollout_is_weights"].unbind()] == [[9.0] * 3, [9.0]]
    tu.pop(td, PLAN_KEY)
    assert fed_rows(td, rank=0) is td  # no plan: verl's own batch


# ------------------------------------------------------------------------------------ plugin loading


def test_entry_point_loads_plugin_in_fresh_process(tmp_path):
    """``import verl`` loads the plugin via the entry point; the hook patches a trainer module on import."""
    module_dir = tmp_path / "fakeroot"
    code = textwrap.dedent(
        """
        import sys, importlib
        import verl
        assert "costaware.integrations.verl" in sys.modules, "entry point not loaded by import verl"
        from costaware.integrations.verl import _hook
        assert any(type(f).__name__ == "_Finder" for f in sys.meta_path)
        assert "verl.trainer.ppo.ray_trainer" not in sys.modules  # nothing heavy imported
        # the hook on a real module: a stand-in trainer module registered under a target name
        _hook.TARGETS["ca_probe_trainer"] = _hook.TARGETS["verl.trainer.ppo.ray_trainer"]
        sys.path.insert(0, sys.argv[1])
        mod = importlib.import_module("ca_probe_trainer")
        assert _hook.is_patched("ca_probe_trainer"), "hook did not patch on import"
        assert getattr(mod.RayPPOTrainer._update_actor, _hook.PATCH_MARK, False)
        print("OK")
        """
    )
    module_dir.mkdir()
    (module_dir / "ca_probe_trainer.py").write_text(
        "class RayPPOTrainer:\n"
        "    def _update_actor(self, batch):\n        return batch\n"
        "    def _save_checkpoint(self):\n        pass\n"
        "    def _load_checkpoint(self):\n        pass\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("VERL_USE_EXTERNAL_PLUGINS", None)
    out = subprocess.run(
        [sys.executable, "-c", code, str(module_dir)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
    # switched off: the module still imports, no hook
    env["COSTAWARE_VERL_PLUGIN"] = "0"
    off = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, verl; print(any(type(f).__name__ == '_Finder' for f in sys.meta_path))",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert off.returncode == 0 and off.stdout.strip().endswith("False"), off.stderr[-3000:]


def test_external_modules_env_loads_plugin(tmp_path):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "VERL_USE_EXTERNAL_PLUGINS": "none",
        "VERL_USE_EXTERNAL_MODULES": "costaware.integrations.verl",
    }
    out = subprocess.run(
        [sys.executable, "-c", "import sys, verl; print('costaware.integrations.verl' in sys.modules)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("True"), out.stderr[-3000:]


def test_real_trainer_modules_patched_when_importable():
    """Where verl's trainer dependencies are installed (verl[vllm]/verl-core), the real classes are wrapped."""
    from costaware.integrations.verl import is_patched

    try:
        import verl.trainer.ppo.ray_trainer  # noqa: F401
    except ImportError as exc:  # this CPU env lacks verl-core extras (cachetools, uvicorn, ...)
        pytest.skip(f"verl trainer v0 not importable here: {exc}")
    assert is_patched("verl.trainer.ppo.ray_trainer")


def test_example_config_composes_and_validates():
    from hydra import compose, initialize_config_dir

    example_dir = os.path.join(os.path.dirname(__file__), "..", "examples", "verl")
    with initialize_config_dir(config_dir=os.path.abspath(example_dir), version_base=None):
        cfg = compose(config_name="cost_aware_grpo", overrides=["actor_rollout_ref.actor.policy_loss.loss_mode=cispo"])
    assert read_trainer_config(cfg) == CostAwareConfig(
        method="p_star",
        alpha=0.01,
        seed=0,
        proxy="length_aware",
        proxy_beta=1.0,  # token-mean: auto's prior
    )
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-Math-1.5B-Instruct"
    assert cfg.trainer.use_v1 is True  # verl's default trainer is v1; both are patched
