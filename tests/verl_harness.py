"""Harness that drives the REAL patched ``_update_actor`` of verl's trainers v0 and v1 on CPU.

The Ray worker group is replaced by a stub that replays what verl's actor worker does with verl's own
functions: the contiguous data-parallel split, ``tu.make_iterator`` (mini-batches, shuffle off), the
global token count of ``forward_backward_batch``, ``prepare_micro_batches`` with dynamic batch size, and
``ppo_loss`` as the worker binds it (wrapped by the plugin). The policy is a bigram table, so gradients
are exact. Each mini-batch's gradient (averaged over ranks, as FSDP does) must equal
sum_i w_i grad(l_i), with l_i the row's own loss (policy gradient with its rollout-correction weight,
minus entropy, plus low_var_kl) under the mini-batch's normaliser, and w_i = 1/(n p_i) from the formula.
Rows have unequal prompt and response lengths. Used by ``test_verl_update_actor.py``,
``test_verl_unbiased.py`` and ``test_verl_logprobs.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")

import costaware.integrations.verl  # noqa: E402,F401  (installs the hook; patches what is imported)

ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl trainer v0 deps missing")

from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import (  # noqa: E402
    agg_loss,
    compute_grpo_outcome_advantage,
    get_policy_loss_fn,
    kl_penalty,
)
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.engine.utils import prepare_micro_batches  # noqa: E402
from verl.workers.utils import losses as verl_losses  # noqa: E402,F401  (the tests' loss)

PROMPT_LEN, RESPONSE_LEN, GROUP, VOCAB = 5, 9, 4, 23
NUM_PROMPTS, MINI_PROMPTS, DP = 4, 2, 2  # 16 rows, mini-batches of 8 rows, 2 ranks
MAX_TOKENS = 2 * (PROMPT_LEN + RESPONSE_LEN)  # dynamic batch size: several micro-batches per rank
ALPHA, SEED, STEP = 0.3, 5, 2
AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


# ------------------------------------------------------------------------------------------ fixtures


def padded_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Left-padded prompts, right-padded responses of unequal lengths, GRPO advantages, KL reference."""
    g = torch.Generator().manual_seed(seed)
    n = NUM_PROMPTS * GROUP
    prompt_lens = torch.randint(1, PROMPT_LEN + 1, (n,), generator=g)
    response_lens = torch.randint(1, RESPONSE_LEN + 1, (n,), generator=g)
    response_lens[0], response_lens[1] = 1, RESPONSE_LEN  # the extremes, always present
    prompt_mask = (torch.arange(PROMPT_LEN)[None] >= PROMPT_LEN - prompt_lens[:, None]).long()
    response_mask = (torch.arange(RESPONSE_LEN)[None] < response_lens[:, None]).long()
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    prompts = torch.randint(1, VOCAB, (n, PROMPT_LEN), generator=g) * prompt_mask
    responses = torch.randint(1, VOCAB, (n, RESPONSE_LEN), generator=g) * response_mask
    rewards = torch.randint(0, 2, (n,), generator=g).float()
    rewards[:GROUP] = 1.0  # a zero-advantage group: its rows still carry KL and entropy gradients
    rewards[GROUP : 2 * GROUP] = torch.tensor([1.0, 0.0, 0.0, 1.0])
    scores = torch.zeros(n, RESPONSE_LEN)
    scores[torch.arange(n), response_lens - 1] = rewards
    uid = np.repeat(np.array([f"p{i}" for i in range(NUM_PROMPTS)], dtype=object), GROUP)
    advantages, _ = compute_grpo_outcome_advantage(scores, response_mask.float(), uid)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "advantages": advantages,
        "old_log_probs": -0.5 - torch.rand(n, RESPONSE_LEN, generator=g),
        "ref_log_prob": -0.5 - torch.rand(n, RESPONSE_LEN, generator=g),
        "rollout_is_weights": 0.5 + torch.rand(n, RESPONSE_LEN, generator=g),
        "row_id": torch.arange(n),
    }


class Bigram(torch.nn.Module):
    """log pi(x_{t+1} | x_t) = log_softmax(E[x_t])[x_{t+1}]: a policy with exact, cheap gradients."""

    def __init__(self, seed: int = 3) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(0.5 * torch.randn(VOCAB, VOCAB, generator=g, dtype=torch.float64))

    def token_stats(self, tokens: torch.Tensor, nxt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = torch.log_softmax(self.table[tokens], -1)
        return logp.gather(-1, nxt[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1)

    def forward(self, micro: object) -> dict[str, torch.Tensor]:
        """verl's model output on the no-padding layout: position t holds the log-prob of token t+1."""
        ids = micro["input_ids"]
        values, offsets = ids.values(), ids.offsets()
        logp, ent = self.token_stats(values, torch.roll(values, -1))
        nested = lambda v: torch.nested.nested_tensor_from_jagged(v, offsets=offsets)  # noqa: E731
        return {"log_probs": nested(logp), "entropy": nested(ent)}


def reference_row_terms(model: Bigram, data: dict, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(response log-probs, entropies) of one padded row, computed on the padded layout (T,)."""
    tokens = data["input_ids"][row]
    logp, ent = model.token_stats(tokens[:-1], tokens[1:])  # position t predicts t+1
    resp = slice(PROMPT_LEN - 1, PROMPT_LEN - 1 + RESPONSE_LEN)
    return logp[resp], ent[resp]


def actor_config(agg: str, *extra: str):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    config_dir = f"{verl.__path__[0]}/trainer/config"
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        full = compose(config_name="ppo_trainer", overrides=trainer_overrides(agg, *extra))
    actor = OmegaConf.to_container(full.actor_rollout_ref.actor, resolve=False)
    return full, omega_conf_to_dataclass(OmegaConf.create(actor))


def trainer_overrides(agg: str, *extra: str) -> list[str]:
    return [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.shuffle=false",
        f"actor_rollout_ref.rollout.n={GROUP}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={MINI_PROMPTS}",
        f"actor_rollout_ref.actor.loss_agg_mode={agg}",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef=1.0",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        # a fixed horizon: seq-mean-token-sum-norm otherwise divides by each micro-batch's padded width
        f"+actor_rollout_ref.actor.loss_scale_factor={RESPONSE_LEN}",
        "+algorithm.cost_aware.method=p_smooth",
        f"+algorithm.cost_aware.alpha={ALPHA}",
        f"+algorithm.cost_aware.seed={SEED}",
        *extra,
    ]


# --------------------------------------------------------------------------------- stub worker group


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.values() if t.is_nested else t


class StubWorkerGroup:
    """Replays verl's actor worker (``train_mini_batch`` + FSDP ``forward_backward_batch``) on CPU."""

    def __init__(self, model: Bigram, config, loss_fn, dp: int = DP) -> None:
        self.model, self.config, self.loss_fn, self.dp = model, config, loss_fn, dp
        self.logprob_rows: list[list[torch.Tensor]] = []  # per log-prob pass: the row ids of each rank
        self.grads: list[torch.Tensor] = []  # one per mini-batch (optimizer step)
        self.row_ids: list[torch.Tensor] = []  # rows of each mini-batch, rank-major
        self.lr_steps = 0
        self._dispatch_info: dict = {}

    def _query_dispatch_info(self, role: str) -> list[int]:
        return list(range(self.dp))  # one worker per data-parallel rank

    def update_actor(self, td):
        mbs = tu.pop(td, key="mini_batch_size")
        epochs, seed = tu.pop(td, key="epochs", default=1), tu.pop(td, key="seed", default=42)
        kwargs = tu.pop(td, key="dataloader_kwargs", default={})
        chunks = tu.chunk_tensordict(td, self.dp)  # the dispatch: contiguous chunk per rank
        iters = [
            list(
                tu.make_iterator(
                    c, mini_batch_size=mbs // self.dp, epochs=epochs, seed=seed + r, dataloader_kwargs=kwargs
                )
            )
            for r, c in enumerate(chunks)
        ]
        for j in range(len(iters[0])):
            self.model.zero_grad()
            ranks = [it[j] for it in iters]
            num_tokens = sum(int(_flat(mb["loss_mask"]).sum()) for mb in ranks)  # all_reduce(SUM)
            for mb in ranks:
                tu.assign_non_tensor(
                    mb,
                    batch_num_tokens=num_tokens,
                    dp_size=self.dp,
                    use_dynamic_bsz=True,
                    max_token_len_per_gpu=MAX_TOKENS,
                )
                micro_batches, _ = prepare_micro_batches(mb, dp_group=None, same_micro_num_in_dp=True)
                assert sum(len(m) for m in micro_batches) == len(mb)
                for micro in micro_batches:
                    loss, _ = self.loss_fn(self.config, self.model(micro), micro)
                    loss.backward()
            self.grads.append(self.model.table.grad.clone() / self.dp)  # FSDP averages over ranks
            self.row_ids.append(torch.cat([mb["row_id"] for mb in ranks]))
            self.lr_steps += int(j == len(iters[0]) - 1)  # update_lr_scheduler on the last mini-batch
        metrics = {"mfu": [0.0], "pg_loss": [0.0]}
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})


    def compute_log_prob(self, td):
        """verl's ``compute_log_prob`` / ``compute_ref_log_prob``: the contiguous split per rank (which
        needs equal row counts), dynamic-batch-size micro-batches, no-grad forward; rows in input order."""
        chunks = tu.chunk_tensordict(td, self.dp)
        self.logprob_rows.append([c["row_id"].clone() for c in chunks])
        for chunk in chunks:
            tu.assign_non_tensor(chunk, use_dynamic_bsz=True, max_token_len_per_gpu=MAX_TOKENS)
            micro_batches, _ = prepare_micro_batches(chunk, dp_group=None, same_micro_num_in_dp=True)
            assert sum(len(m) for m in micro_batches) == len(chunk)
        with torch.no_grad():
            out = self.model(td)  # per token, so the values do not depend on the micro-batching
        metrics = {"mfu": 0.0}
        return tu.get_tensordict(tensor_dict=out, non_tensor_dict={"metrics": metrics})

    compute_ref_log_prob = compute_log_prob


class StubWorkerGroupV1(StubWorkerGroup):
    """v1: the worker reads the rows from TransferQueue by key (``_async_meta_to_realdata``)."""

    def __init__(self, model, config, loss_fn, store) -> None:
        super().__init__(model, config, loss_fn)
        self.store = store

    def update_actor(self, meta):
        td = self.store.kv_batch_get(
            keys=meta.keys, partition_id=meta.partition_id, select_fields=meta.fields
        )
        td["row_id"] = torch.tensor([int(k.split("#")[0][1:]) for k in meta.keys])
        tu.assign_non_tensor(td, **meta.extra_info)
        out = super().update_actor(td)
        return {"metrics": tu.get(out, "metrics")}

    def compute_log_prob(self, meta):
        """v1's pass: rows read by key, split contiguously per rank, log-probs written back by key."""
        from tensordict import TensorDict

        assert len(meta.keys) % self.dp == 0, "the contiguous split needs equal row counts per rank"
        ids = torch.tensor([int(k.split("#")[0][1:]) for k in meta.keys])
        self.logprob_rows.append(list(ids.chunk(self.dp)))
        td = self.store.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["input_ids"])
        with torch.no_grad():
            out = self.model(td)
        self.store.kv_batch_put(meta.keys, meta.partition_id, TensorDict(out, batch_size=len(meta.keys)))
        return meta

    compute_ref_log_prob = compute_log_prob


class MemoryKV:
    """In-memory stand-in for TransferQueue's kv API (a store of per-row jagged tensors)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, torch.Tensor]] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        from transfer_queue import KVBatchMeta

        for name in fields.keys() if fields is not None else []:
            for key, value in zip(keys, fields[name].unbind(), strict=True):
                self.rows.setdefault((partition_id, key), {})[name] = value.clone()
        self.tags = getattr(self, "tags", {})
        for key, tag in zip(keys, tags or [None] * len(keys), strict=True):
            if tag is not None:
                self.tags[(partition_id, key)] = tag
        names = sorted(set().union(*(self.rows[(partition_id, k)] for k in keys)))
        return KVBatchMeta(keys=list(keys), tags=[self.tags.get((partition_id, k), {}) for k in keys],
                           partition_id=partition_id, fields=names)  # fmt: skip

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from tensordict import TensorDict

        rows = [self.rows[(partition_id, k)] for k in keys]
        names = select_fields if select_fields is not None else sorted(rows[0])
        names = [n for n in names if any(n in r for r in rows)]  # TransferQueue drops a field no row holds
        if any(n not in r for n in names for r in rows):
            raise ValueError("Some fields are not ready in all the requested keys!")
        nested = {n: torch.nested.as_nested_tensor([r[n] for r in rows], layout=torch.jagged) for n in names}
        return TensorDict(nested, batch_size=len(keys))

    def kv_clear(self, keys, partition_id):
        for k in keys:
            del self.rows[(partition_id, k)]


# ------------------------------------------------------------------------------------------- drivers


def run_v0(agg: str, data: dict, loss_fn, *extra: str):
    full, config = actor_config(agg, *extra)
    model = Bigram()
    wg = StubWorkerGroup(model, config, loss_fn)
    trainer = object.__new__(ray_trainer.RayPPOTrainer)
    trainer.config, trainer.global_steps, trainer.actor_rollout_wg = full, STEP, wg
    batch = DataProto.from_dict(tensors=dict(data), meta_info={"global_token_num": [0]})
    out = trainer._update_actor(batch)
    return wg, config, model, out.meta_info["metrics"], trainer


def to_rows(data: dict) -> dict[str, list[torch.Tensor]]:
    """The no-padding per-row layout trainer v1 keeps in TransferQueue."""
    n = data["input_ids"].shape[0]
    att, resp = data["attention_mask"].bool(), data["response_mask"].bool()
    prompt_att = att[:, :PROMPT_LEN]
    rows: dict[str, list[torch.Tensor]] = {
        k: [] for k in ("input_ids", "prompts", "responses", "position_ids")
    }
    for name in ("response_mask", "advantages", "old_log_probs", "ref_log_prob", "rollout_is_weights"):
        if name in data:
            rows[name] = [data[name][i][resp[i]] for i in range(n)]
    for i in range(n):  # fixture construction only
        rows["input_ids"].append(data["input_ids"][i][att[i]])
        rows["prompts"].append(data["prompts"][i][prompt_att[i]])
        rows["responses"].append(data["responses"][i][resp[i]])
        rows["position_ids"].append(data["position_ids"][i][att[i]])
    rows["loss_mask"] = rows["response_mask"]
    return rows


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
    policy_loss = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))
    out = []
    resp = data["response_mask"].sum(-1).double()
    for rows in wg.row_ids:
        mask = data["response_mask"][rows].bool()
        # token-mean: the step is rescaled from its drawn tokens to the pool's tokens × m / N
        scale = float(mask.sum() / (resp.sum() * len(rows) / len(resp)))
        scale = scale if config.loss_agg_mode == "token-mean" else 1.0
        info = dict(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=len(rows))
        info["loss_scale_factor"] = config.loss_scale_factor
        config.global_batch_info.update(info)
        model.zero_grad()
        total = 0.0
        for row in rows.tolist():  # each row's own loss, independently of verl's batching
            logp, ent = reference_row_terms(model, data, row)
            m = data["response_mask"][row : row + 1].bool()
            pg, _ = policy_loss(
                old_log_prob=data["old_log_probs"][row : row + 1],
                log_prob=logp[None],
                advantages=data["advantages"][row : row + 1],
                response_mask=m,
                loss_agg_mode=config.loss_agg_mode,
                config=config,
                rollout_is_weights=data["rollout_is_weights"][row : row + 1]
                if "rollout_is_weights" in data
                else None,
            )
            kl = kl_penalty(
                logprob=logp[None], ref_logprob=data["ref_log_prob"][row : row + 1], kl_penalty="low_var_kl"
            )
            ent_loss, kl_loss = (
                agg_loss(loss_mat=mat, loss_mask=m, loss_agg_mode=config.loss_agg_mode, **info)
                for mat in (ent[None], kl)
            )
            row_loss = pg - config.entropy_coeff * ent_loss + config.kl_loss_coef * kl_loss
            total = total + float(w[row]) * scale * row_loss
        total.backward()
        out.append(model.table.grad.clone())
    return out


def assert_grads_match(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want) == NUM_PROMPTS // MINI_PROMPTS
    for g, e in zip(got, want, strict=True):
        assert float(e.norm()) > 1e-3  # not 0 == 0
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-8)  # float32 weights
