"""The trainer the TRL adapter's mixins are type-checked against; imported under ``TYPE_CHECKING`` only.

The mixins (:mod:`~costaware.integrations.trl.zvf`, :mod:`~costaware.integrations.trl.logprobs`,
:mod:`~costaware.integrations.trl.rollout`) read ``GRPOTrainer``'s state and the state
:class:`~costaware.integrations.trl.trainer.CostAwareGRPOTrainer` adds. For the type checker they derive
from :class:`TrainerState`; at run time from ``object``, so the trainer's MRO is what it always was.
TRL declares some attributes optional that are set once the trainer (or ``GRPOConfig.__post_init__``)
has run; they are declared here as they are by then.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import GRPOTrainer

from costaware.grpo.accounting import Counters
from costaware.grpo.beta import BetaCalibrator
from costaware.grpo.config import SamplingConfig
from costaware.integrations.trl.config import CostAwareGRPOConfig
from costaware.rollouts.stage import PromptStage

__all__ = ["ResolvedConfig", "TrainerState"]


class ResolvedConfig(CostAwareGRPOConfig):
    """The config after ``__post_init__``: these are filled in (and the dict fields parsed from JSON)."""

    steps_per_generation: int
    generation_batch_size: int
    gradient_checkpointing_kwargs: dict[str, Any] | None


class TrainerState(GRPOTrainer):
    """``GRPOTrainer`` once built, with the state ``CostAwareGRPOTrainer.__init__`` sets."""

    args: ResolvedConfig
    model: PreTrainedModel  # a PEFT model is used through the same calls
    processing_class: PreTrainedTokenizerBase  # multimodal batches are refused
    train_dataset: Dataset[Any]  # read in training, which needs one
    num_generations: int
    max_completion_length: int
    sampling: SamplingConfig
    cost_aware_counters: Counters
    cost_aware_calibrator: BetaCalibrator | None  # measure.init_calibration
    cost_aware_calibration_seconds: float
    prompt_stage: PromptStage | None
    _ca_rewards: torch.Tensor | None
    _zvf_iter: Any
    _zvf_loader: Any
