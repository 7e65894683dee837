"""Engine-neutral Cost-Aware GRPO: sampling methods (objects, :mod:`~costaware.grpo.methods`), config and
plans (global, sharded per rank), one round's entry point (:func:`~costaware.grpo.step.plan_round`),
per-loss-family factors, advantages, losses, ZVF, accounting and proxy diagnostics."""

from costaware.grpo.accounting import Counters, StepCounts
from costaware.grpo.advantages import group_advantages, sequence_costs, sequence_costs_from_masks
from costaware.grpo.config import METHODS, SamplingConfig, plan_seed
from costaware.grpo.diagnostics import per_sequence_grad_norms, proxy_fidelity
from costaware.grpo.factors import StepNormaliser, global_tokens, row_factors, step_normalisers
from costaware.grpo.losses import AGG_MODES, aggregate, cispo_token_loss, grpo_token_loss, importance_ratio
from costaware.grpo.methods import SamplingMethod, method_from_name
from costaware.grpo.plan import MiniBatch, Plan, plan_minibatches
from costaware.grpo.pods import cost_pods_select, pods_select
from costaware.grpo.shard import ShardStep, shard_minibatches
from costaware.grpo.zvf import FillReport, FillResult, fill_batch, nonzero_variance_groups

__all__ = [
    "AGG_MODES",
    "METHODS",
    "SamplingMethod",
    "cost_pods_select",
    "method_from_name",
    "Counters",
    "FillReport",
    "FillResult",
    "MiniBatch",
    "Plan",
    "SamplingConfig",
    "ShardStep",
    "StepCounts",
    "StepNormaliser",
    "aggregate",
    "cispo_token_loss",
    "fill_batch",
    "global_tokens",
    "group_advantages",
    "grpo_token_loss",
    "importance_ratio",
    "nonzero_variance_groups",
    "per_sequence_grad_norms",
    "plan_minibatches",
    "plan_seed",
    "pods_select",
    "proxy_fidelity",
    "row_factors",
    "sequence_costs",
    "sequence_costs_from_masks",
    "shard_minibatches",
    "step_normalisers",
]
