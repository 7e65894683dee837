"""Engine-neutral Cost-Aware GRPO: sampling plans (and, alongside, advantages, losses, ZVF, diagnostics)."""

from costaware.grpo.plan import METHODS, MiniBatch, Plan, SamplingConfig, plan_minibatches, pods_select

__all__ = ["METHODS", "MiniBatch", "Plan", "SamplingConfig", "plan_minibatches", "pods_select"]
