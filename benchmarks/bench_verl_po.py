"""verl's whole policy-optimisation (PO) phase, stock against the plugin, in one process on CPU.

    python benchmarks/bench_verl_po.py [--pools 4] [--repeats 3] [--threads 1] [--profile default]
                                       [--constant-groups 0.3]

The PO phase of one scored batch, as verl's trainer v0 runs it: ``_compute_old_log_prob`` (no-grad
forward over the batch, for the clipped ratio), ``_compute_ref_log_prob`` (the reference model's, for
the KL term; only with KL on), then ``_update_actor`` (mini-batches of forward, backward and an AdamW
step). These are the REAL trainer methods of ``RayPPOTrainer`` (patched by the plugin when
``algorithm.cost_aware`` is set); the Ray worker group is replaced by one in-process worker that does what
verl's actor worker does with verl's own functions (``tu.make_iterator``, ``prepare_micro_batches`` with
dynamic batch size, ``ppo_loss``) on the demo policy (``policy.build_policy``, a tiny Qwen2 at the
profile's size). Pools are ``bench_po_time``'s (the profile's task family, group advantages, a
``--constant-groups`` share of zero-advantage groups), written as verl's padded batch.

Arms, each on identical pools, interleaved (stock, then every arm, per pool) with medians over
pools x repeats, in one process:
* KL off: stock verl, ``none``, ``nonzero``, ``p_star`` (duplicates merged, the default), ``pods``,
  ``cost_pods`` (passes: old log-probs only);
* KL on (low_var_kl 0.01): stock, p_smooth with alpha 0.2 (old and reference passes).
Per arm: the median seconds of the PO phase; the tokens computed (prompt + response tokens of every row
each pass and the update ran, padding rows included), split into passes and update; ``trl``, the tokens
TRL's adapter feeds on the same plan in one process (the core's ``tokens``, no padding) over stock's;
and ``(time saved / stock time) / (tokens saved / stock tokens)``: 1.0 means the token saving is a time
saving one for one.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_po_time import add_pool_arguments, check_pool_arguments, make_pool  # noqa: E402

import costaware.integrations.verl  # noqa: E402,F401  (installs the hook before verl's trainer is imported)
from costaware.experiments import policy  # noqa: E402
from costaware.experiments.reproduce import PROFILES  # noqa: E402
from costaware.experiments.tasks import get_task  # noqa: E402

MAX_TOKENS = 4096  # dynamic batch size: tokens per micro-batch


def _nested_outputs(model, micro) -> dict[str, torch.Tensor]:
    """verl's model output on the no-padding layout: position t holds the log-prob of token t + 1."""
    ids = micro["input_ids"]
    offsets = ids.offsets()
    lengths = offsets.diff().tolist()
    padded = ids.to_padded_tensor(0)
    mask = (torch.arange(padded.shape[1])[None] < torch.tensor(lengths)[:, None]).long()
    logits = model(input_ids=padded, attention_mask=mask).logits.float()
    logp_all = torch.log_softmax(logits, -1)
    nxt = torch.roll(padded, -1, 1)
    logp = logp_all.gather(-1, nxt[..., None]).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    flat = lambda t: torch.cat([t[i, :n] for i, n in enumerate(lengths)])  # noqa: E731
    nested = lambda t: torch.nested.nested_tensor_from_jagged(flat(t), offsets=offsets)  # noqa: E731
    return {"log_probs": nested(logp), "entropy": nested(ent)}


class Worker:
    """One data-parallel rank doing what verl's actor (or reference) worker does, on the demo policy."""

    def __init__(self, model, config, opt=None, device: str = "cpu") -> None:
        from verl.workers.utils import losses

        self.model, self.config, self.opt, self.loss_fn = model, config, opt, losses.ppo_loss
        self.device = device  # the trainer's batch stays on CPU; a worker moves its rows, as verl's do
        self._dispatch_info = {"actor": [0]}

    def _query_dispatch_info(self, role):
        return [0]

    def _micro_batches(self, td):
        from verl.utils import tensordict_utils as tu
        from verl.workers.engine.utils import prepare_micro_batches

        tu.assign_non_tensor(td, use_dynamic_bsz=True, max_token_len_per_gpu=MAX_TOKENS)
        return prepare_micro_batches(td, dp_group=None, same_micro_num_in_dp=True)

    def compute_log_prob(self, td):
        from verl.utils import tensordict_utils as tu

        td = td.to(self.device)
        micro_batches, order = self._micro_batches(td)
        with torch.no_grad():
            outs = [_nested_outputs(self.model, m) for m in micro_batches]
        index = [i for part in order for i in part]  # rows in micro-batch order -> input order
        out = {}
        for key in ("log_probs", "entropy"):
            rows = [r for o in outs for r in o[key].unbind()]
            rows = [rows[index.index(i)] for i in range(len(td))]
            out[key] = torch.nested.as_nested_tensor([r.cpu() for r in rows], layout=torch.jagged)
        return tu.get_tensordict(tensor_dict=out, non_tensor_dict={"metrics": {"mfu": 0.0}})

    compute_ref_log_prob = compute_log_prob

    def update_actor(self, td):
        from verl.utils import tensordict_utils as tu

        mbs = tu.pop(td, key="mini_batch_size")
        epochs, seed = tu.pop(td, key="epochs", default=1), tu.pop(td, key="seed", default=42)
        kwargs = tu.pop(td, key="dataloader_kwargs", default={})
        td = td.to(self.device)
        for mb in tu.make_iterator(td, mini_batch_size=mbs, epochs=epochs, seed=seed, dataloader_kwargs=kwargs):
            mask = mb["loss_mask"]
            tokens = int((mask.values() if mask.is_nested else mask).sum())
            tu.assign_non_tensor(mb, batch_num_tokens=tokens, dp_size=1)
            self.opt.zero_grad()
            micro_batches, _ = self._micro_batches(mb)
            for micro in micro_batches:
                loss, _ = self.loss_fn(self.config, _nested_outputs(self.model, micro), micro)
                loss.backward()
            self.opt.step()
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"mfu": [0.0], "pg_loss": [0.0]}})


def to_dataproto(pool, group: int):
    """A scored pool as verl's padded batch: left-padded prompts, right-padded responses, GRPO advantages."""
    from verl import DataProto

    attention = torch.cat([pool.prompt_mask, pool.completion_mask], 1)
    data = {
        "prompts": pool.prompt_ids,
        "responses": pool.completion_ids,
        "input_ids": torch.cat([pool.prompt_ids, pool.completion_ids], 1),
        "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
        "response_mask": pool.completion_mask,
        "advantages": pool.advantages[:, None] * pool.completion_mask,
        # PODS reads rewards: a group's advantages are an affine map of its rewards (group_advantages), and
        # PODS' selection and recomputed advantages are invariant to one, so A stands in for the reward
        "token_level_rewards": pool.advantages[:, None] * pool.completion_mask,
    }
    uid = np.repeat(np.arange(len(pool.advantages) // group), group).astype(object)
    return DataProto.from_dict(
        tensors=data, non_tensors={"uid": uid}, meta_info={"global_token_num": attention.sum(-1).tolist()}
    )


def build_trainer(model, ref, prof, kl: bool, cost_aware: list[str], device: str = "cpu"):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.config import omega_conf_to_dataclass

    overrides = [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.shuffle=false",
        f"actor_rollout_ref.rollout.n={prof.generations}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prof.prompts_per_round // prof.steps_per_generation}",
        f"actor_rollout_ref.actor.use_kl_loss={str(kl).lower()}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef=0.01",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        *cost_aware,
    ]
    import verl

    with initialize_config_dir(config_dir=f"{verl.__path__[0]}/trainer/config", version_base=None):
        full = compose(config_name="ppo_trainer", overrides=overrides)
    actor = omega_conf_to_dataclass(
        OmegaConf.create(OmegaConf.to_container(full.actor_rollout_ref.actor, resolve=False))
    )
    opt = torch.optim.AdamW(model.parameters(), lr=prof.learning_rate)
    trainer = object.__new__(RayPPOTrainer)
    trainer.config, trainer.global_steps = full, 1
    trainer.actor_rollout_wg = Worker(model, actor, opt, device)
    trainer.ref_in_actor, trainer.ref_policy_wg = False, Worker(ref, actor, None, device)
    return trainer


def po_phase(trainer, batch, kl: bool, step: int, sync=lambda: None) -> dict[str, float]:
    """Old pass, reference pass (KL on), update: fit's order. Returns seconds and tokens computed."""
    trainer.global_steps = step
    batch = copy.deepcopy(batch)  # DataProto.union writes into the batch: each phase gets a fresh one
    costs = batch.batch["attention_mask"].sum(-1)
    sync()
    start = time.perf_counter()
    old, _ = trainer._compute_old_log_prob(batch)
    old.batch.pop("entropys")
    batch = batch.union(old)
    if kl:
        batch = batch.union(trainer._compute_ref_log_prob(batch))
    out = trainer._update_actor(batch)
    sync()
    seconds = time.perf_counter() - start
    metrics = out.meta_info["metrics"]
    passes = 1 + int(kl)
    if "cost_aware/step/tokens" in metrics:  # the update feeds the plan's rows and its padding rows
        update = metrics["cost_aware/step/tokens"] + metrics["cost_aware/step/tokens_padding"]
        trl = metrics["cost_aware/step/tokens"]  # TRL on one process feeds the plan's rows, no padding
        pass_tokens = metrics.get("cost_aware/step/logprob_tokens", float(costs.sum())) * passes
    else:
        update = trl = float(costs.sum())
        pass_tokens = float(costs.sum()) * passes
    return {"seconds": seconds, "passes": pass_tokens, "update": update, "trl": trl}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pool_arguments(ap, repeats=3)
    args = ap.parse_args()  # fmt: skip
    check_pool_arguments(args)
    torch.set_num_threads(args.threads)
    prof = PROFILES[args.profile]
    tok, base = policy.build_policy(get_task(prof.task).alphabet, hidden_size=prof.hidden_size,
                                    num_layers=prof.num_layers, seed=0)  # fmt: skip
    base.train()
    ref = copy.deepcopy(base).eval()
    batches = [to_dataproto(make_pool(tok, prof, s, args.constant_groups, prof.task), prof.generations)
               for s in range(args.pools)]  # fmt: skip
    zero = np.mean([float((b.batch["advantages"].abs().sum(-1) == 0).float().mean()) for b in batches])
    print(f"profile {args.profile}: hidden {prof.hidden_size}, layers {prof.num_layers}, batch {len(batches[0])} rows "
          f"({prof.prompts_per_round} prompts x {prof.generations}), {prof.steps_per_generation} mini-batches; "
          f"zero-advantage rows {zero:.2f}; threads {args.threads}")  # fmt: skip
    for line in compare(base, ref, prof, batches, args.repeats):
        print(line)


KL_OFF = {
    "none": ["+algorithm.cost_aware.method=none"],
    "nonzero": ["+algorithm.cost_aware.method=nonzero"],
    "p_star": ["+algorithm.cost_aware.method=p_star"],
    "pods": ["+algorithm.cost_aware.method=pods"],
    "cost_pods": ["+algorithm.cost_aware.method=cost_pods"],
}
SETTINGS = {
    "KL off": (False, KL_OFF),
    "KL on": (True, {"p_smooth a=0.2": ["+algorithm.cost_aware.method=p_smooth", "+algorithm.cost_aware.alpha=0.2"]}),
}


def compare(base, ref, prof, batches, repeats: int, device: str = "cpu", sync=lambda: None):
    """Stock against every arm of each of ``SETTINGS`` on the same batches, interleaved; the report's lines.
    ``sync`` waits for the device (``torch.cuda.synchronize`` on a GPU) before each clock reading."""
    lines = []
    for label, (kl, plugin_arms) in SETTINGS.items():
        arms = {"stock": build_trainer(copy.deepcopy(base), ref, prof, kl, [], device)}
        arms.update(
            {a: build_trainer(copy.deepcopy(base), ref, prof, kl, keys, device) for a, keys in plugin_arms.items()}
        )
        for trainer in arms.values():  # warm-up: allocator, autograd caches, optimiser state
            po_phase(trainer, batches[0], kl, 0, sync)
        runs: dict[str, list[dict[str, float]]] = {a: [] for a in arms}
        for r in range(repeats):
            for i, batch in enumerate(batches):
                for arm, trainer in arms.items():  # interleaved: drift in machine load hits every arm alike
                    runs[arm].append(po_phase(trainer, batch, kl, 1 + 1000 * r + i, sync))
        med = {a: statistics.median(x["seconds"] for x in runs[a]) for a in arms}
        tok = {a: {k: float(np.mean([x[k] for x in runs[a]])) for k in ("passes", "update", "trl")} for a in arms}
        total = {a: tok[a]["passes"] + tok[a]["update"] for a in arms}
        lines.append(f"\n{label} ({len(batches)} pools x {repeats} repeats; ratios against stock)")
        lines.append(f"{'arm':15s} {'median s':>9s} {'time':>6s} {'tokens':>8s} {'passes':>8s} {'update':>8s} "
                     f"{'upd/stk':>7s} {'trl/stk':>7s} {'time/tok saved':>14s}")  # fmt: skip
        for a in arms:
            dt, dk = 1 - med[a] / med["stock"], 1 - total[a] / total["stock"]
            ratio = f"{dt / dk:14.2f}" if abs(dk) > 1e-9 else f"{'-':>14s}"
            lines.append(
                f"{a:15s} {med[a]:9.4f} {med[a] / med['stock']:6.3f} {total[a]:8.0f} {tok[a]['passes']:8.0f} "
                f"{tok[a]['update']:8.0f} {tok[a]['update'] / tok['stock']['update']:7.3f} "
                f"{tok[a]['trl'] / tok['stock']['update']:7.3f} {ratio}"
            )
    return lines


if __name__ == "__main__":
    main()
