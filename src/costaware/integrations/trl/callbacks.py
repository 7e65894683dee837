"""The PO-token budget of :class:`~costaware.integrations.trl.trainer.CostAwareGRPOTrainer`:
:class:`TokenBudget` stops training once the policy-optimisation tokens reach ``cost_aware_token_budget``.

The budget is checked when the generation batch the trainer is feeding is spent (TRL regenerates
every ``steps_per_generation × num_iterations`` micro-steps). The counters count a batch's tokens when
its plan is drawn, so a check mid-batch would stop with tokens counted but never fed; at the batch's
end every counted token has been fed. The counters are totals over processes, computed from the global
plan that every process draws alike, and TRL's micro-step counter advances alike on every process, so
every process stops at the same optimiser step (no collective needed).
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

__all__ = ["TokenBudget", "batch_spent"]

logger = logging.getLogger(__name__)


def batch_spent(trainer: Any) -> bool:
    """Whether the trainer's current generation batch has been fed in full (TRL regenerates next)."""
    return trainer._step % (trainer.args.steps_per_generation * trainer.num_iterations) == 0


class TokenBudget(TrainerCallback):
    """``control.should_training_stop`` once ``cost_aware/total/tokens`` >= ``cost_aware_token_budget``
    at the end of a generation batch (0 = off). The stop is logged (a warning on the main process, with the
    totals) and kept in ``trainer.cost_aware_stop_reason`` (None while the budget has not stopped the run)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        trainer.cost_aware_stop_reason = None

    def on_step_end(self, args, state, control, **kwargs):
        budget = self.trainer.args.cost_aware_token_budget
        counters = self.trainer.cost_aware_counters
        if budget and batch_spent(self.trainer) and counters.tokens >= budget:
            control.should_training_stop = True
            self.trainer.cost_aware_stop_reason = message = (
                f"cost_aware_token_budget={budget} reached: {int(counters.tokens)} policy-optimisation tokens "
                f"(plain GRPO would have fed {int(counters.tokens_plain)}) after {state.global_step} optimiser "
                f"steps and {int(counters.generations)} generation batches; training stops here"
                + (f", before max_steps={args.max_steps}" if args.max_steps > state.global_step else "")
            )
            if state.is_world_process_zero:
                logger.warning(message)
