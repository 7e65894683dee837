"""Harness that drives the REAL patched ``_update_actor`` of verl's trainers v0 and v1 on CPU.

The Ray worker group is replaced by a stub that replays what verl's actor worker does with verl's own
functions: the contiguous data-parallel split, ``tu.make_iterator`` (mini-batches, shuffle off), the
global token count of ``forward_backward_batch``, ``prepare_micro_batches`` with dynamic batch size, and
``ppo_loss`` as the worker binds it (wrapped by the plugin). The policy is a bigram table, so gradients
are exact. Each mini-batch's gradient (averaged over ranks, as FSDP does) must equal
sum_i w_i grad(l_i), with l_i the row's own loss (policy gradient with its rollout-correction weight,
minus entropy, plus low_var_kl) under the mini-batch's normaliser, and w_i = 1/(n p_i) from the formula.
Rows have unequal prompt and response lengths. The fixtures live in ``verl_fixtures.py``, the stub
workers in ``verl_workers.py``; this module re-exports both and holds the drivers. Used by
``test_verl_update_actor.py``, ``test_verl_unbiased.py`` and ``test_verl_logprobs.py``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")  # skips the test module when verl is missing

# verl_fixtures first: it installs the plugin's hook before verl's trainer and loss modules load
from verl_fixtures import (  # noqa: E402,F401  (re-exported: the tests import them from here)
    AGG_MODES,
    ALPHA,
    DP,
    GROUP,
    MAX_TOKENS,
    MINI_PROMPTS,
    NUM_PROMPTS,
    PROMPT_LEN,
    RESPONSE_LEN,
    SEED,
    STEP,
    VOCAB,
    Bigram,
    actor_config,
    padded_batch,
    ray_trainer,
    reference_row_terms,
    to_rows,
    trainer_overrides,
    verl,
)
from verl_workers import MemoryKV, StubWorkerGroup, StubWorkerGroupV1  # noqa: E402,F401

# isort: split
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty  # noqa: E402
from verl.workers.utils import losses as verl_losses  # noqa: E402,F401  (the tests' loss)


def run_v0(agg: str, data: dict, loss_fn, *extra: str):
    full, config = actor_config(agg, *extra)
    model = Bigram()
    wg = StubWorkerGroup(model, config, loss_fn)
    trainer = object.__new__(ray_trainer.RayPPOTrainer)
    trainer.config, trainer.global_steps, trainer.actor_rollout_wg = full, STEP, wg
    tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
    non_tensors = {k: v for k, v in data.items() if k not in tensors}  # e.g. uid (numpy, object)
    batch = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"global_token_num": [0]})
    out = trainer._update_actor(batch)
    return wg, config, model, out.meta_info["metrics"], trainer


def run_v1(agg: str, data: dict, loss_fn, monkeypatch, *extra: str):
    """Trainer v1 on an in-memory TransferQueue; without ``rollout_is_weights`` when the data has none."""
    tq = pytest.importorskip("transfer_queue", reason="TransferQueue (verl-core extra) not installed")
    trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
    from tensordict import TensorDict
    from transfer_queue import KVBatchMeta

    store = MemoryKV()
    for name in ("kv_batch_put", "kv_batch_get", "kv_clear"):
        monkeypatch.setattr(tq, name, getattr(store, name))
    rows = to_rows(data)
    n = len(rows["input_ids"])
    keys = [f"k{i}" for i in range(n)]
    fields = {k: torch.nested.as_nested_tensor(v, layout=torch.jagged) for k, v in rows.items()}
    store.kv_batch_put(keys, "train", TensorDict(fields, batch_size=n))
    seq_len = data["attention_mask"].sum(-1).tolist()
    tags = [{"seq_len": int(s)} for s in seq_len]
    meta = KVBatchMeta(keys=keys, tags=tags, partition_id="train", fields=sorted(fields), extra_info={})
    full, config = actor_config(agg, *extra)
    model = Bigram()
    wg = StubWorkerGroupV1(model, config, loss_fn, store)

    class Trainer(trainer_base.PPOTrainer):  # the abstract hooks only; _update_actor is verl's, patched
        def on_sample_end(self, *args, **kwargs):
            pass

        def on_step_end(self, *args, **kwargs):
            pass

    trainer = object.__new__(Trainer)
    trainer.config, trainer.global_steps, trainer.actor_rollout_wg = full, STEP, wg
    trainer.local_trigger_step = 0
    trainer.total_training_steps = 100
    wg.trainer = trainer
    metrics: dict = {}
    returned = trainer._update_actor(meta, metrics)
    return wg, config, model, metrics, (store, returned, meta, rows)


def row_loss(model: Bigram, config, data: dict, row: int, info: dict) -> torch.Tensor:
    """Row ``row``'s own loss (policy gradient with its rollout-correction weight, minus entropy, plus
    low_var_kl) under the normaliser ``info`` (dp_size, batch_num_tokens, global_batch_size), independently
    of verl's batching."""
    policy_loss = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))
    info = dict(info, loss_scale_factor=config.loss_scale_factor)
    config.global_batch_info.update(info)
    logp, ent = reference_row_terms(model, data, row)
    m = data["response_mask"][row : row + 1].bool()
    pg, _ = policy_loss(
        old_log_prob=data["old_log_probs"][row : row + 1],
        log_prob=logp[None],
        advantages=data["advantages"][row : row + 1],
        response_mask=m,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
        rollout_is_weights=data["rollout_is_weights"][row : row + 1] if "rollout_is_weights" in data else None,
    )
    kl = kl_penalty(logprob=logp[None], ref_logprob=data["ref_log_prob"][row : row + 1], kl_penalty="low_var_kl")
    ent_loss, kl_loss = (
        agg_loss(loss_mat=mat, loss_mask=m, loss_agg_mode=config.loss_agg_mode, **info) for mat in (ent[None], kl)
    )
    return pg - config.entropy_coeff * ent_loss + (config.kl_loss_coef * kl_loss if config.use_kl_loss else 0.0)


def expected_grads(wg, config, model: Bigram, data: dict) -> list[torch.Tensor]:
    """sum_i w_i grad(pg_i - c ent_i + beta kl_i) per mini-batch, w_i = 1/(n p_i), p from the formula
    p ∝ |A| c^(beta_proxy - 1/2) smoothed (the proxy verl's default proxy=auto gives the loss mode)."""
    adv = data["advantages"].sum(-1) / data["response_mask"].sum(-1)
    cost = data["attention_mask"].sum(-1).double()
    # proxy=auto: the token-sum modes sample with the length-aware prior beta = 1, p ∝ |A| c^(1/2)
    beta = 0.0 if config.loss_agg_mode == "seq-mean-token-mean" else 1.0
    p_star = adv.abs().double() * cost ** (beta - 0.5)
    p = (1 - ALPHA) * p_star / p_star.sum() + ALPHA / len(adv)
    w = 1.0 / (len(adv) * p)  # full support: centred = raw
    out = []
    resp = data["response_mask"].sum(-1).double()
    for rows in wg.row_ids:
        mask = data["response_mask"][rows].bool()
        # token-mean: the step is rescaled from its drawn tokens to the pool's tokens × m / N
        scale = float(mask.sum() / (resp.sum() * len(rows) / len(resp)))
        scale = scale if config.loss_agg_mode == "token-mean" else 1.0
        info = dict(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=len(rows))
        model.zero_grad()
        total = 0.0
        for row in rows.tolist():  # each row's own loss, independently of verl's batching
            total = total + float(w[row]) * scale * row_loss(model, config, data, row, info)
        total.backward()
        out.append(model.table.grad.clone())
    return out


def target_grads(
    config, model: Bigram, data: dict, steps: list[dict[int, float]], stock_rows: int
) -> list[torch.Tensor]:
    """The plan's update of each step, sum_i W_i grad(l_i) under STOCK's normaliser of a mini-batch of
    ``stock_rows`` rows (seq-mean: / stock_rows; token-mean: / (pool tokens · stock_rows / N)), whatever
    rows verl was fed: ``steps[j]`` maps each row of step j to its total weight W (draw count × weight)."""
    resp = data["response_mask"].sum(-1).double()
    tokens = float(resp.sum()) * stock_rows / len(resp)
    info = dict(dp_size=1, batch_num_tokens=tokens, global_batch_size=stock_rows)
    out = []
    for step in steps:
        model.zero_grad()
        total = sum(weight * row_loss(model, config, data, row, info) for row, weight in step.items())
        total.backward()
        out.append(model.table.grad.clone())
    return out


def assert_grads_match(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want) == NUM_PROMPTS // MINI_PROMPTS
    for g, e in zip(got, want, strict=True):
        assert float(e.norm()) > 1e-3  # not 0 == 0
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-8)  # float32 weights
