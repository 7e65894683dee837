"""Engine-neutral Cost-Aware GRPO: sampling plans, advantages, losses, ZVF and proxy diagnostics."""

from costaware.grpo.advantages import group_advantages, sequence_costs, sequence_costs_from_masks
from costaware.grpo.diagnostics import per_sequence_grad_norms, proxy_fidelity
from costaware.grpo.losses import AGG_MODES, aggregate, cispo_token_loss, grpo_token_loss, importance_ratio
from costaware.grpo.plan import METHODS, MiniBatch, Plan, SamplingConfig, plan_minibatches, pods_select
from costaware.grpo.zvf import FillReport, FillResult, fill_batch, nonzero_variance_groups

__all__ = [
    "AGG_MODES", "METHODS", "FillReport", "FillResult", "MiniBatch", "Plan", "SamplingConfig",
    "aggregate", "cispo_token_loss", "fill_batch", "group_advantages", "grpo_token_loss", "importance_ratio",
    "nonzero_variance_groups", "per_sequence_grad_norms", "plan_minibatches", "pods_select", "proxy_fidelity",
    "sequence_costs", "sequence_costs_from_masks",
]
