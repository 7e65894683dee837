"""Cost-Aware GRPO on TRL's ``GRPOTrainer`` (one machine, or several GPUs through accelerate).

Only the split of each generation batch into optimiser steps changes; generation is untouched.
Where stock TRL shuffles the batch and cuts it into ``steps_per_generation`` chunks,
:class:`CostAwareGRPOTrainer` builds a :func:`costaware.grpo.plan.plan_minibatches` plan
(p ∝ |A_i|/√c_i by default, c_i = prompt + completion tokens), indexes every per-row field with
each mini-batch's rows, trims the columns that are padding in every row, and folds the per-row
loss factor into ``advantages``.

>>> from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # doctest: +SKIP
>>> args = CostAwareGRPOConfig(output_dir="out", cost_aware_method="p_star", loss_type="dapo")  # doctest: +SKIP
>>> trainer = CostAwareGRPOTrainer(model=model, args=args, reward_funcs=reward, train_dataset=ds,
...                                processing_class=tokenizer)  # doctest: +SKIP
>>> trainer.train(); trainer.cost_aware_state["tokens"]  # doctest: +SKIP

Why folding into ``advantages`` is exact (read from TRL 1.16 ``_compute_loss``): for a factor f > 0,
every policy term is positively homogeneous in A — ``-min(ρA, clip(ρ)A)`` (grpo, bnpo, dr_grpo,
dapo, luspo; with the optional ``delta`` clamp on ρ), CISPO's ``-sg(min(ρ, ε_h))·A·log π``, SAPO's
``-σ(τ(ρ-1))·4/τ·A`` with τ chosen by the sign of A, VESPO's ``-φ(w)·A·log π`` with φ's shape chosen
by the sign of A — and the off-policy mask, entropy mask and vLLM IS ratio depend on A only through
its sign. So f·A scales the row's policy loss by f. What A does not reach, and how it is handled:

- the KL term (``beta > 0``): :meth:`CostAwareGRPOTrainer.compute_loss` adds β·(f−1)·KL per row with
  the loss type's own aggregation, so the row's whole loss is multiplied by f;
- the entropy bonus (``entropy_coef != 0`` or adaptive entropy) is a token mean over the micro-batch,
  not a per-sequence term: refused with a sampling method;
- ``top_entropy_quantile < 1`` takes a quantile over the micro-batch's tokens, which merging duplicates
  changes: refused with ``cost_aware_merge_duplicates=True``;
- the MoE router aux loss is a property of the forward pass, not of a sequence: left unweighted.

Normalisation (``cost_aware_normaliser``), for a mini-batch with k rows fed standing for m draws:

- ``"draws"`` (default, what verl — the paper's engine — does with the drawn mini-batch): each step's
  loss is exactly stock TRL's loss on the drawn rows, duplicates included. Row-mean losses (grpo,
  dr_grpo, luspo, sapo) get f = w·count·k/m; bnpo (micro-batch tokens) gets f = w·count·T_fed/T_drawn;
  dapo, cispo, vespo (``num_items_in_batch``) get f = w·count and ``num_items_in_batch`` = completion
  tokens of all the plan's draws, counted with multiplicity.
- ``"pool"``: the normaliser stays the baseline's (pool completion tokens, scaled by draws/N), so with
  ``cost_aware_weights="raw"`` the summed gradient is an unbiased estimate of stock TRL's gradient.

Either way merging a row drawn c times into one run of weight c·w gives the same gradient.

A pool whose advantages are all zero gives a skipped plan: on one process no forward, backward or
parameter update happens (every ``.grad`` stays ``None``, so the optimiser leaves every parameter
and its moments alone; the LR schedule still advances); on several processes each skipped micro-step
runs one row with factor 0 so that the collectives stay in step (a zero gradient contribution).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

try:
    import trl
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import RepeatSampler, shuffle_sequence_dict, split_tensor_dict
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("costaware.integrations.trl needs TRL: pip install 'costaware[trl]'") from exc

from packaging.version import Version
from transformers import TrainerCallback

from costaware.grpo.plan import METHODS, Plan, SamplingConfig, plan_minibatches
from costaware.grpo.zvf import nonzero_variance_groups

SUPPORTED_TRL = (Version("1.16.0"), Version("1.17.0"))  # [min, max): the internals overridden here
if not (SUPPORTED_TRL[0] <= Version(trl.__version__) < SUPPORTED_TRL[1]):
    raise ImportError(
        f"costaware.integrations.trl supports TRL >= {SUPPORTED_TRL[0]}, < {SUPPORTED_TRL[1]} "
        f"(it overrides GRPOTrainer internals); found trl {trl.__version__}"
    )

__all__ = [
    "CostAwareGRPOConfig",
    "CostAwareGRPOTrainer",
    "SUPPORTED_TRL",
    "SUPPORTED_LOSS_TYPES",
    "STATE_FILE",
]

_ROW_MEAN = ("grpo", "dr_grpo", "luspo", "sapo")  # normaliser counts the micro-batch's rows
_TOKEN_MEAN = ("bnpo",)  # normaliser counts the micro-batch's completion tokens
_GLOBAL = ("dapo", "cispo", "vespo")  # normaliser is num_items_in_batch over the generation batch
SUPPORTED_LOSS_TYPES = _ROW_MEAN + _TOKEN_MEAN + _GLOBAL
_SUBSET = ("nonzero", "pods")  # methods that run a subset of the pool once, unweighted
# Per-row tensors whose second dimension runs over completion tokens (right-padded), with their pad value.
_COMPLETION_PAD = {
    "completion_ids": None,  # the tokenizer's pad id
    "completion_mask": 0,
    "tool_mask": 1,
    "old_per_token_logps": 0,
    "ref_per_token_logps": 0,
    "sampling_per_token_logps": 0,
    "importance_sampling_ratio": 1,
}
_PROMPT_PAD = {"prompt_ids": None, "prompt_mask": 0}  # left-padded
_MULTIMODAL = ("pixel_values", "image_grid_thw", "token_type_ids", "mm_token_type_ids", "num_images")
_WEIGHT_KEY = "cost_aware_weight"  # (k,) per-row loss factor folded into advantages
_SKIP_KEY = "cost_aware_skip"
STATE_FILE = "cost_aware_state.json"
_CUMULATIVE = (
    "tokens",
    "tokens_plain",
    "tokens_nonzero",
    "rows_drawn",
    "rows_fed",
    "generations",
    "skipped",
    "po_seconds",
)


@dataclass
class CostAwareGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the Cost-Aware GRPO options (see :class:`costaware.grpo.plan.SamplingConfig`).

    >>> CostAwareGRPOConfig(output_dir="o", cost_aware_method="p_smooth", cost_aware_alpha=0.05)  # doctest: +SKIP
    """

    cost_aware_method: str = field(
        default="p_star", metadata={"help": f"Mini-batch sampling method, one of {METHODS}."}
    )
    cost_aware_alpha: float = field(default=0.01, metadata={"help": "p_smooth: (1-α)p* + α·uniform."})
    cost_aware_proxy_noise: float = field(
        default=0.0, metadata={"help": "σ² of zero-mean noise added to |A| before p is formed (ablation)."}
    )
    cost_aware_weights: str = field(
        default="centred", metadata={"help": "'centred' 1/(n_supp p_i) or 'raw' 1/(n p_i)."}
    )
    cost_aware_merge_duplicates: bool = field(
        default=True, metadata={"help": "Run a row drawn k times into one mini-batch once, with weight k·w."}
    )
    cost_aware_budget: str = field(
        default="rows", metadata={"help": "'rows': the baseline's draws per step; 'tokens': its tokens."}
    )
    cost_aware_pods_keep: int | None = field(
        default=None, metadata={"help": "PODS: rows kept per group (default num_generations // 2)."}
    )
    cost_aware_zvf: bool = field(
        default=False,
        metadata={
            "help": "DAPO zero-variance filtering: drop groups with equal rewards, regenerate to fill."
        },
    )
    cost_aware_zvf_max_rounds: int = field(
        default=4, metadata={"help": "ZVF: generation rounds at most per batch (the first included)."}
    )
    cost_aware_diagnostics_interval: int = field(
        default=0, metadata={"help": "Every k generation batches log Pearson(|A|, ‖∇ℓ‖) and χ² (0 = off)."}
    )
    cost_aware_diagnostics_rows: int = field(
        default=16, metadata={"help": "Rows whose exact gradient norm the diagnostics compute."}
    )
    cost_aware_normaliser: str = field(
        default="draws",
        metadata={
            "help": "'draws': stock TRL's loss on the drawn rows (verl's convention); 'pool': the "
            "baseline's normaliser (unbiased with raw weights)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sampling_config()  # validates every field SamplingConfig holds
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {SUPPORTED_LOSS_TYPES} here, got {self.loss_type!r}")
        if self.cost_aware_normaliser not in ("draws", "pool"):
            raise ValueError(
                f"cost_aware_normaliser must be 'draws' or 'pool', got {self.cost_aware_normaliser!r}"
            )
        for name, low in (
            ("cost_aware_zvf_max_rounds", 1),
            ("cost_aware_diagnostics_interval", 0),
            ("cost_aware_diagnostics_rows", 2),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        sampling = self.cost_aware_method != "none"
        if sampling and (self.entropy_coef != 0.0 or self.use_adaptive_entropy):
            raise ValueError(
                f"entropy_coef={self.entropy_coef!r} (use_adaptive_entropy={self.use_adaptive_entropy!r}): the "
                "entropy bonus is a token mean over the micro-batch, not a per-sequence loss, so importance "
                "weights cannot reach it; set entropy_coef=0 or cost_aware_method='none'"
            )
        if sampling and self.cost_aware_merge_duplicates and self.top_entropy_quantile < 1.0:
            raise ValueError(
                f"top_entropy_quantile={self.top_entropy_quantile!r} takes a quantile over the micro-batch's tokens, "
                "which merging duplicates changes; set cost_aware_merge_duplicates=False"
            )

    def sampling_config(self) -> SamplingConfig:
        """The engine-neutral :class:`SamplingConfig` these options describe."""
        return SamplingConfig(
            method=self.cost_aware_method,
            alpha=self.cost_aware_alpha,
            proxy_noise=self.cost_aware_proxy_noise,
            weights=self.cost_aware_weights,
            merge_duplicates=self.cost_aware_merge_duplicates,
            budget=self.cost_aware_budget,
            pods_keep=self.cost_aware_pods_keep,
        )


# -- per-row batch helpers ----------------------------------------------------------------------------
def _index_rows(batch: dict[str, Any], idx: torch.Tensor, n: int) -> dict[str, Any]:
    """Every per-row field (tensor or list with n rows) indexed by ``idx``; scalars kept."""
    out: dict[str, Any] = {}
    for key, v in batch.items():
        if isinstance(v, torch.Tensor) and v.ndim >= 1 and v.shape[0] == n:
            out[key] = v[idx.to(v.device)]
        elif isinstance(v, list) and len(v) == n:
            out[key] = [v[i] for i in idx.tolist()]
        else:  # scalars such as num_items_in_batch
            out[key] = v
    return out


def _loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def _trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """Drop the columns that are padding in every row, so that tokens saved are compute saved.

    Prompts are left-padded and completions right-padded, so the dropped columns are a prefix of the
    prompt and a suffix of the completion; RoPE attention depends on relative positions only.
    """
    pm, cm = batch["prompt_mask"], batch["completion_mask"]
    p_cols = torch.nonzero(pm.any(0)).reshape(-1)
    c_cols = torch.nonzero(cm.any(0)).reshape(-1)
    p_start = int(p_cols[0]) if p_cols.numel() else pm.shape[1] - 1
    c_end = int(c_cols[-1]) + 1 if c_cols.numel() else 1
    width_c = cm.shape[1]
    out = dict(batch)
    for key in _PROMPT_PAD:
        out[key] = batch[key][:, p_start:]
    for key in _COMPLETION_PAD:
        v = batch.get(key)
        if isinstance(v, torch.Tensor) and v.ndim == 2 and v.shape[1] == width_c:
            out[key] = v[:, :c_end]
    return out


def _pad_cat(parts: list[torch.Tensor], left: bool, value: float) -> torch.Tensor:
    width = max(p.shape[1] for p in parts)
    pads = [((width - p.shape[1], 0) if left else (0, width - p.shape[1])) for p in parts]
    return torch.cat(
        [torch.nn.functional.pad(p, pad, value=value) for p, pad in zip(parts, pads, strict=True)], 0
    )


def _concat_batches(batches: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate generation batches row-wise, re-padding prompts on the left, completions on the right."""
    if len(batches) == 1:
        return dict(batches[0])
    out: dict[str, Any] = {}
    for key, v in batches[0].items():
        vals = [b[key] for b in batches]
        ragged = isinstance(v, torch.Tensor) and v.ndim == 2 and len({x.shape[1] for x in vals}) > 1
        if ragged and key in _PROMPT_PAD:
            out[key] = _pad_cat(
                vals, left=True, value=_PROMPT_PAD[key] if key != "prompt_ids" else pad_token_id
            )
        elif ragged and key in _COMPLETION_PAD:
            pad = _COMPLETION_PAD[key] if key != "completion_ids" else pad_token_id
            out[key] = _pad_cat(vals, left=False, value=pad)
        elif isinstance(v, torch.Tensor) and v.ndim >= 1:
            out[key] = torch.cat(vals, 0)
        elif isinstance(v, list):
            out[key] = [x for val in vals for x in val]
        else:
            out[key] = v
    return out


class _OptimizerTimer(TrainerCallback):
    """Adds the wall time of every ``optimizer.step()`` to ``trainer.cost_aware_state['po_seconds']``."""

    def __init__(self, trainer: CostAwareGRPOTrainer) -> None:
        self.trainer = trainer
        self.start: float | None = None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.start is not None:
            self.trainer.cost_aware_state["po_seconds"] += time.perf_counter() - self.start
            self.start = None


class CostAwareGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose policy-optimisation mini-batches are drawn by a cost-aware plan.

    Takes the same arguments as ``GRPOTrainer``; ``args`` must be a :class:`CostAwareGRPOConfig`.
    Cumulative counters live in ``self.cost_aware_state``, are logged under ``cost_aware/*`` through
    TRL's metrics and are saved with (and restored from) every checkpoint (``cost_aware_state.json``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, CostAwareGRPOConfig):
            raise ValueError(f"args must be a CostAwareGRPOConfig, got {type(self.args).__name__}")
        self.sampling = self.args.sampling_config()
        self.cost_aware_state: dict[str, float] = {
            "tokens": 0,  # fed to forward/backward: the x-axis of the paper's plots
            "tokens_plain": 0,  # what plain GRPO would have fed on the same rollouts
            "tokens_nonzero": 0,  # what dropping zero-advantage rows would have fed
            "rows_drawn": 0,
            "rows_fed": 0,
            "generations": 0,
            "skipped": 0,
            "po_seconds": 0.0,  # forward + backward + optimiser steps, generation excluded
            "zvf_refills": 0,  # refill batches drawn by ZVF (to fast-forward on resume)
        }
        self._ca_rewards: torch.Tensor | None = None
        self._ca_capture: list[torch.Tensor] | None = None
        self._ca_prepare_seconds = 0.0
        self._zvf_iter: Any = None
        self.add_callback(_OptimizerTimer(self))

    # -- generation ---------------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        self._ca_rewards = (rewards_per_func * weights).nansum(dim=1)  # gathered over processes, as TRL's
        return rewards_per_func

    def _local_rewards(self, n_local: int) -> torch.Tensor:
        if self._ca_rewards is None:
            raise RuntimeError("no rewards were captured: _generate_and_score_completions has not run")
        start = self.accelerator.process_index * n_local
        return self._ca_rewards[start : start + n_local].detach().float().cpu()

    def _zvf_refill_batch(self) -> list[dict[str, Any]]:
        """The next generation batch of fresh prompts for ZVF (its own seeded sampler, like DAPO)."""
        if self._zvf_iter is None:
            if isinstance(self.train_dataset, torch.utils.data.IterableDataset):
                raise ValueError("cost_aware_zvf needs a map-style train_dataset (it draws refill prompts)")
            loader = self._get_dataloader(
                dataset=self.train_dataset,
                description="Training",
                batch_size=self._train_batch_size * self.args.steps_per_generation,
                sampler_fn=lambda ds: RepeatSampler(
                    data_source=ds,
                    mini_repeat_count=self.num_generations,
                    batch_size=self.args.generation_batch_size // self.num_generations,
                    repeat_count=1,
                    shuffle=True,
                    seed=self.args.seed + 104_729,  # a stream of prompts apart from the main loader's
                ),
                is_training=True,
            )
            self._zvf_loader = loader
            self._zvf_iter = iter(loader)
            for _ in range(int(self.cost_aware_state["zvf_refills"]) % max(1, len(loader))):  # resume
                next(self._zvf_iter)
        try:
            batch = next(self._zvf_iter)
        except StopIteration:
            self._zvf_iter = iter(self._zvf_loader)
            batch = next(self._zvf_iter)
        self.cost_aware_state["zvf_refills"] += 1
        return batch

    def _generate_filtered(self, generation_batch: Any) -> tuple[dict[str, Any], torch.Tensor]:
        """Generate and score; with ZVF keep only groups whose rewards differ, refilling with fresh prompts."""
        batch = self._generate_and_score_completions(generation_batch)
        n = batch["advantages"].shape[0]
        rewards = self._local_rewards(n)
        if not self.args.cost_aware_zvf:
            return batch, rewards
        g = self.num_generations
        if n % g:
            raise ValueError(
                f"cost_aware_zvf needs whole groups on each process: {n} local rows, num_generations={g}"
            )
        kept, kept_rewards, have, rounds = [], [], 0, 0
        while True:
            rounds += 1
            ok = nonzero_variance_groups(rewards, g)
            idx = torch.nonzero(ok).reshape(-1)
            if idx.numel():
                kept.append(_index_rows(batch, idx, n))
                kept_rewards.append(rewards[idx])
                have += idx.numel()
            full = torch.tensor([float(have >= n)], device=self.accelerator.device)
            if bool(self.accelerator.gather(full).min() > 0) or rounds >= self.args.cost_aware_zvf_max_rounds:
                break
            batch = self._generate_and_score_completions(self._zvf_refill_batch())  # every process, in step
            rewards = self._local_rewards(n)
        metrics = self._metrics["train"]
        metrics["cost_aware/zvf_rounds"].append(rounds)
        metrics["cost_aware/zvf_fill"].append(min(have, n) / n)
        if not kept:  # every group constant in every round: an all-zero pool, which the plan skips
            out, out_rewards = batch, rewards
        else:
            out = _concat_batches(kept, self.processing_class.pad_token_id)
            out_rewards = torch.cat(kept_rewards)
            if have > n:  # whole groups in generation order; the last round's surplus is dropped
                out, out_rewards = _index_rows(out, torch.arange(n), have), out_rewards[:n]
        local = _loss_mask(out).sum().to(self.accelerator.device)
        out["num_items_in_batch"] = self.accelerator.gather(local.reshape(1)).sum()
        return out, out_rewards

    # -- the split ----------------------------------------------------------------------------------
    def _prepare_inputs(self, generation_batch):  # type: ignore[override]
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            start = time.perf_counter()
            batch, rewards = self._generate_filtered(generation_batch)
            self._buffered_inputs = self._split(batch, rewards)
            self._ca_prepare_seconds += time.perf_counter() - start
        return self._buffered_inputs[self._step % spg]

    def _generator(self) -> torch.Generator:
        """Seeded from (seed, generation index, process): same run -> same plans, also after resume."""
        g = int(self.cost_aware_state["generations"])
        return torch.Generator().manual_seed(
            (int(self.args.seed) * 1_000_003 + g) * 1024 + self.accelerator.process_index
        )

    def _plan(self, batch: dict[str, Any], rewards: torch.Tensor) -> Plan:
        costs = (batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)).clamp(min=1).cpu()
        return plan_minibatches(
            batch["advantages"].detach().cpu(),
            costs,
            num_minibatches=self.args.steps_per_generation,
            minibatch_size=self.args.per_device_train_batch_size,  # the baseline's rows per step
            config=self.sampling,
            rewards=rewards if self.sampling.method == "pods" else None,
            group_size=self.num_generations,
            generator=self._generator(),
        )

    def _global_sum(self, value: float) -> float:
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.accelerator.device)
        return float(self.accelerator.gather(t).sum())

    def _split(self, batch: dict[str, Any], rewards: torch.Tensor) -> list[dict[str, Any]]:
        """The ``steps_per_generation`` micro-batches of one pool, with the accounting around them."""
        if any(k in batch for k in _MULTIMODAL):
            raise ValueError(f"CostAwareGRPOTrainer does not support multimodal batches (keys {_MULTIMODAL})")
        adv = batch["advantages"]
        if adv.ndim != 1:
            raise ValueError(f"advantages must be (N,) one per row, got shape {tuple(adv.shape)}")
        spg = self.args.steps_per_generation
        n = adv.shape[0]
        state = self.cost_aware_state
        stock = self.sampling.method == "none" and n == self.args.per_device_train_batch_size * spg
        plan = self._plan(batch, rewards)  # validates advantages (finite, 1-D) and costs in every case
        if self.args.cost_aware_diagnostics_interval and (
            state["generations"] % self.args.cost_aware_diagnostics_interval == 0
        ):
            self._diagnostics(batch, plan)
        state["generations"] += 1
        state["tokens_plain"] += plan.tokens_plain
        state["tokens_nonzero"] += plan.tokens_nonzero
        if stock:  # exactly stock TRL's split (same global RNG draw, same chunks)
            micro = split_tensor_dict(shuffle_sequence_dict(batch), spg)
            self._account(plan.tokens_plain, n, n, n, skipped=False)
            return micro
        if plan.skipped is not None or not plan.minibatches:
            return self._skipped_split(batch, n)
        micro = self._weighted_minibatches(batch, plan)
        while len(micro) < spg:  # fewer non-empty mini-batches than steps (tiny pools)
            micro.append(self._skip_step(batch, n))
        self._account(plan.tokens, plan.rows_drawn, plan.rows_fed, plan.rows_unique, skipped=False)
        return micro

    def _weighted_minibatches(self, batch: dict[str, Any], plan: Plan) -> list[dict[str, Any]]:
        """Index the pool by each mini-batch and fold the loss factor into ``advantages``."""
        n = batch["advantages"].shape[0]
        lengths = _loss_mask(batch).sum(1).double().cpu()  # completion tokens the loss counts, per row
        subset = plan.method in _SUBSET
        pool_norm = self.args.cost_aware_normaliser == "pool"
        spg = self.args.steps_per_generation
        # draws each mini-batch stands for: a subset method's rows stand for the baseline's rows per step
        m_of = [(n / spg) if (subset and pool_norm) else float(mb.num_draws) for mb in plan.minibatches]
        drawn_tokens = [float((lengths[mb.indices] * mb.counts.double()).sum()) for mb in plan.minibatches]
        pool_tokens = float(lengths.sum())
        loss_type = self.loss_type
        if loss_type in _GLOBAL:
            if pool_norm:  # the baseline's num_items_in_batch, scaled by (draws / rows) over all processes
                scale = self._global_sum(sum(m_of)) / self._global_sum(n)
                num_items = batch["num_items_in_batch"] * scale
            else:  # completion tokens of every draw of the plan, all processes
                num_items = torch.tensor(self._global_sum(sum(drawn_tokens)), device=self.accelerator.device)
        micro = []
        for mb, m, t_drawn in zip(plan.minibatches, m_of, drawn_tokens, strict=True):
            sub = _index_rows(batch, mb.indices, n)
            factor = mb.weights.double()
            k = mb.indices.numel()
            if loss_type in _ROW_MEAN:
                factor = factor * (k / m)
            elif loss_type in _TOKEN_MEAN:
                t_fed = float(lengths[mb.indices].sum())
                denom = pool_tokens * m / n if pool_norm else t_drawn
                factor = factor * (t_fed / denom if denom > 0 else 0.0)
            else:
                sub["num_items_in_batch"] = num_items
            device, dtype = sub["advantages"].device, sub["advantages"].dtype
            sub[_WEIGHT_KEY] = factor.to(device, dtype)
            sub["advantages"] = plan.advantages[mb.indices].to(device, dtype) * sub[_WEIGHT_KEY]
            if self.pad_to_multiple_of is None:
                sub = _trim_padding(sub)
            micro.append(sub)
        return micro

    def _skip_step(self, batch: dict[str, Any], n: int) -> dict[str, Any]:
        """A micro-step that changes nothing (see the module docstring)."""
        if self.accelerator.num_processes == 1:
            return {_SKIP_KEY: True}
        one = _trim_padding(_index_rows(batch, torch.tensor([0]), n))
        one["advantages"] = torch.zeros_like(one["advantages"])
        one[_WEIGHT_KEY] = torch.zeros_like(one["advantages"])
        return one

    def _skipped_split(self, batch: dict[str, Any], n: int) -> list[dict[str, Any]]:
        step = self._skip_step(batch, n)
        fed = 0 if _SKIP_KEY in step else int(step["prompt_mask"].sum() + step["completion_mask"].sum())
        spg = self.args.steps_per_generation
        self.cost_aware_state["skipped"] += 1
        self._account(fed * spg, 0, 0 if fed == 0 else spg, 0, skipped=True)
        return [step] * spg

    def _account(self, tokens: int, drawn: int, fed: int, unique: int, *, skipped: bool) -> None:
        state, metrics = self.cost_aware_state, self._metrics["train"]
        state["tokens"] += tokens
        state["rows_drawn"] += drawn
        state["rows_fed"] += fed
        metrics["cost_aware/tokens_step"].append(tokens)
        metrics["cost_aware/rows_unique"].append(unique)
        metrics["cost_aware/skipped"].append(float(skipped))

    # -- diagnostics --------------------------------------------------------------------------------
    def _diagnostics(self, batch: dict[str, Any], plan: Plan) -> None:
        """Pearson(|A|, ‖∇ℓ_i‖) and the cost-biased χ² on a random subset of rows (paper Fig. 3, G.8)."""
        from costaware.grpo.diagnostics import per_sequence_grad_norms, proxy_fidelity

        n = batch["advantages"].shape[0]
        k = min(self.args.cost_aware_diagnostics_rows, n)
        gen = torch.Generator().manual_seed(
            int(self.args.seed) * 7919 + int(self.cost_aware_state["generations"])
        )
        idx = torch.randperm(n, generator=gen)[:k]
        rows = _index_rows(batch, idx, n)
        rows["advantages"] = plan.advantages[idx].to(rows["advantages"])
        abs_a = rows["advantages"].abs().double().cpu()
        if not (abs_a > 0).any():
            return
        per_row = {key: v for key, v in rows.items() if isinstance(v, torch.Tensor) and v.ndim >= 1}
        scalars = {key: v for key, v in rows.items() if key not in per_row}
        saved = {key: list(v) for key, v in self._metrics["train"].items()}

        def row_loss(model, one):
            return GRPOTrainer._compute_loss(self, model, _trim_padding({**one, **scalars}))

        norms = per_sequence_grad_norms(self.model, row_loss, per_row)
        self._metrics["train"].clear()
        self._metrics["train"].update(saved)  # the k single-row losses must not enter TRL's metrics
        if not (norms > 0).any():
            return
        costs = (rows["prompt_mask"].sum(1) + rows["completion_mask"].sum(1)).clamp(min=1).double().cpu()
        out = proxy_fidelity(abs_a, norms, costs)
        for key in ("pearson", "chi2", "j_vs_uniform"):
            if math.isfinite(out[key]):
                self._metrics["train"][f"cost_aware/{key}"].append(out[key])

    # -- loss ---------------------------------------------------------------------------------------
    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._ca_capture is not None:
            self._ca_capture.append(out[0])
        return out

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[override]
        if inputs.get(_SKIP_KEY):
            # no forward: a leaf loss whose backward leaves every parameter's .grad untouched (None)
            return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        if self.beta == 0.0 or _WEIGHT_KEY not in inputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self._ca_capture = []
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            per_token_logps = self._ca_capture[0]
        finally:
            self._ca_capture = None
        return loss + self._kl_correction(inputs, per_token_logps)

    def _kl_correction(self, inputs: dict[str, Any], per_token_logps: torch.Tensor) -> torch.Tensor:
        """β·(f−1)·KL per row, aggregated like the loss type: the KL term then carries the factor f too."""
        mask = _loss_mask(inputs).to(per_token_logps.dtype)
        ref = inputs["ref_per_token_logps"]
        d = ref - per_token_logps
        kl = torch.exp(d) - d - 1  # TRL's k3 estimator
        if self.args.use_bias_correction_kl:
            old = inputs.get("old_per_token_logps")
            log_ratio = per_token_logps - (per_token_logps.detach() if old is None else old)
            if self.importance_sampling_level == "sequence":
                log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
            kl = kl * torch.exp(log_ratio)
        extra = self.beta * (inputs[_WEIGHT_KEY].to(kl.dtype) - 1.0).unsqueeze(1) * kl
        return self._aggregate(extra, mask, inputs)

    def _aggregate(self, per_token: torch.Tensor, mask: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL 1.16's reduction of a per-token loss for ``self.loss_type`` (``_compute_loss``, train mode)."""
        ga = self.current_gradient_accumulation_steps if self.model.training else 1.0
        lt = self.loss_type
        if lt in ("grpo", "sapo"):
            return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / ga
        if lt == "bnpo":
            return (per_token * mask).sum() / mask.sum().clamp(min=1.0) / ga
        if lt == "dr_grpo":
            return (per_token * mask).sum() / (per_token.size(0) * self.max_completion_length) / ga
        if lt == "luspo":
            return (per_token * mask).sum(-1).mean() / ga
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if self.model.training:
            normalizer = (
                normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            )
        return (per_token * mask).sum() / normalizer

    # -- accounting, logging, checkpoints -----------------------------------------------------------
    def training_step(self, model, inputs, num_items_in_batch=None):  # type: ignore[override]
        start, prep = time.perf_counter(), self._ca_prepare_seconds
        out = super().training_step(model, inputs, num_items_in_batch)
        generation = self._ca_prepare_seconds - prep  # generation + plan, not policy optimisation
        self.cost_aware_state["po_seconds"] += time.perf_counter() - start - generation
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training and "loss" in logs:  # one value per log, so TRL's averaging keeps it
            for key in _CUMULATIVE:
                name = "skipped_total" if key == "skipped" else key  # cost_aware/skipped: this window's flag
                self._metrics["train"][f"cost_aware/{name}"] = [float(self.cost_aware_state[key])]
        super().log(logs, start_time)

    def _save_checkpoint(self, model, trial):  # type: ignore[override]
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump(self.cost_aware_state, f)

    def _load_optimizer_and_scheduler(self, checkpoint):  # type: ignore[override]
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            path = os.path.join(checkpoint, STATE_FILE)
            if os.path.exists(path):
                with open(path) as f:
                    self.cost_aware_state.update(json.load(f))
