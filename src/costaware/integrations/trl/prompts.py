"""The prompt stage in TRL: a train sampler that lets a :class:`costaware.rollouts.stage.PromptStage`
choose each generation round's prompts, and the trainer's side of it.

TRL's ``RepeatSampler`` yields a round as B prompt indices, each repeated G times in a row, the whole
block repeated ``num_iterations × steps_per_generation`` times (one block per optimiser step of the
round). :class:`PromptStageSampler` yields the same layout, with the B prompts drawn by the stage at the
moment the round's first index is asked for. Every process runs the same sampler on the same seed and
feeds the stage the same gathered rewards, so every process draws the same prompts, as TRL needs.

The DataLoader (accelerate's) fetches one batch ahead: with ``steps_per_generation`` ≥ 2 a round is
drawn after the previous round's rewards were folded in; with 1 it is drawn one round earlier. Either
way a draw depends only on past rounds, so a weighted stage stays unbiased.

A weighted stage's prompt factor f_j = 1/(N q_j) scales every advantage of prompt j's group before the
row plan sees them: the GRPO/CISPO/DAPO per-row losses are positively homogeneous in A (the clip acts
on the ratio and only A's sign chooses the branch), so this is the row's loss times f_j.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from costaware._io import write_json_atomic
from costaware.rollouts.stage import PromptStage

__all__ = [
    "PromptStageSampler",
    "fold_round",
    "train_sampler",
    "build_stage",
    "round_metrics",
    "rounds_per_pass",
    "STATE_FILE",
]

STATE_FILE = "cost_aware_prompt_stage.json"  # in every checkpoint folder, beside the counters


class PromptStageSampler(Sampler[int]):
    """Yields prompt indices in ``RepeatSampler``'s layout, each round's prompts drawn by ``stage``.

    Args:
        stage: the run's :class:`PromptStage` (the trainer keeps it to feed it rewards).
        group_size: G, the repeat of each prompt (``num_generations``).
        repeat_count: ``num_iterations × steps_per_generation``.
        rounds: rounds per pass (``__len__``); the trainer stops by ``max_steps``.
    """

    def __init__(self, stage: PromptStage, *, group_size: int, repeat_count: int, rounds: int) -> None:
        if not isinstance(stage, PromptStage):
            raise TypeError(f"stage must be a PromptStage, got {type(stage).__name__}")
        self.stage = stage
        self.group_size, self.repeat_count, self.rounds = int(group_size), int(repeat_count), int(rounds)

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.rounds):
            ids = self.stage.draw().prompt_ids.tolist()
            block = [i for i in ids for _ in range(self.group_size)]
            for _ in range(self.repeat_count):
                yield from block
            # a draw repeats until update(): a round that was never scored (the run stopped) is not skipped

    def __len__(self) -> int:
        return self.rounds * self.stage.batch * self.group_size * self.repeat_count


def fold_round(
    stage: PromptStage, rewards: torch.Tensor, lengths: torch.Tensor, costs: torch.Tensor | None = None
) -> np.ndarray:
    """Fold a scored round into the stage; return each global row's prompt factor (rows in draw order).

    ``rewards`` and ``lengths`` are the round's gathered per-row rewards (pass/fail, in [0, 1]: the state
    models a pass rate) and completion lengths, B·G rows in the order the sampler yielded them (process 0's
    rows first, as TRL gathers); ``costs`` (prompt + completion tokens) give the prompts' lengths.
    """
    d = stage.draw()  # the round in progress
    g = stage.state.config.group_size
    b = d.prompt_ids.size
    if rewards.numel() != b * g or lengths.numel() != b * g:
        raise ValueError(
            f"the round has {rewards.numel()} rewards and {lengths.numel()} lengths, but its "
            f"{b} prompts x {g} completions need {b * g} (ZVF or a custom sampler changes the rows)"
        )
    prompt_tokens = (
        None if costs is None else (costs.double() - lengths.double()).reshape(b, g)[:, 0].clamp(min=0).numpy()
    )
    stage.update(
        d.prompt_ids,
        rewards.double().reshape(b, g).numpy(),
        lengths.double().reshape(b, g).numpy(),
        prompt_tokens=prompt_tokens,
    )
    return np.repeat(d.factors, g)


def build_stage(trainer: Any) -> PromptStage | None:
    """The trainer's prompt stage from ``cost_aware_rollout`` (None: TRL's own sampler, every prompt generated)."""
    args = trainer.args
    if args.cost_aware_rollout == "all":
        return None
    if isinstance(trainer.train_dataset, torch.utils.data.IterableDataset) or trainer.train_dataset is None:
        raise ValueError(
            f"cost_aware_rollout={args.cost_aware_rollout!r} needs a map-style train_dataset "
            "(it draws prompts by index)"
        )
    return PromptStage(
        args.prompt_rule(po_rows="all" if trainer.sampling.rule.plain else "nonzero"),
        num_prompts=len(trainer.train_dataset),
        group_size=trainer.num_generations,
        prompts_per_round=args.generation_batch_size // trainer.num_generations,
        seed=int(args.seed),
    )


def train_sampler(trainer: Any) -> PromptStageSampler:
    """The sampler for ``trainer`` (a CostAwareGRPOTrainer with a prompt stage)."""
    return PromptStageSampler(
        trainer.prompt_stage,
        group_size=trainer.num_generations,
        repeat_count=trainer.num_iterations * trainer.args.steps_per_generation,
        rounds=rounds_per_pass(trainer),
    )


def rounds_per_pass(trainer: Any) -> int:
    """Rounds per pass over the sampler. With ``max_steps`` > 0 the trainer stops by it: enough rounds for
    it. With ``max_steps`` <= 0 (epoch-based) TRL sizes the run from the sampler's length, so a pass holds
    the rounds of one epoch of TRL's own sampler, N // B, and the run trains as many steps as without the
    stage (each round draws B prompts by the stage's rule, not an epoch's permutation)."""
    args = trainer.args
    if int(args.max_steps) > 0:
        return int(args.max_steps) // args.steps_per_generation + 1
    return max(1, len(trainer.train_dataset) // trainer.prompt_stage.batch)


def round_metrics(draw: Any, rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """A scored round's counts, logged under ``cost_aware/prompts/*``: prompts generated, candidates examined
    and skipped (the skip rules), distinct prompts, the prompt factors' mean and largest value, and the share
    of groups whose rewards are all equal (zero advantage, no signal)."""
    r = rewards.double().reshape(-1, group_size)
    return {
        "cost_aware/prompts/generated": float(draw.prompt_ids.size),
        "cost_aware/prompts/examined": float(draw.examined),
        "cost_aware/prompts/skipped": float(draw.examined - draw.prompt_ids.size),
        "cost_aware/prompts/unique": float(np.unique(draw.prompt_ids).size),
        "cost_aware/prompts/weight_mean": float(np.mean(draw.factors)),
        "cost_aware/prompts/weight_max": float(np.max(draw.factors)),
        "cost_aware/prompts/zero_variance_share": float((r.max(1).values == r.min(1).values).double().mean()),
    }


def save_stage(stage: PromptStage | None, folder: str) -> None:
    """The prompt stage's state into a checkpoint folder (atomic); nothing without a stage."""
    if stage is None:
        return
    write_json_atomic(os.path.join(folder, STATE_FILE), stage.state_dict())


def load_stage(stage: PromptStage | None, folder: str, rollout: str) -> None:
    """Restore the prompt stage from a checkpoint folder; a checkpoint without one is refused by name
    (``rollout``: the run's ``cost_aware_rollout``)."""
    if stage is None:
        return
    path = os.path.join(folder, STATE_FILE)
    if not os.path.exists(path):
        raise ValueError(
            f"checkpoint {folder!r} has no {STATE_FILE}: it was not saved with cost_aware_rollout={rollout!r}"
        )
    with open(path, encoding="utf-8") as fh:
        stage.load_state_dict(json.load(fh))
