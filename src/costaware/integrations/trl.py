"""Cost-Aware GRPO on TRL's ``GRPOTrainer`` (one machine, or several GPUs through accelerate).

Only the split of each generation batch into optimiser steps changes. Where stock TRL shuffles the
batch and cuts it into ``steps_per_generation`` chunks, :class:`CostAwareGRPOTrainer` builds a
:func:`costaware.grpo.plan.plan_minibatches` plan (p ∝ |A_i|/√c_i by default), indexes every
per-row field with each mini-batch's rows, and folds the per-sequence weight into ``advantages``.

>>> from costaware.integrations.trl import CostAwareGRPOConfig, CostAwareGRPOTrainer  # doctest: +SKIP
>>> args = CostAwareGRPOConfig(output_dir="out", cost_aware_method="p_star", loss_type="dapo")  # doctest: +SKIP
>>> trainer = CostAwareGRPOTrainer(model=model, args=args, reward_funcs=reward, train_dataset=ds,
...                                processing_class=tokenizer)  # doctest: +SKIP

Why folding into ``advantages`` is exact: for every supported ``loss_type`` the per-token policy
loss is A times a factor that does not depend on A's magnitude (``-min(ρA, clip(ρ)A)`` for positive
weights, CISPO's ``-sg(clip ρ)·A·log π``, SAPO's sign-dependent temperature), so scaling A by w > 0
scales the row's loss by w. The KL term (``beta > 0``) and the entropy bonus do not involve A, so the
weights would not reach them: those combinations are refused rather than silently biased.

Normalisation (so that E[gradient] equals the baseline's with ``weights="raw"``, and merging
duplicates changes nothing):
- ``grpo``, ``dr_grpo``, ``luspo``, ``sapo`` average over the rows of a micro-batch: a merged row
  of count c gets w·c·k/m (k rows fed, m draws).
- ``bnpo`` divides by the micro-batch's completion tokens: the factor also carries
  T_fed / (T_pool·m/N), the baseline's expected normaliser.
- ``dapo``, ``cispo`` divide by ``num_items_in_batch`` (completion tokens of the generation
  batch): it is kept at the pool's count, scaled by M/N for M total draws. Dividing by the drawn
  rows' tokens instead would be a self-normalised, biased estimator.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

try:
    import trl
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("costaware.integrations.trl needs TRL: pip install 'costaware[trl]'") from exc

from packaging.version import Version

from costaware.grpo.plan import METHODS, Plan, SamplingConfig, plan_minibatches

SUPPORTED_TRL = (Version("1.16.0"), Version("1.17.0"))  # [min, max): the internals we override
if not (SUPPORTED_TRL[0] <= Version(trl.__version__) < SUPPORTED_TRL[1]):
    raise ImportError(
        f"costaware.integrations.trl supports TRL >= {SUPPORTED_TRL[0]}, < {SUPPORTED_TRL[1]}; "
        f"found {trl.__version__}"
    )

__all__ = ["CostAwareGRPOConfig", "CostAwareGRPOTrainer", "SUPPORTED_TRL", "SUPPORTED_LOSS_TYPES"]

_ROW_MEAN = ("grpo", "dr_grpo", "luspo", "sapo")  # normaliser counts the micro-batch's rows
_TOKEN_MEAN = ("bnpo",)  # normaliser counts the micro-batch's completion tokens
_GLOBAL = ("dapo", "cispo")  # normaliser is num_items_in_batch over the generation batch
SUPPORTED_LOSS_TYPES = _ROW_MEAN + _TOKEN_MEAN + _GLOBAL
# Per-row tensors whose second dimension runs over completion tokens (right-padded).
_COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
)
_PROMPT_KEYS = ("prompt_ids", "prompt_mask")  # left-padded
_STATE_FILE = "cost_aware_state.json"


@dataclass
class CostAwareGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the Cost-Aware GRPO options (see :class:`costaware.grpo.plan.SamplingConfig`)."""

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
        metadata={"help": "DAPO zero-variance filtering: drop groups with equal rewards, regenerate to fill."},
    )
    cost_aware_zvf_max_rounds: int = field(
        default=4, metadata={"help": "ZVF: generation rounds at most per batch (the first included)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sampling_config()  # validates every cost_aware_* field
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {SUPPORTED_LOSS_TYPES} here, got {self.loss_type!r}")
        if int(self.cost_aware_zvf_max_rounds) < 1:
            raise ValueError(f"cost_aware_zvf_max_rounds must be >= 1, got {self.cost_aware_zvf_max_rounds!r}")
        if self.cost_aware_method != "none" and self.beta != 0.0:
            raise ValueError(
                f"beta={self.beta!r}: the KL term is not multiplied by the importance weights, so it would be "
                "estimated with bias; use beta=0 (the paper's setting) or cost_aware_method='none'"
            )

    def sampling_config(self) -> SamplingConfig:
        return SamplingConfig(
            method=self.cost_aware_method,
            alpha=self.cost_aware_alpha,
            proxy_noise=self.cost_aware_proxy_noise,
            weights=self.cost_aware_weights,
            merge_duplicates=self.cost_aware_merge_duplicates,
            budget=self.cost_aware_budget,
            pods_keep=self.cost_aware_pods_keep,
        )


def _index_rows(batch: dict[str, Any], idx: torch.Tensor, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, v in batch.items():
        if isinstance(v, torch.Tensor) and v.ndim >= 1 and v.shape[0] == n:
            out[key] = v[idx.to(v.device)]
        elif isinstance(v, list) and len(v) == n:
            out[key] = [v[i] for i in idx.tolist()]
        else:  # scalars such as num_items_in_batch
            out[key] = v
    return out


def _trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """Drop the columns that are padding in every row, so that tokens saved are compute saved."""
    pm, cm = batch["prompt_mask"], batch["completion_mask"]
    p_cols = torch.nonzero(pm.any(0)).reshape(-1)
    c_cols = torch.nonzero(cm.any(0)).reshape(-1)
    p_start = int(p_cols[0]) if p_cols.numel() else pm.shape[1] - 1
    c_end = int(c_cols[-1]) + 1 if c_cols.numel() else 1
    width_c = cm.shape[1]
    out = dict(batch)
    for key in _PROMPT_KEYS:
        out[key] = batch[key][:, p_start:]
    for key in _COMPLETION_KEYS:
        v = batch.get(key)
        if isinstance(v, torch.Tensor) and v.ndim == 2 and v.shape[1] == width_c:
            out[key] = v[:, :c_end]
    return out


def _pad_cat(parts: list[torch.Tensor], left: bool, value: float = 0) -> torch.Tensor:
    width = max(p.shape[1] for p in parts)
    padded = []
    for p in parts:
        gap = width - p.shape[1]
        pad = (gap, 0) if left else (0, gap)
        padded.append(torch.nn.functional.pad(p, pad, value=value))
    return torch.cat(padded, 0)


def _concat_batches(batches: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate generation batches row-wise, re-padding prompts on the left, completions on the right."""
    out: dict[str, Any] = {}
    for key, v in batches[0].items():
        vals = [b[key] for b in batches]
        if key in _PROMPT_KEYS:
            out[key] = _pad_cat(vals, left=True, value=pad_token_id if key == "prompt_ids" else 0)
        elif key in _COMPLETION_KEYS and isinstance(v, torch.Tensor) and v.ndim == 2:
            out[key] = _pad_cat(vals, left=False, value=pad_token_id if key == "completion_ids" else 0)
        elif isinstance(v, torch.Tensor) and v.ndim >= 1:
            out[key] = torch.cat(vals, 0)
        elif isinstance(v, list):
            out[key] = [x for val in vals for x in val]
        else:
            out[key] = v
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


class CostAwareGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose policy-optimisation mini-batches are drawn by a cost-aware plan.

    Takes the same arguments as ``GRPOTrainer``; ``args`` must be a :class:`CostAwareGRPOConfig`.
    Cumulative token counters live in ``self.cost_aware_state``, are logged under ``cost_aware/*``
    and are saved with (and restored from) every checkpoint.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, CostAwareGRPOConfig):
            raise ValueError(f"args must be a CostAwareGRPOConfig, got {type(self.args).__name__}")
        if self.args.cost_aware_method != "none" and getattr(self, "_entropy_bonus_enabled", False):
            raise ValueError("the entropy bonus is not importance-weighted; set entropy_coef=0 to sample rows")
        self.sampling = self.args.sampling_config()
        self.cost_aware_state: dict[str, float] = {
            "tokens": 0,  # fed to forward/backward: the x-axis of the paper's plots
            "tokens_plain": 0,  # what plain GRPO would have fed on the same rollouts
            "tokens_nonzero": 0,  # what dropping zero-advantage rows would have fed
            "rows_drawn": 0,
            "rows_fed": 0,
            "generations": 0,
            "skipped": 0,
            "po_seconds": 0.0,
        }
        self._ca_rewards: torch.Tensor | None = None

    # -- generation ------------------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        self._ca_rewards = (rewards_per_func * weights).nansum(dim=1)  # gathered over processes
        return rewards_per_func

    def _local_rewards(self, n_local: int) -> torch.Tensor:
        assert self._ca_rewards is not None
        start = self.accelerator.process_index * n_local
        return self._ca_rewards[start : start + n_local].detach().cpu()

    def _generate_filtered(self, generation_batch: Any) -> tuple[dict[str, Any], torch.Tensor]:
        """Generate and score; with ZVF keep only groups whose rewards differ, regenerating to fill."""
        batch = self._generate_and_score_completions(generation_batch)
        n = batch["advantages"].shape[0]
        rewards = self._local_rewards(n)
        if not self.args.cost_aware_zvf:
            return batch, rewards
        g = self.num_generations
        kept, kept_rewards, have, rounds = [], [], 0, 0
        while True:
            rounds += 1
            groups = rewards.reshape(-1, g)
            ok = (groups != groups[:, :1]).any(1).repeat_interleave(g)
            idx = torch.nonzero(ok).reshape(-1)
            if idx.numel():
                kept.append(_index_rows(batch, idx, n))
                kept_rewards.append(rewards[idx])
                have += idx.numel()
            if have >= n or rounds >= self.args.cost_aware_zvf_max_rounds:
                break
            # DAPO samples new prompts; here the same prompts are sampled again (a new draw of rollouts).
            batch = self._generate_and_score_completions(generation_batch)
            rewards = self._local_rewards(n)
        mode = "train"
        self._metrics[mode]["cost_aware/zvf_rounds"].append(rounds)
        self._metrics[mode]["cost_aware/zvf_fill"].append(min(have, n) / n)
        if not kept:  # every group constant in every round: hand on the last batch; the plan skips it
            return batch, rewards
        merged = _concat_batches(kept, self.processing_class.pad_token_id)
        take = torch.arange(min(have, n))
        if have < n:  # not full after max_rounds: repeat kept groups so that the split stays even
            take = torch.arange(n) % have
        merged = _index_rows(merged, take, have)
        merged["num_items_in_batch"] = merged["completion_mask"].sum()
        return merged, torch.cat(kept_rewards)[take]

    # -- the split -------------------------------------------------------------------------------
    def _prepare_inputs(self, generation_batch):  # type: ignore[override]
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            batch, rewards = self._generate_filtered(generation_batch)
            self._buffered_inputs = self._split(batch, rewards)
        return self._buffered_inputs[self._step % spg]

    def _plan(self, batch: dict[str, Any], rewards: torch.Tensor) -> Plan:
        costs = (batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)).clamp(min=1).cpu()
        n = costs.numel()
        gen = torch.Generator().manual_seed(
            (int(self.args.seed) * 1_000_003 + int(self.cost_aware_state["generations"])) * 64
            + self.accelerator.process_index
        )
        return plan_minibatches(
            batch["advantages"].detach().float().cpu(),
            costs,
            num_minibatches=self.args.steps_per_generation,
            minibatch_size=n // self.args.steps_per_generation,
            config=self.sampling,
            rewards=rewards,
            group_size=self.num_generations,
            generator=gen,
        )

    def _split(self, batch: dict[str, Any], rewards: torch.Tensor) -> list[dict[str, Any]]:
        if any(k in batch for k in ("pixel_values", "image_grid_thw")):
            raise ValueError("CostAwareGRPOTrainer does not support multimodal batches yet")
        spg = self.args.steps_per_generation
        n = batch["advantages"].shape[0]
        plan = self._plan(batch, rewards)
        state = self.cost_aware_state
        state["generations"] += 1
        state["tokens_plain"] += plan.tokens_plain
        state["tokens_nonzero"] += plan.tokens_nonzero
        metrics = self._metrics["train"]
        if self.sampling.method == "none":  # exactly stock TRL's split
            micro = split_tensor_dict(shuffle_sequence_dict(batch), spg)
            state["tokens"] += plan.tokens_plain
            state["rows_drawn"] += n
            state["rows_fed"] += n
            metrics["cost_aware/tokens_step"].append(plan.tokens_plain)
            metrics["cost_aware/rows_unique"].append(n)
            metrics["cost_aware/skipped"].append(0.0)
            return micro
        if plan.skipped is not None:
            return self._skipped_split(batch, plan, n)
        pool_tokens = batch["completion_mask"].sum().clamp(min=1)
        total_draws = plan.rows_drawn
        loss_type = self.loss_type
        micro = []
        for mb in plan.minibatches:
            sub = _index_rows(batch, mb.indices, n)
            factor = mb.weights.to(sub["advantages"].device, sub["advantages"].dtype)
            k, m = mb.indices.numel(), mb.num_draws
            if loss_type in _ROW_MEAN:
                factor = factor * (k / m)
            elif loss_type in _TOKEN_MEAN:
                factor = factor * (sub["completion_mask"].sum() / (pool_tokens * m / n))
            else:  # _GLOBAL
                sub["num_items_in_batch"] = batch["num_items_in_batch"] * (total_draws / n)
            sub["advantages"] = plan.advantages[mb.indices].to(factor) * factor
            if self.pad_to_multiple_of is None:
                sub = _trim_padding(sub)
            micro.append(sub)
        while len(micro) < spg:  # fewer non-empty mini-batches than steps (tiny pools): zero steps
            micro.append(self._zero_step(micro[-1]))
        state["tokens"] += plan.tokens
        state["rows_drawn"] += plan.rows_drawn
        state["rows_fed"] += plan.rows_fed
        metrics["cost_aware/tokens_step"].append(plan.tokens)
        metrics["cost_aware/rows_unique"].append(plan.rows_unique)
        metrics["cost_aware/skipped"].append(0.0)
        return micro

    @staticmethod
    def _zero_step(template: dict[str, Any]) -> dict[str, Any]:
        one = _index_rows(template, torch.tensor([0]), template["advantages"].shape[0])
        one["advantages"] = torch.zeros_like(one["advantages"])
        return one

    def _skipped_split(self, batch: dict[str, Any], plan: Plan, n: int) -> list[dict[str, Any]]:
        """No policy gradient on this pool: every micro-step runs one row with zero advantage.

        The Trainer's loop still calls the optimiser; with β = 0 the gradient is exactly zero, so
        SGD does not move and Adam moves only by its momentum. The row's tokens are counted.
        """
        self.cost_aware_state["skipped"] += 1
        zero = self._zero_step(_trim_padding(_index_rows(batch, torch.tensor([0]), n)))
        fed = int(zero["prompt_mask"].sum() + zero["completion_mask"].sum())
        spg = self.args.steps_per_generation
        self.cost_aware_state["tokens"] += fed * spg
        self.cost_aware_state["rows_fed"] += spg
        metrics = self._metrics["train"]
        metrics["cost_aware/tokens_step"].append(fed * spg)
        metrics["cost_aware/rows_unique"].append(1)
        metrics["cost_aware/skipped"].append(1.0)
        return [zero] * spg

    # -- accounting ------------------------------------------------------------------------------
    def training_step(self, model, inputs, num_items_in_batch=None):  # type: ignore[override]
        start = time.perf_counter()
        out = super().training_step(model, inputs, num_items_in_batch)
        self.cost_aware_state["po_seconds"] += time.perf_counter() - start
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training and "loss" in logs:
            logs = {**logs, **{f"cost_aware/{k}": float(v) for k, v in self.cost_aware_state.items()}}
        super().log(logs, start_time)

    def _save_checkpoint(self, model, trial):  # type: ignore[override]
        super()._save_checkpoint(model, trial)
        folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
        if os.path.isdir(folder):
            with open(os.path.join(folder, _STATE_FILE), "w") as f:
                json.dump(self.cost_aware_state, f)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):  # type: ignore[override]
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        path = os.path.join(resume_from_checkpoint, _STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self.cost_aware_state.update(json.load(f))
